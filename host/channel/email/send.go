package email

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/mail"
	"slices"
	"strings"
	"time"

	gomail "github.com/emersion/go-message/mail"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Send implements channel.Provider: one SMTP submission with AUTH, a reply
// in the chat's thread (In-Reply-To, References, "Re: " subject). The
// Message-ID is botrun's, derived from Outbound.Key, and is the returned
// id. A send with media takes its caption as (the start of) the text, and
// needs no text.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	text := msg.Text
	if msg.Media != nil {
		text = httpkit.CaptionText(msg.Media.Caption, msg.Text)
	}
	switch {
	case len(msg.Buttons) > 0 || msg.List != nil:
		return "", fmt.Errorf("%w: email has no buttons or lists", channel.ErrUnsupportedContent)
	case msg.Media != nil && msg.Media.Ref == "":
		return "", fmt.Errorf("%w: the email channel attaches only attachments it received", channel.ErrUnsupportedContent)
	case msg.Media == nil && strings.TrimSpace(text) == "":
		return "", fmt.Errorf("%w: an email needs text or an attachment", channel.ErrUnsupportedContent)
	}
	var attach *part
	if msg.Media != nil {
		a, err := p.loadPart(ctx, msg.Media.Ref, MaxAttachmentBytes)
		if httpkit.MediaGone(err) || errors.Is(err, channel.ErrMediaTooLarge) {
			return "", fmt.Errorf("%w: the attachment: %v", channel.ErrUnsupportedContent, err)
		}
		if err != nil {
			return "", err
		}
		attach = &a
	}
	t, ok, err := p.store.thread(ctx, msg.Chat)
	if err != nil {
		return "", fmt.Errorf("email: reading the thread: %w", err)
	}
	switch {
	case ok && t.V < threadChecked && !strings.EqualFold(msg.Chat, t.To):
		// Recorded by an earlier version, which named a chat after a
		// thread's root and let a stranger's reply re-point a chat: the
		// thread-named chats are retired, a re-pointed address refused.
		// Which of the two a chat is cannot be told (a root like
		// CAxyz@mail.gmail.com parses as an address).
		return "", fmt.Errorf("%w: chat %q was recorded by an earlier botrun for %q: a chat named after a thread is retired (%s's mail now goes to chat %q), and an address chat re-pointed at another address is refused until the address writes again", channel.ErrRecipientUnreachable, msg.Chat, t.To, t.To, t.To)
	case ok:
		t.V = threadChecked
	default:
		a, err := mail.ParseAddress(msg.Chat)
		if err != nil {
			return "", fmt.Errorf("%w: no thread is recorded for chat %q and it is not an address", channel.ErrRecipientUnreachable, msg.Chat)
		}
		t = thread{To: strings.ToLower(a.Address), Subject: "Message from " + p.from, V: threadChecked}
	}
	id, err := p.messageID(ctx, msg.Key)
	if err != nil {
		return "", fmt.Errorf("email: reading the Message-ID key: %w", err)
	}
	raw, err := p.compose(t, id, text, attach)
	if err != nil {
		return "", err
	}
	if err := p.submit(ctx, t.To, raw); err != nil {
		return "", err
	}
	t.References = append(slices.Clone(t.References), id)
	if err := p.store.record(ctx, msg.Chat, t, id); err != nil {
		p.env.Log().Warn("email: sent, but the thread was not updated", "provider", p.ID(), "err", err)
	}
	return id, nil
}

// messageID derives the Message-ID from the send's key, so that a resend of
// an ambiguous send carries the same id (a recipient's client can see the
// duplicate for what it is), under the channel's random key: an id botrun
// mints cannot be guessed from the send's key.
func (p *Provider) messageID(ctx context.Context, key string) (string, error) {
	seed := make([]byte, 16)
	if key != "" {
		k, err := p.store.mintingKey(ctx)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(p.ID() + "\x00" + key))
		seed = mac.Sum(nil)[:16]
	} else {
		rand.Read(seed)
	}
	domain := p.from[strings.LastIndexByte(p.from, '@')+1:]
	return "botrun." + hex.EncodeToString(seed) + "@" + domain, nil
}

