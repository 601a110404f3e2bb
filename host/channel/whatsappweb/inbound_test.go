package whatsappweb_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"
)

var group = types.NewJID("120363040000000001", types.GroupServer)

// aliceDevice is alice's phone as a sender: a JID with a device part.
var aliceDevice = types.NewADJID(alice.User, 0, 0)

func ctxInfo(stanza string) *waE2E.ContextInfo {
	return &waE2E.ContextInfo{StanzaID: proto.String(stanza), Participant: proto.String(account.String())}
}

func TestInboundMessagesAreAdmittedAsWhatsmeowDeliversThem(t *testing.T) {
	b, c := connectedBot(t, nil)
	img := b.net.Media("IMG1", whatsmeow.MediaImage, []byte("\x89PNG fake image"))
	aud := b.net.Media("AUD1", whatsmeow.MediaAudio, []byte("OggS voice"))
	vid := b.net.Media("VID1", whatsmeow.MediaVideo, []byte("mp4 video"))
	doc := b.net.Media("DOC1", whatsmeow.MediaDocument, []byte("%PDF-1.7"))
	stk := b.net.Media("STK1", whatsmeow.MediaImage, []byte("RIFF webp"))
	cases := []struct {
		id   types.MessageID
		msg  *waE2E.Message
		want channel.Message
	}{
		{"TXT1", &waE2E.Message{Conversation: proto.String("hola ¿qué tal?")},
			channel.Message{Text: "hola ¿qué tal?"}},
		{"RPL1", &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String("yes, that one"), ContextInfo: ctxInfo("3EB0AAAA")}},
			channel.Message{Text: "yes, that one"}},
		{"EPH1", &waE2E.Message{EphemeralMessage: &waE2E.FutureProofMessage{Message: &waE2E.Message{Conversation: proto.String("disappearing")}}},
			channel.Message{Text: "disappearing"}},
		{"IMG1", &waE2E.Message{ImageMessage: &waE2E.ImageMessage{URL: proto.String(img.URL), DirectPath: proto.String(img.DirectPath), MediaKey: img.MediaKey,
			FileSHA256: img.FileSHA256, FileEncSHA256: img.FileEncSHA256, FileLength: proto.Uint64(img.FileLength), Mimetype: proto.String("image/png"),
			Caption: proto.String("look"), JPEGThumbnail: []byte("thumbnail bytes")}},
			channel.Message{Text: "look", Media: []channel.Media{{Type: "image", MIME: "image/png", Caption: "look"}}}},
		{"AUD1", &waE2E.Message{AudioMessage: &waE2E.AudioMessage{DirectPath: proto.String(aud.DirectPath), MediaKey: aud.MediaKey,
			FileSHA256: aud.FileSHA256, FileEncSHA256: aud.FileEncSHA256, FileLength: proto.Uint64(aud.FileLength), Mimetype: proto.String("audio/ogg; codecs=opus"), PTT: proto.Bool(true)}},
			channel.Message{Media: []channel.Media{{Type: "audio", MIME: "audio/ogg; codecs=opus"}}}},
		{"VID1", &waE2E.Message{VideoMessage: &waE2E.VideoMessage{DirectPath: proto.String(vid.DirectPath), MediaKey: vid.MediaKey,
			FileSHA256: vid.FileSHA256, FileEncSHA256: vid.FileEncSHA256, FileLength: proto.Uint64(vid.FileLength), Mimetype: proto.String("video/mp4")}},
			channel.Message{Media: []channel.Media{{Type: "video", MIME: "video/mp4"}}}},
		{"DOC1", &waE2E.Message{DocumentWithCaptionMessage: &waE2E.FutureProofMessage{Message: &waE2E.Message{DocumentMessage: &waE2E.DocumentMessage{
			DirectPath: proto.String(doc.DirectPath), MediaKey: doc.MediaKey, FileSHA256: doc.FileSHA256, FileEncSHA256: doc.FileEncSHA256,
			FileLength: proto.Uint64(doc.FileLength), Mimetype: proto.String("application/pdf"), FileName: proto.String("invoice.pdf"), Caption: proto.String("the invoice")}}}},
			channel.Message{Text: "the invoice", Media: []channel.Media{{Type: "document", MIME: "application/pdf", Caption: "the invoice"}}}},
		{"STK1", &waE2E.Message{StickerMessage: &waE2E.StickerMessage{DirectPath: proto.String(stk.DirectPath), MediaKey: stk.MediaKey,
			FileSHA256: stk.FileSHA256, FileEncSHA256: stk.FileEncSHA256, FileLength: proto.Uint64(stk.FileLength), Mimetype: proto.String("image/webp")}},
			channel.Message{Media: []channel.Media{{Type: "sticker", MIME: "image/webp"}}}},
		{"BTN1", &waE2E.Message{ButtonsResponseMessage: &waE2E.ButtonsResponseMessage{SelectedButtonID: proto.String("yes"),
			Response: &waE2E.ButtonsResponseMessage_SelectedDisplayText{SelectedDisplayText: "Yes"}, ContextInfo: ctxInfo("3EB0BTN")}},
			channel.Message{Interaction: &abi.Interaction{ID: "yes", Title: "Yes", Message: "3EB0BTN"}}},
		{"LST1", &waE2E.Message{ListResponseMessage: &waE2E.ListResponseMessage{Title: proto.String("Large"),
			SingleSelectReply: &waE2E.ListResponseMessage_SingleSelectReply{SelectedRowID: proto.String("size-l")}, ContextInfo: ctxInfo("3EB0LST")}},
			channel.Message{Interaction: &abi.Interaction{ID: "size-l", Title: "Large", Message: "3EB0LST"}}},
		{"TPL1", &waE2E.Message{TemplateButtonReplyMessage: &waE2E.TemplateButtonReplyMessage{SelectedID: proto.String("track"),
			SelectedDisplayText: proto.String("Track order"), ContextInfo: ctxInfo("3EB0TPL")}},
			channel.Message{Interaction: &abi.Interaction{ID: "track", Title: "Track order", Message: "3EB0TPL"}}},
		{"NFR1", &waE2E.Message{InteractiveResponseMessage: &waE2E.InteractiveResponseMessage{
			Body: &waE2E.InteractiveResponseMessage_Body{Text: proto.String("Blue")},
			InteractiveResponseMessage: &waE2E.InteractiveResponseMessage_NativeFlowResponseMessage_{NativeFlowResponseMessage: &waE2E.InteractiveResponseMessage_NativeFlowResponseMessage{
				Name: proto.String("quick_reply"), ParamsJSON: proto.String(`{"id":"color-blue"}`)}},
			ContextInfo: ctxInfo("3EB0NFR")}},
			channel.Message{Interaction: &abi.Interaction{ID: "color-blue", Title: "Blue", Message: "3EB0NFR"}}},
	}
	for _, tc := range cases {
		if !c.Emit(b.net.Incoming(tc.id, alice, aliceDevice, tc.msg)) {
			t.Fatalf("%s: not acknowledged", tc.id)
		}
	}
	got := b.admit.Admitted()
	if len(got) != len(cases) {
		t.Fatalf("admitted %d messages, want %d: %+v", len(got), len(cases), got)
	}
	for i, tc := range cases {
		m := got[i]
		if m.ID != string(tc.id) || m.Chat != alice.String() || m.From != alice.String() || m.Text != tc.want.Text || m.ReceivedAt.IsZero() {
			t.Errorf("%s admitted as %+v", tc.id, m)
		}
		if (m.Interaction == nil) != (tc.want.Interaction == nil) || (m.Interaction != nil && *m.Interaction != *tc.want.Interaction) {
			t.Errorf("%s: interaction %+v, want %+v", tc.id, m.Interaction, tc.want.Interaction)
		}
		if len(m.Media) != len(tc.want.Media) {
			t.Errorf("%s: media %+v", tc.id, m.Media)
			continue
		}
		for j, md := range m.Media {
			w := tc.want.Media[j]
			if md.Type != w.Type || md.MIME != w.MIME || md.Caption != w.Caption || !strings.HasPrefix(md.Ref, "wa1.") {
				t.Errorf("%s: media %+v, want %+v with a wa1. ref", tc.id, md, w)
			}
		}
	}
}

