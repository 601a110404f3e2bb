package messaging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// The Platform's limits on buttons, in characters. A send over one of them
// fails with channel.ErrUnsupportedContent before any request: nothing is
// ever cut.
const (
	// MaxTemplateButtons is the most buttons of a button template.
	MaxTemplateButtons = 3
	// MaxTemplateText bounds a button template's text.
	MaxTemplateText = 640
	// MaxQuickReplies is the most quick replies under one message.
	MaxQuickReplies = 13
	// MaxTitle bounds a button's or a quick reply's title (the Platform
	// cuts a longer quick reply; botrun refuses it).
	MaxTitle = 20
	// MaxPayload bounds a postback's or a quick reply's payload (the id).
	MaxPayload = 1000
)

// unsupported is a send refused before any request.
func (c *Channel) unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", channel.ErrUnsupportedContent, c.spec.Type, fmt.Sprintf(format, args...))
}

// TextLimits implements channel.Limiter: the spec's TextChars and
// TextBytes; up to three buttons go as a button template, whose text holds
// 640 characters; more reply buttons and lists go as quick replies under a
// text of the channel's own limit.
func (c *Channel) TextLimits(msg channel.Outbound) (chars, bytes int) {
	chars = c.spec.TextChars
	if msg.List == nil && len(msg.Buttons) > 0 && len(msg.Buttons) <= MaxTemplateButtons && (chars == 0 || MaxTemplateText < chars) {
		chars = MaxTemplateText
	}
	return chars, c.spec.TextBytes
}

// fits reports whether text fits one message of msg: the channel's limit,
// and a button template's when msg's buttons go as one.
func (c *Channel) fits(text string, msg channel.Outbound) bool {
	chars, bytes := c.TextLimits(msg)
	return (chars == 0 || utf8.RuneCountInString(text) <= chars) && (bytes == 0 || len(text) <= bytes)
}

// Send implements channel.Provider. A send is one message, or two when it
// has media and text (the Platform has no captions): the attachment, then
// the text (the media's caption in front, or as a message of its own between
// them when the two would not fit one), which carries the choices. Should
// the second fail after the first went out, a retry of the same
// Outbound.Key in this process sends only the second; after a restart both
// go again. The id returned is the last message's.
//
// Choices: up to 3 buttons, reply (postback, payload = id) or URL (web_url),
// go as a button template, whose text must not be empty; more reply buttons
// (up to 13), or reply buttons under media without text, go as quick
// replies (payload = id), and so do a list's rows (up to 13 in all
// sections; the list's button, section titles and descriptions are not
// shown). Titles are 1-20 characters. Anything else is refused.
func (c *Channel) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	msgs, err := c.messages(msg)
	if err != nil {
		return "", err
	}
	done := c.progress(msg.Key, len(msgs))
	ref := done.ref
	for i := done.n; i < len(msgs); i++ {
		ref, err = c.post(ctx, map[string]any{"recipient": map[string]any{"id": msg.Chat},
			"messaging_type": "RESPONSE", "message": msgs[i]})
		if err != nil {
			if httpkit.Permanent(err) {
				c.forget(msg.Key) // never retried
			}
			return "", err
		}
		if i < len(msgs)-1 {
			c.remember(msg.Key, progress{n: i + 1, ref: ref})
		}
	}
	c.forget(msg.Key)
	return ref, nil
}

// progress is what went out of the send under key in an earlier attempt.
func (c *Channel) progress(key string, total int) progress {
	if key == "" {
		return progress{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.sent[key]
	if p.n >= total {
		return progress{}
	}
	return p
}

func (c *Channel) remember(key string, p progress) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sent) >= maxProgress {
		clear(c.sent)
	}
	c.sent[key] = p
}

func (c *Channel) forget(key string) {
	c.mu.Lock()
	delete(c.sent, key)
	c.mu.Unlock()
}

// messages are the message objects of a send, in order, checked against the
// Platform's limits.
func (c *Channel) messages(msg channel.Outbound) ([]map[string]any, error) {
	var out []map[string]any
	text := msg.Text
	if m := msg.Media; m != nil {
		att, err := c.attachment(m)
		if err != nil {
			return nil, err
		}
		out = append(out, map[string]any{"attachment": att})
		switch joined := httpkit.CaptionText(m.Caption, text); {
		case c.fits(joined, msg):
			text = joined
		default:
			// The text fills a part already: the caption goes on its own.
			out = append(out, map[string]any{"text": m.Caption})
		}
	}
	if len(msg.Buttons) == 0 && msg.List == nil {
		if text != "" || len(out) == 0 {
			out = append(out, map[string]any{"text": text}) // the API refuses an empty one
		}
		return out, nil
	}
	if len(msg.Buttons) > 0 && msg.List != nil {
		return nil, c.unsupported("buttons and a list cannot go on one message")
	}
	if len(msg.Buttons) > 0 && len(msg.Buttons) <= MaxTemplateButtons && (strings.TrimSpace(text) != "" || hasURL(msg.Buttons)) {
		tmpl, err := c.template(msg.Buttons, text)
		if err != nil {
			return nil, err
		}
		return append(out, map[string]any{"attachment": tmpl}), nil
	}
	qr, err := c.quickReplies(msg.Buttons, msg.List)
	if err != nil {
		return nil, err
	}
	switch {
	case text != "":
		out = append(out, map[string]any{"text": text, "quick_replies": qr})
	case len(out) > 0:
		out[len(out)-1]["quick_replies"] = qr
	default:
		return nil, c.unsupported("quick replies need a text or an attachment to go under")
	}
	return out, nil
}

func hasURL(buttons []abi.Button) bool {
	for _, b := range buttons {
		if b.URL != "" {
			return true
		}
	}
	return false
}

