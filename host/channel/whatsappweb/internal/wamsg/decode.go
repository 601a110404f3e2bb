package wamsg

import (
	"encoding/json"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
)

// Decode turns a whatsmeow message event into what botrun admits, or
// says why it is ignored (skip != ""): the device's own messages, status
// broadcasts and broadcast lists, newsletters, edits, group messages
// (unless groups) and the message types botrun does not handle
// (reactions, locations, contacts, polls, protocol messages).
//
// Chat is the chat's JID (a user's "…@s.whatsapp.net" or "…@lid", a
// group's "…@g.us"), From the sender's JID without its device. A reply is
// read as its text; a button, list or template-button response is an
// Interaction (its id, its title, and the id of the message it answered).
//
// View-once media carry no Ref unless durableViewOnce: the host may journal
// a message's raw refs (durability.inbox.media_refs = false), so a ref that
// holds the media key must not reach it at all.
func Decode(e *events.Message, groups, durableViewOnce bool) (msg channel.Message, skip string) {
	info := e.Info
	switch {
	case e.Message == nil:
		return msg, "no content"
	case info.IsFromMe:
		return msg, "own message"
	case info.Chat.Server == types.BroadcastServer:
		return msg, "status or broadcast list"
	case info.Chat.Server == types.NewsletterServer:
		return msg, "newsletter"
	case info.IsGroup && !groups:
		return msg, "group (groups = false)"
	case e.IsEdit:
		return msg, "edit"
	case info.ID == "":
		return msg, "no message id"
	}
	msg = channel.Message{ID: info.ID, Chat: info.Chat.ToNonAD().String(), From: info.Sender.ToNonAD().String(), ReceivedAt: info.Timestamp}
	m := e.Message
	key := MsgKey{ID: info.ID, Chat: msg.Chat, Sender: msg.From}
	media := func(kind string, d downloadable, mime, caption string, viewOnce bool) {
		ref := Ref{Type: kind, DirectPath: d.GetDirectPath(), MediaKey: d.GetMediaKey(),
			FileSHA256: d.GetFileSHA256(), FileEncSHA256: d.GetFileEncSHA256(), FileLength: d.GetFileLength(),
			MIME: mime, ViewOnce: viewOnce || e.IsViewOnce, Key: key}
		md := channel.Media{Type: kind, MIME: mime, Caption: caption}
		if ref.Valid() == nil && (!ref.ViewOnce || durableViewOnce) {
			md.Ref = ref.Encode()
		}
		msg.Media = append(msg.Media, md)
		msg.Text = caption
	}
	switch {
	case m.Conversation != nil:
		msg.Text = m.GetConversation()
	case m.ExtendedTextMessage != nil:
		msg.Text = m.GetExtendedTextMessage().GetText()
	case m.ImageMessage != nil:
		x := m.GetImageMessage()
		media("image", x, x.GetMimetype(), x.GetCaption(), x.GetViewOnce())
	case m.VideoMessage != nil:
		x := m.GetVideoMessage()
		media("video", x, x.GetMimetype(), x.GetCaption(), x.GetViewOnce())
	case m.AudioMessage != nil:
		x := m.GetAudioMessage()
		media("audio", x, x.GetMimetype(), "", x.GetViewOnce())
	case m.DocumentMessage != nil:
		x := m.GetDocumentMessage()
		media("document", x, x.GetMimetype(), x.GetCaption(), false)
	case m.StickerMessage != nil:
		x := m.GetStickerMessage()
		media("sticker", x, x.GetMimetype(), "", false)
	case m.ButtonsResponseMessage != nil:
		x := m.GetButtonsResponseMessage()
		msg.Interaction = interaction(x.GetSelectedButtonID(), x.GetSelectedDisplayText(), x.GetContextInfo())
	case m.ListResponseMessage != nil:
		x := m.GetListResponseMessage()
		msg.Interaction = interaction(x.GetSingleSelectReply().GetSelectedRowID(), x.GetTitle(), x.GetContextInfo())
	case m.TemplateButtonReplyMessage != nil:
		x := m.GetTemplateButtonReplyMessage()
		msg.Interaction = interaction(x.GetSelectedID(), x.GetSelectedDisplayText(), x.GetContextInfo())
	case m.InteractiveResponseMessage != nil:
		x := m.GetInteractiveResponseMessage()
		var params struct {
			ID string `json:"id"`
		}
		json.Unmarshal([]byte(x.GetNativeFlowResponseMessage().GetParamsJSON()), &params)
		msg.Interaction = interaction(params.ID, x.GetBody().GetText(), x.GetContextInfo())
	}
	if msg.Interaction != nil && msg.Interaction.ID == "" {
		// A response without an id to report: read as its title's text.
		msg.Text, msg.Interaction = msg.Interaction.Title, nil
	}
	if msg.Text == "" && len(msg.Media) == 0 && msg.Interaction == nil {
		return channel.Message{}, "type not handled"
	}
	return msg, ""
}

// interaction is a press: the chosen id and title, and the message it was on.
func interaction(id, title string, ctx *waE2E.ContextInfo) *abi.Interaction {
	return &abi.Interaction{ID: id, Title: title, Message: ctx.GetStanzaID()}
}