func TestInboundIgnoresOwnStatusGroupsEditsAndOtherTypes(t *testing.T) {
	b, c := connectedBot(t, nil)
	text := &waE2E.Message{Conversation: proto.String("x")}
	own := b.net.Incoming("OWN1", alice, device(), text)
	own.Info.IsFromMe = true
	ignored := []*events.Message{
		own,
		b.net.Incoming("STS1", types.StatusBroadcastJID, aliceDevice, text),
		b.net.Incoming("NWS1", types.NewJID("1203630000", types.NewsletterServer), aliceDevice, text),
		b.net.Incoming("GRP1", group, aliceDevice, text),
		b.net.Incoming("EDT1", alice, aliceDevice, &waE2E.Message{EditedMessage: &waE2E.FutureProofMessage{Message: text}}),
		b.net.Incoming("RCT1", alice, aliceDevice, &waE2E.Message{ReactionMessage: &waE2E.ReactionMessage{Text: proto.String("👍")}}),
		b.net.Incoming("LOC1", alice, aliceDevice, &waE2E.Message{LocationMessage: &waE2E.LocationMessage{DegreesLatitude: proto.Float64(1)}}),
		b.net.Incoming("PRT1", alice, aliceDevice, &waE2E.Message{ProtocolMessage: &waE2E.ProtocolMessage{Type: waE2E.ProtocolMessage_REVOKE.Enum()}}),
	}
	for _, e := range ignored {
		if !c.Emit(e) {
			t.Errorf("%s: ignored but not acknowledged (WhatsApp would deliver it again)", e.Info.ID)
		}
	}
	if got := b.admit.Admitted(); len(got) != 0 {
		t.Fatalf("admitted %+v", got)
	}
}