// compose writes the message: text/plain in UTF-8, quoted-printable, and
// with attach (may be nil) a multipart/mixed of the text and attach.
func (p *Provider) compose(t thread, id, text string, attach *part) ([]byte, error) {
	var h gomail.Header
	h.SetDate(time.Now())
	h.SetAddressList("From", []*gomail.Address{{Address: p.from}})
	h.SetAddressList("To", []*gomail.Address{{Address: t.To}})
	h.SetSubject(t.Subject)
	h.SetMessageID(id)
	// RFC 3834: the bot's mail is automatic, so that another responder
	// does not answer it (and Exchange sends no out-of-office to it).
	h.Set("Auto-Submitted", "auto-generated")
	if n := len(t.References); n > 0 {
		h.SetMsgIDList("In-Reply-To", t.References[n-1:])
		h.SetMsgIDList("References", t.References)
		h.Set("Auto-Submitted", "auto-replied")
	}
	h.Set("X-Auto-Response-Suppress", "All")
	var b bytes.Buffer
	if attach == nil {
		h.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
		w, err := gomail.CreateSingleInlineWriter(&b, h)
		if err != nil {
			return nil, fmt.Errorf("email: writing the message: %w", err)
		}
		if err := writeAll(w, []byte(text)); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	w, err := gomail.CreateWriter(&b, h)
	if err != nil {
		return nil, fmt.Errorf("email: writing the message: %w", err)
	}
	var th gomail.InlineHeader
	th.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	tw, err := w.CreateSingleInline(th)
	if err != nil {
		return nil, fmt.Errorf("email: writing the message: %w", err)
	}
	if err := writeAll(tw, []byte(text)); err != nil {
		return nil, err
	}
	var ah gomail.AttachmentHeader
	ah.SetContentType(attach.MIME, nil)
	if attach.Filename != "" {
		ah.SetFilename(attach.Filename)
	}
	aw, err := w.CreateAttachment(ah)
	if err != nil {
		return nil, fmt.Errorf("email: writing the attachment: %w", err)
	}
	if err := writeAll(aw, attach.Data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeAll writes b to the part w and closes it.
func writeAll(w io.WriteCloser, b []byte) error {
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Close()
}

// submit delivers raw to the submission server.
func (p *Provider) submit(ctx context.Context, to string, raw []byte) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	d := &net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", p.smtp.addr)
	if err != nil {
		return fmt.Errorf("email: connecting to the SMTP server %s: %w", p.smtp.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var c *smtp.Client
	if p.smtp.implicit {
		c = smtp.NewClient(tls.Client(conn, p.smtp.tls))
	} else if c, err = smtp.NewClientStartTLS(conn, p.smtp.tls); err != nil {
		conn.Close()
		return smtpError("STARTTLS", err)
	}
	defer c.Close()
	if err := c.Hello(strings.TrimPrefix(p.from[strings.LastIndexByte(p.from, '@'):], "@")); err != nil {
		return smtpError("EHLO", err)
	}
	if err := c.Auth(sasl.NewPlainClient("", p.cfg.Username, p.cfg.Password)); err != nil {
		return smtpError("AUTH", err)
	}
	if err := c.Mail(p.from, nil); err != nil {
		return smtpError("MAIL FROM", err)
	}
	if err := c.Rcpt(to, nil); err != nil {
		return smtpError("RCPT TO", err)
	}
	w, err := c.Data()
	if err != nil {
		return smtpError("DATA", err)
	}
	if _, err := w.Write(raw); err != nil {
		return smtpError("DATA", err)
	}
	if err := w.Close(); err != nil {
		return smtpError("DATA", err)
	}
	c.Quit()
	return nil
}

// smtpError maps an SMTP reply onto the taxonomy: 4xx is worth a retry,
// 5xx is permanent (550 5.1.1 and the other bad-mailbox codes are an
// unreachable recipient, 552 and 5.3.4 a message too large).
func smtpError(stage string, err error) error {
	var se *smtp.SMTPError
	if !errors.As(err, &se) {
		return fmt.Errorf("email: SMTP %s: %w", stage, err)
	}
	e := fmt.Errorf("email: SMTP %s: %d %d.%d.%d %s", stage, se.Code, se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2], se.Message)
	switch {
	case se.Code >= 400 && se.Code < 500:
		return e
	case se.Code == 552 || se.EnhancedCode == smtp.EnhancedCode{5, 3, 4}:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, e)
	case se.EnhancedCode[0] == 5 && se.EnhancedCode[1] == 1,
		stage == "RCPT TO" && (se.Code == 550 || se.Code == 551 || se.Code == 553):
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, e)
	default:
		return &channel.PermanentError{Err: e}
	}
}
