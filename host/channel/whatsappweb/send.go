package whatsappweb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

// MaxMediaOut is the largest outbound media file fetched from a URL.
const MaxMediaOut = 64 << 20

// rateLimitWait is the wait asked after WhatsApp's rate-overlimit (429) and
// resource-limit (419) answers, which carry none.
const rateLimitWait = 30 * time.Second

// messageID is the WhatsApp message id of a send: derived from the bot's
// scope, the provider and the outbox key, so every attempt of one send
// carries the same id (WhatsApp Web's shape: "3EB0" and 18 hex digits).
func (p *Provider) messageID(key string) types.MessageID {
	if key == "" {
		return ""
	}
	h := sha256.Sum256([]byte(p.scope + "\x00" + p.cfg.ID + "\x00" + key))
	return types.MessageID(whatsmeow.WebMessageIDPrefix + strings.ToUpper(hex.EncodeToString(h[:9])))
}

// Send implements channel.Provider: a text (Conversation) or a media
// message with the text as its caption, to a user or a group; the message id
// is the ref. Buttons and lists are refused (WhatsApp shows them only from
// the Business API). A phone-number recipient is checked with IsOnWhatsApp
// first (WhatsApp accepts a message to a number without an account and
// delivers it nowhere). After a send, the chat's admitted messages are
// marked read and the typing indicator is cleared.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return "", fmt.Errorf("%w: whatsapp-web sends no buttons or lists (WhatsApp shows them only from the Business API: use meta-whatsapp)", channel.ErrUnsupportedContent)
	}
	to, err := wamsg.ParseChat(msg.Chat)
	if err != nil {
		return "", err
	}
	if msg.Media == nil && strings.TrimSpace(msg.Text) == "" {
		return "", fmt.Errorf("%w: whatsapp-web: an empty text", channel.ErrUnsupportedContent)
	}
	if n := utf8.RuneCountInString(msg.Text); n > TextLimit {
		return "", fmt.Errorf("%w: whatsapp-web: a text of %d characters (at most %d)", channel.ErrPayloadTooLarge, n, TextLimit)
	}
	if msg.Media != nil {
		if err := checkMedia(msg.Media, msg.Text); err != nil {
			return "", err
		}
	}
	cli := p.client()
	if cli == nil {
		return "", p.errNotConnected()
	}
	if to, err = p.recipient(ctx, cli, to); err != nil {
		return "", err
	}
	var wm *waE2E.Message
	if msg.Media != nil {
		if wm, err = p.mediaMessage(ctx, cli, msg.Media, msg.Text); err != nil {
			return "", err
		}
	} else {
		wm = &waE2E.Message{Conversation: proto.String(msg.Text)}
	}
	if err := p.leaseHeld(); err != nil {
		return "", err
	}
	resp, err := cli.SendMessage(ctx, to, wm, whatsmeow.SendRequestExtra{ID: p.messageID(msg.Key)})
	if err != nil {
		return "", p.sendErr(err)
	}
	p.answered(ctx, cli, to)
	return string(resp.ID), nil
}

// checkMedia refuses, before any request, what the media message cannot
// carry.
func checkMedia(m *channel.Media, text string) error {
	if wamsg.MediaType(m.Type) == "" {
		return fmt.Errorf("%w: whatsapp-web cannot send media of type %q", channel.ErrUnsupportedContent, m.Type)
	}
	if m.Ref == "" && m.URL == "" {
		return fmt.Errorf("%w: whatsapp-web: media without ref or url", channel.ErrUnsupportedContent)
	}
	if (m.Type == "audio" || m.Type == "sticker") && httpkit.CaptionText(m.Caption, text) != "" {
		return fmt.Errorf("%w: whatsapp-web: %s carries no caption: send the text on its own", channel.ErrUnsupportedContent, m.Type)
	}
	return nil
}