func TestGroupsAreAdmittedWithGroupsOn(t *testing.T) {
	b, c := connectedBot(t, func(c *whatsappweb.Config) { c.Groups = true })
	c.Emit(b.net.Incoming("GRP1", group, aliceDevice, &waE2E.Message{Conversation: proto.String("hi all")}))
	got := b.admit.Admitted()
	if len(got) != 1 || got[0].Chat != group.String() || got[0].From != alice.String() {
		t.Fatalf("a group message admitted as %+v", got)
	}
}

func TestAMessageIsAcknowledgedOnlyOnceJournaled(t *testing.T) {
	b, c := connectedBot(t, nil)
	msg := &waE2E.Message{Conversation: proto.String("later")}
	b.admit.Fail(errors.New("journal unavailable"))
	if c.Emit(b.net.Incoming("LATE1", alice, aliceDevice, msg)) {
		t.Fatal("a message the journal refused was acknowledged")
	}
	// The adapter reconnects, so WhatsApp delivers what is unacknowledged
	// again.
	fakekit.WaitFor(t, "the reconnection", func() bool {
		return strings.Contains(b.logs.String(), "reconnecting so WhatsApp delivers the unjournaled message again") && c.IsLoggedIn()
	})
	b.admit.Fail(nil)
	for i := 0; i < 2; i++ { // redelivered twice: admitted once
		if !c.Emit(b.net.Incoming("LATE1", alice, aliceDevice, msg)) {
			t.Fatal("the redelivery was not acknowledged")
		}
	}
	if got := b.admit.Admitted(); len(got) != 1 || got[0].ID != "LATE1" {
		t.Fatalf("admitted %+v", got)
	}
	// A message botrun never accepts is acknowledged (no redelivery loop).
	b.admit.Fail(channel.ErrInvalidMessage)
	if !c.Emit(b.net.Incoming("BAD1", alice, aliceDevice, msg)) {
		t.Fatal("an invalid message was not acknowledged")
	}
}
