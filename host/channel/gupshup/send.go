package gupshup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// WhatsApp's limits as Gupshup documents them, in characters. A send over
// one of them fails with channel.ErrUnsupportedContent (or
// ErrPayloadTooLarge for a text or a caption) before any request: nothing is
// ever cut.
const (
	// MaxCaption bounds a media's caption.
	MaxCaption = 1024
	// MaxChoiceBody bounds the text of a quick_reply or list message.
	MaxChoiceBody = 1024
	// MaxReplyButtons is the most options of a quick_reply message.
	MaxReplyButtons = 3
	// MaxButtonTitle bounds an option's title and the list's button.
	MaxButtonTitle = 20
	// MaxListRows is the most rows of a list, all sections together, and
	// MaxListSections its most sections.
	MaxListRows, MaxListSections = 10, 10
	// MaxRowTitle bounds a row's and a section's title.
	MaxRowTitle = 24
	// MaxRowDescription bounds a row's description.
	MaxRowDescription = 72
	// MaxRowID bounds a row's id (its postbackText).
	MaxRowID = 200
)

// unsupported is a send refused before any request.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: gupshup: %s", channel.ErrUnsupportedContent, fmt.Sprintf(format, args...))
}

// text is one string of a message checked against its limit: what names it,
// optional allows it empty.
type text struct {
	what     string
	s        string
	max      int
	optional bool
}

// fit checks texts in order; the first that does not fit is the error.
func fit(texts ...text) error {
	for _, t := range texts {
		n := utf8.RuneCountInString(t.s)
		switch {
		case strings.TrimSpace(t.s) == "" && !t.optional:
			return unsupported("%s is empty (WhatsApp requires it)", t.what)
		case n > t.max:
			return unsupported("%s is %d characters, WhatsApp allows at most %d", t.what, n, t.max)
		}
	}
	return nil
}

// Send implements channel.Provider: one message, its object JSON in the
// form's message field (see message). The id returned is Gupshup's
// messageId; delivery failures (a number not on WhatsApp, the 24-hour
// window) arrive later as message-events, which botrun does not read.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	obj, err := message(msg)
	if err != nil {
		return "", fmt.Errorf("gupshup %s: %w", p.cfg.ID, err)
	}
	js, err := json.Marshal(obj)
	if err != nil {
		return "", fmt.Errorf("gupshup %s: %w", p.cfg.ID, err)
	}
	form := url.Values{"channel": {"whatsapp"}, "source": {p.cfg.Source}, "destination": {msg.Chat},
		"src.name": {p.cfg.AppName}, "message": {string(js)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.API.String()+SendPath, strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("gupshup %s: %w", p.cfg.ID, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("apikey", p.cfg.APIKey)
	var out struct {
		Status    string `json:"status"`
		MessageID string `json:"messageId"`
	}
	if err := httpkit.CallJSON(p.Client, req, &out, mapError); err != nil {
		return "", fmt.Errorf("gupshup %s: %w", p.cfg.ID, err)
	}
	if out.Status != "submitted" || out.MessageID == "" {
		return "", fmt.Errorf("gupshup %s: the answer is status %q without a messageId", p.cfg.ID, out.Status)
	}
	return out.MessageID, nil
}

// message is the message object of a send:
//
//   - a text: {"type":"text","text"}, at most 4,096 characters;
//   - media by public URL: {"type":"image","originalUrl","previewUrl"},
//     {"type":"video"|"audio"|"sticker","url"}, {"type":"file","url","filename"},
//     the text (after the media's own caption) as the caption of an image,
//     a video or a file, at most 1,024 characters; audio and stickers take
//     none;
//   - buttons or a list: see interactive.
func message(msg channel.Outbound) (map[string]any, error) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return interactive(msg)
	}
	m := msg.Media
	if m == nil {
		if n := utf8.RuneCountInString(msg.Text); n > TextLimit {
			return nil, fmt.Errorf("%w: gupshup: a text of %d characters, WhatsApp allows %d", channel.ErrPayloadTooLarge, n, TextLimit)
		}
		return map[string]any{"type": "text", "text": msg.Text}, nil
	}
	src, err := mediaURL(m)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	switch m.Type {
	case "image":
		obj = map[string]any{"type": "image", "originalUrl": src, "previewUrl": src}
	case "video", "audio", "sticker":
		obj = map[string]any{"type": m.Type, "url": src}
	case "document":
		obj = map[string]any{"type": "file", "url": src, "filename": fileName(src)}
	default:
		return nil, unsupported("cannot send media of type %q (image, video, audio, document or sticker)", m.Type)
	}
	caption := httpkit.CaptionText(m.Caption, msg.Text)
	switch n := utf8.RuneCountInString(caption); {
	case caption == "":
	case m.Type == "audio" || m.Type == "sticker":
		return nil, unsupported("WhatsApp shows no caption on %s: send the text alone", m.Type)
	case n > MaxCaption:
		return nil, fmt.Errorf("%w: gupshup: a caption of %d characters, WhatsApp allows %d", channel.ErrPayloadTooLarge, n, MaxCaption)
	default:
		obj["caption"] = caption
	}
	return obj, nil
}

// mediaURL is an outbound media's public URL (an inbound media's reference
// is one too).
func mediaURL(m *channel.Media) (string, error) {
	src := m.URL
	if src == "" {
		src = m.Ref
	}
	if u, err := url.Parse(src); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", unsupported("Gupshup sends media by public URL; %q is not one", src)
	}
	return src, nil
}

// fileName is the name a document is shown under: the URL's last segment.
func fileName(src string) string {
	u, _ := url.Parse(src)
	if name := path.Base(u.Path); name != "" && name != "/" && name != "." {
		return name
	}
	return "file"
}