// title checks a title: 1-20 characters.
func (c *Channel) title(what, s string) error {
	if strings.TrimSpace(s) == "" {
		return c.unsupported("%s is empty", what)
	}
	if n := utf8.RuneCountInString(s); n > MaxTitle {
		return c.unsupported("%s is %d characters, the Platform allows at most %d", what, n, MaxTitle)
	}
	return nil
}

// payload checks an id sent as a payload.
func (c *Channel) payload(what, id string) error {
	if id == "" || utf8.RuneCountInString(id) > MaxPayload {
		return c.unsupported("%s's id must be 1-%d characters", what, MaxPayload)
	}
	return nil
}

// template is a button template: postback buttons for reply buttons,
// web_url buttons for URL buttons.
func (c *Channel) template(buttons []abi.Button, text string) (map[string]any, error) {
	if strings.TrimSpace(text) == "" {
		return nil, c.unsupported("a button template's text is empty (URL buttons need a text above them)")
	}
	if n := utf8.RuneCountInString(text); n > MaxTemplateText {
		return nil, c.unsupported("a button template's text is %d characters, the Platform allows at most %d", n, MaxTemplateText)
	}
	var bs []any
	for i, b := range buttons {
		what := fmt.Sprintf("buttons[%d]", i)
		if err := c.title(what+"'s title", b.Title); err != nil {
			return nil, err
		}
		if b.URL != "" {
			bs = append(bs, map[string]any{"type": "web_url", "url": b.URL, "title": b.Title})
			continue
		}
		if err := c.payload(what, b.ID); err != nil {
			return nil, err
		}
		bs = append(bs, map[string]any{"type": "postback", "title": b.Title, "payload": b.ID})
	}
	return map[string]any{"type": "template", "payload": map[string]any{"template_type": "button", "text": text, "buttons": bs}}, nil
}

// quickReplies are reply buttons or a list's rows as quick replies.
func (c *Channel) quickReplies(buttons []abi.Button, list *abi.List) ([]any, error) {
	type choice struct{ what, id, title string }
	var all []choice
	for i, b := range buttons {
		if b.URL != "" {
			return nil, c.unsupported("%d buttons with a URL button: a button template holds at most %d, and quick replies cannot open a URL", len(buttons), MaxTemplateButtons)
		}
		all = append(all, choice{fmt.Sprintf("buttons[%d]", i), b.ID, b.Title})
	}
	if list != nil {
		for i, s := range list.Sections {
			for j, r := range s.Rows {
				all = append(all, choice{fmt.Sprintf("list.sections[%d].rows[%d]", i, j), r.ID, r.Title})
			}
		}
		if len(all) == 0 {
			return nil, c.unsupported("the list has no rows")
		}
	}
	if len(all) > MaxQuickReplies {
		return nil, c.unsupported("%d choices, the Platform shows at most %d quick replies", len(all), MaxQuickReplies)
	}
	out := make([]any, 0, len(all))
	for _, ch := range all {
		if err := c.title(ch.what+"'s title", ch.title); err != nil {
			return nil, err
		}
		if err := c.payload(ch.what, ch.id); err != nil {
			return nil, err
		}
		out = append(out, map[string]any{"content_type": "text", "title": ch.title, "payload": ch.id})
	}
	return out, nil
}

// attachment is an outbound media's attachment object: by URL (a public one,
// or an inbound attachment's), or by attachment id (digits, from the
// Attachment Upload API).
func (c *Channel) attachment(m *channel.Media) (map[string]any, error) {
	kind := map[string]string{"image": "image", "video": "video", "audio": "audio", "document": "file"}[m.Type]
	if kind == "" {
		return nil, c.unsupported("cannot send media of type %q (image, video, audio or document)", m.Type)
	}
	src := m.URL
	if src == "" {
		src = m.Ref
	}
	var payload map[string]any
	switch {
	case isDigits(src):
		payload = map[string]any{"attachment_id": src}
	case strings.HasPrefix(src, "https://") || strings.HasPrefix(src, "http://"):
		payload = map[string]any{"url": src, "is_reusable": true}
	default:
		return nil, c.unsupported("media needs a URL or an attachment id")
	}
	return map[string]any{"type": kind, "payload": payload}, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// post sends one Send API request and returns the message's id.
func (c *Channel) post(ctx context.Context, body map[string]any) (string, error) {
	var out struct {
		RecipientID string `json:"recipient_id"`
		MessageID   string `json:"message_id"`
	}
	if err := c.call(ctx, body, &out); err != nil {
		return "", err
	}
	if out.MessageID == "" {
		return "", fmt.Errorf("%s %s: the answer has no message_id", c.spec.Type, c.spec.ID)
	}
	return out.MessageID, nil
}

// call POSTs body to the Send API with the Bearer token and decodes a 2xx
// answer into out.
func (c *Channel) call(ctx context.Context, body map[string]any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.spec.Type, c.spec.ID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.API.String()+c.spec.SendPath, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.spec.Type, c.spec.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.spec.Token)
	if err := httpkit.CallJSON(c.Client, req, out, Codes.MapError); err != nil {
		return fmt.Errorf("%s %s: %w", c.spec.Type, c.spec.ID, err)
	}
	return nil
}

// Typing implements channel.Typist: mark_seen (the user sees the message
// read), then typing_on, which the app shows for about 20 seconds or until
// the next message.
func (c *Channel) Typing(ctx context.Context, chat, _ string) error {
	for _, action := range []string{"mark_seen", "typing_on"} {
		var out struct {
			RecipientID string `json:"recipient_id"`
		}
		if err := c.call(ctx, map[string]any{"recipient": map[string]any{"id": chat}, "sender_action": action}, &out); err != nil {
			return err
		}
	}
	return nil
}