// recipient checks a phone-number recipient is on WhatsApp (once per
// process, and never for a chat seen inbound) and returns the JID WhatsApp
// knows it by.
func (p *Provider) recipient(ctx context.Context, cli Client, to types.JID) (types.JID, error) {
	if to.Server != types.DefaultUserServer {
		return to, nil
	}
	p.mu.Lock()
	known, ok := p.onWhatsApp[to.String()]
	p.mu.Unlock()
	if ok {
		return known, nil
	}
	res, err := cli.IsOnWhatsApp(ctx, []string{"+" + to.User})
	if err != nil {
		return to, p.sendErr(fmt.Errorf("checking the recipient: %w", err))
	}
	for _, r := range res {
		if r.IsIn && !r.JID.IsEmpty() {
			p.mu.Lock()
			if len(p.onWhatsApp) > 100000 {
				clear(p.onWhatsApp)
			}
			p.onWhatsApp[to.String()] = r.JID
			p.mu.Unlock()
			return r.JID, nil
		}
	}
	return to, fmt.Errorf("%w: whatsapp-web %s: +%s is not on WhatsApp", channel.ErrRecipientUnreachable, p.cfg.ID, to.User)
}

// mediaMessage builds a media message: a ref of this channel's is sent as
// it is (WhatsApp forwards by reusing the uploaded file); a URL is fetched
// (public addresses only) and uploaded.
func (p *Provider) mediaMessage(ctx context.Context, cli Client, m *channel.Media, text string) (*waE2E.Message, error) {
	caption := httpkit.CaptionText(m.Caption, text)
	var r wamsg.Ref
	fileName := ""
	if m.Ref != "" {
		var err error
		if r, err = wamsg.DecodeRef(m.Ref); err != nil {
			return nil, fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, err)
		}
		if r.Type != m.Type && !(wamsg.MediaType(r.Type) == wamsg.MediaType(m.Type)) {
			return nil, fmt.Errorf("%w: whatsapp-web: a %s ref sent as %s", channel.ErrUnsupportedContent, r.Type, m.Type)
		}
		r.Type = m.Type
	} else {
		data, ctype, name, err := p.fetch(ctx, m.URL)
		if err != nil {
			return nil, err
		}
		up, err := cli.Upload(ctx, data, wamsg.MediaType(m.Type))
		if err != nil {
			return nil, p.sendErr(fmt.Errorf("uploading media: %w", err))
		}
		r = wamsg.Ref{Type: m.Type, DirectPath: up.DirectPath, MediaKey: up.MediaKey, FileSHA256: up.FileSHA256,
			FileEncSHA256: up.FileEncSHA256, FileLength: up.FileLength, MIME: ctype}
		fileName = name
	}
	if m.MIME != "" {
		r.MIME = m.MIME
	}
	if r.MIME == "" {
		r.MIME = map[string]string{"image": "image/jpeg", "sticker": "image/webp", "video": "video/mp4", "audio": "audio/ogg; codecs=opus"}[m.Type]
	}
	out := r.Message(r.DirectPath)
	var c *string
	if caption != "" {
		c = proto.String(caption)
	}
	switch {
	case out.ImageMessage != nil:
		out.ImageMessage.Caption = c
	case out.VideoMessage != nil:
		out.VideoMessage.Caption = c
	case out.DocumentMessage != nil:
		out.DocumentMessage.Caption = c
		if fileName == "" {
			fileName = "file"
		}
		out.DocumentMessage.FileName = proto.String(fileName)
	}
	return out, nil
}