// interactive is a send with choices, checked against WhatsApp's limits:
//
//   - reply buttons (1-3): {"type":"quick_reply","content":{"type":"text","text"},
//     "options":[{"type":"text","title","postbackText":id}]}; an image or a
//     video rides as the content ({"type":"image","url","caption":text});
//   - a list: {"type":"list","body","globalButtons":[{"type":"text","title":button}],
//     "items":[{"title","subtitle","options":[{"type":"text","title","description","postbackText":id}]}]},
//     at most 10 rows in 10 sections, without media.
//
// The text must not be empty. URL buttons have no equivalent and are refused.
func interactive(msg channel.Outbound) (map[string]any, error) {
	if len(msg.Buttons) > 0 && msg.List != nil {
		return nil, unsupported("buttons and a list cannot go on one message")
	}
	body := msg.Text
	content := map[string]any{"type": "text"}
	if m := msg.Media; m != nil {
		if msg.List != nil {
			return nil, unsupported("a list message cannot carry media")
		}
		if m.Type != "image" && m.Type != "video" {
			return nil, unsupported("media of type %q cannot go with buttons (image or video only)", m.Type)
		}
		src, err := mediaURL(m)
		if err != nil {
			return nil, err
		}
		content = map[string]any{"type": m.Type, "url": src}
		body = httpkit.CaptionText(m.Caption, body)
	}
	if err := fit(text{"the text of a message with choices", body, MaxChoiceBody, false}); err != nil {
		return nil, err
	}
	if msg.List != nil {
		return list(msg.List, body)
	}
	if len(msg.Buttons) > MaxReplyButtons {
		return nil, unsupported("%d reply buttons, WhatsApp shows at most %d", len(msg.Buttons), MaxReplyButtons)
	}
	if content["type"] == "text" {
		content["text"] = body
	} else {
		content["caption"] = body
	}
	titles := map[string]bool{}
	options := make([]any, 0, len(msg.Buttons))
	for i, b := range msg.Buttons {
		if b.URL != "" {
			return nil, unsupported("buttons[%d] is a URL button: Gupshup's quick replies cannot open a URL", i)
		}
		if err := fit(text{fmt.Sprintf("buttons[%d]'s title", i), b.Title, MaxButtonTitle, false},
			text{fmt.Sprintf("buttons[%d]'s id", i), b.ID, abi.MaxChoiceID, false}); err != nil {
			return nil, err
		}
		if titles[b.Title] {
			return nil, unsupported("buttons[%d] repeats a title (WhatsApp requires each unique)", i)
		}
		titles[b.Title] = true
		options = append(options, map[string]any{"type": "text", "title": b.Title, "postbackText": b.ID})
	}
	return map[string]any{"type": "quick_reply", "content": content, "options": options}, nil
}

// list is a list message.
func list(l *abi.List, body string) (map[string]any, error) {
	if err := fit(text{"the list's button", l.Button, MaxButtonTitle, false}); err != nil {
		return nil, err
	}
	rows := 0
	for _, s := range l.Sections {
		rows += len(s.Rows)
	}
	switch {
	case len(l.Sections) == 0 || rows == 0:
		return nil, unsupported("the list has no rows")
	case len(l.Sections) > MaxListSections:
		return nil, unsupported("the list has %d sections, WhatsApp allows at most %d", len(l.Sections), MaxListSections)
	case rows > MaxListRows:
		return nil, unsupported("the list has %d rows, WhatsApp allows at most %d in all sections", rows, MaxListRows)
	}
	ids := map[string]bool{}
	items := make([]any, 0, len(l.Sections))
	for i, s := range l.Sections {
		// A list of several sections needs each one's title.
		if err := fit(text{fmt.Sprintf("list.sections[%d]'s title", i), s.Title, MaxRowTitle, len(l.Sections) == 1}); err != nil {
			return nil, err
		}
		if len(s.Rows) == 0 {
			return nil, unsupported("list.sections[%d] has no rows", i)
		}
		options := make([]any, 0, len(s.Rows))
		for j, r := range s.Rows {
			what := fmt.Sprintf("list.sections[%d].rows[%d]", i, j)
			if err := fit(text{what + "'s title", r.Title, MaxRowTitle, false}, text{what + "'s id", r.ID, MaxRowID, false},
				text{what + "'s description", r.Description, MaxRowDescription, true}); err != nil {
				return nil, err
			}
			if ids[r.ID] {
				return nil, unsupported("%s repeats an id (WhatsApp requires each unique)", what)
			}
			ids[r.ID] = true
			opt := map[string]any{"type": "text", "title": r.Title, "postbackText": r.ID}
			if r.Description != "" {
				opt["description"] = r.Description
			}
			options = append(options, opt)
		}
		item := map[string]any{"options": options}
		if s.Title != "" {
			item["title"], item["subtitle"] = s.Title, s.Title
		}
		items = append(items, item)
	}
	return map[string]any{"type": "list", "body": body,
		"globalButtons": []any{map[string]any{"type": "text", "title": l.Button}}, "items": items}, nil
}

// mapError maps a Gupshup error answer ({"status":"error","message":…})
// onto the taxonomy.
func mapError(status int, header http.Header, body []byte) error {
	cause, low := httpkit.ErrorAnswer(status, body)
	switch {
	case status == http.StatusTooManyRequests:
		return httpkit.RateLimited(header, time.Second, cause)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return &channel.PermanentError{Err: fmt.Errorf("%w (is api_key right?)", cause)}
	case strings.Contains(low, "destination"):
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case strings.Contains(low, "invalid app"), strings.Contains(low, "invalid source"), status == http.StatusNotFound:
		return &channel.PermanentError{Err: fmt.Errorf("%w (are app_name and source the app's?)", cause)}
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	}
	return cause
}