// fetch downloads an outbound media URL: at most MaxMediaOut bytes, its
// content type, and a file name from its path.
func (p *Provider) fetch(ctx context.Context, raw string) (data []byte, ctype, name string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil || (req.URL.Scheme != "https" && req.URL.Scheme != "http") {
		return nil, "", "", fmt.Errorf("%w: whatsapp-web: media url is not an http(s) URL", channel.ErrUnsupportedContent)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		// The error names the URL, whose path or query may be a credential:
		// only its scheme and host are kept (the outbox stores and logs it).
		redacted := errors.New(httpkit.HostOnly(req.URL)(err))
		if errors.Is(err, httpkit.ErrAddressRefused) || errors.Is(err, httpkit.ErrRedirectRefused) {
			return nil, "", "", fmt.Errorf("%w: whatsapp-web: fetching the media: %s", channel.ErrUnsupportedContent, redacted)
		}
		return nil, "", "", fmt.Errorf("whatsapp-web: fetching the media: %w", redacted)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
		return nil, "", "", fmt.Errorf("%w: whatsapp-web: the media url answered HTTP %d", channel.ErrUnsupportedContent, resp.StatusCode)
	default:
		return nil, "", "", fmt.Errorf("whatsapp-web: the media url answered HTTP %d", resp.StatusCode)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, MaxMediaOut+1))
	if err != nil {
		return nil, "", "", fmt.Errorf("whatsapp-web: fetching the media: %w", err)
	}
	if len(data) > MaxMediaOut {
		return nil, "", "", fmt.Errorf("%w: whatsapp-web: media over %d bytes", channel.ErrPayloadTooLarge, MaxMediaOut)
	}
	if len(data) == 0 {
		return nil, "", "", fmt.Errorf("%w: whatsapp-web: the media url answered an empty file", channel.ErrUnsupportedContent)
	}
	ctype = resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ctype); err != nil || mt == "application/octet-stream" {
		ctype = http.DetectContentType(data)
	}
	name = path.Base(req.URL.Path)
	if name == "/" || name == "." {
		name = ""
	}
	return data, ctype, name, nil
}

// sendErr maps whatsmeow's errors onto the taxonomy: rate limits (IQ 429
// rate-overlimit, 419 resource-limit, a message acknowledged with error 429)
// wait; a recipient WhatsApp cannot address (a device JID, an unknown
// server, a group the account is not in or that does not exist, 403/404
// acknowledgements) is unreachable; a message acknowledged 400/406 is
// unsupported content; anything else (not connected, timeouts, a lost
// connection) is retried.
func (p *Provider) sendErr(err error) error {
	wrap := func(sentinel error) error { return fmt.Errorf("%w: whatsapp-web %s: %w", sentinel, p.cfg.ID, err) }
	switch {
	case errors.Is(err, whatsmeow.ErrIQRateOverLimit), errors.Is(err, whatsmeow.ErrIQResourceLimit):
		return &channel.RateLimitedError{RetryAfter: rateLimitWait, Err: fmt.Errorf("whatsapp-web %s: %w", p.cfg.ID, err)}
	case errors.Is(err, whatsmeow.ErrRecipientADJID), errors.Is(err, whatsmeow.ErrUnknownServer), errors.Is(err, whatsmeow.ErrBroadcastListUnsupported),
		errors.Is(err, whatsmeow.ErrNotInGroup), errors.Is(err, whatsmeow.ErrGroupNotFound),
		errors.Is(err, whatsmeow.ErrIQForbidden), errors.Is(err, whatsmeow.ErrIQNotFound):
		return wrap(channel.ErrRecipientUnreachable)
	case errors.Is(err, whatsmeow.ErrServerReturnedError):
		switch serverCode(err) {
		case 429:
			return &channel.RateLimitedError{RetryAfter: rateLimitWait, Err: fmt.Errorf("whatsapp-web %s: %w", p.cfg.ID, err)}
		case 403, 404:
			return wrap(channel.ErrRecipientUnreachable)
		case 400, 406:
			return wrap(channel.ErrUnsupportedContent)
		}
	}
	return fmt.Errorf("whatsapp-web %s: %w", p.cfg.ID, err)
}

// serverCode is the code of whatsmeow's "server returned error N".
func serverCode(err error) int {
	s := err.Error()
	i := strings.LastIndex(s, whatsmeow.ErrServerReturnedError.Error())
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+len(whatsmeow.ErrServerReturnedError.Error()):])
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimRight(fields[0], ":,)"))
	return n
}

// answered marks the chat's admitted messages read and clears the typing
// indicator, after a send there. Failures are logged: the send went out.
func (p *Provider) answered(ctx context.Context, cli Client, to types.JID) {
	p.mu.Lock()
	unread := p.unread[to.String()]
	delete(p.unread, to.String())
	p.mu.Unlock()
	p.markRead(ctx, cli, to, unread)
	cli.SendChatPresence(ctx, to, types.ChatPresencePaused, "")
}

// markRead sends read receipts, one per sender (as WhatsApp wants them).
func (p *Provider) markRead(ctx context.Context, cli Client, chat types.JID, msgs []unreadMessage) {
	bySender := map[types.JID][]types.MessageID{}
	var order []types.JID
	for _, m := range msgs {
		if _, ok := bySender[m.sender]; !ok {
			order = append(order, m.sender)
		}
		bySender[m.sender] = append(bySender[m.sender], m.id)
	}
	for _, s := range order {
		if err := cli.MarkRead(ctx, bySender[s], time.Now(), chat, s); err != nil {
			p.log.Warn("whatsapp-web: marking messages read failed", "provider", p.cfg.ID, "chat", chat.String(), "err", err)
		}
	}
}

// Typing implements channel.Typist: the message being answered (replyTo)
// is marked read, then "typing…" shows in the chat until the next send (or
// WhatsApp's own timeout). The device first tells WhatsApp it is online
// (presence "available"), once per connection.
func (p *Provider) Typing(ctx context.Context, chat, replyTo string) error {
	to, err := wamsg.ParseChat(chat)
	if err != nil {
		return err
	}
	cli := p.client()
	if cli == nil {
		return p.errNotConnected()
	}
	p.mu.Lock()
	var read []unreadMessage
	rest := p.unread[to.String()][:0:0]
	for _, m := range p.unread[to.String()] {
		if replyTo != "" && string(m.id) == replyTo {
			read = append(read, m)
		} else {
			rest = append(rest, m)
		}
	}
	p.unread[to.String()] = rest
	if len(rest) == 0 {
		delete(p.unread, to.String())
	}
	if len(read) == 0 && wamsg.ValidMessageID(replyTo) && to.Server != types.GroupServer {
		// Admitted before a restart: in a user's chat, the user sent it.
		read = []unreadMessage{{id: types.MessageID(replyTo), sender: to}}
	}
	online := p.available
	p.available = true
	p.mu.Unlock()
	p.markRead(ctx, cli, to, read)
	if !online {
		if err := cli.SendPresence(ctx, types.PresenceAvailable); err != nil && !errors.Is(err, whatsmeow.ErrNoPushName) {
			p.log.Warn("whatsapp-web: setting the presence failed", "provider", p.cfg.ID, "err", err)
		}
	}
	if err := cli.SendChatPresence(ctx, to, types.ChatPresenceComposing, types.ChatPresenceMediaText); err != nil {
		return p.sendErr(err)
	}
	return nil
}

// Edit implements channel.Editor: WhatsApp's message edit (the sender may
// edit a text for 15 minutes after sending it).
func (p *Provider) Edit(ctx context.Context, chat, ref, text string) error {
	to, err := wamsg.ParseChat(chat)
	if err != nil {
		return err
	}
	if !wamsg.ValidMessageID(ref) {
		return fmt.Errorf("%w: whatsapp-web: %q is not a message id", channel.ErrUnsupportedContent, ref)
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: whatsapp-web: an empty text", channel.ErrUnsupportedContent)
	}
	if n := utf8.RuneCountInString(text); n > TextLimit {
		return fmt.Errorf("%w: whatsapp-web: a text of %d characters (at most %d)", channel.ErrPayloadTooLarge, n, TextLimit)
	}
	cli := p.client()
	if cli == nil {
		return p.errNotConnected()
	}
	// BuildEdit only assembles the protocol message; it needs no client.
	edit := (*whatsmeow.Client)(nil).BuildEdit(to, types.MessageID(ref), &waE2E.Message{Conversation: proto.String(text)})
	if err := p.leaseHeld(); err != nil {
		return err
	}
	if _, err := cli.SendMessage(ctx, to, edit); err != nil {
		return p.sendErr(err)
	}
	return nil
}
