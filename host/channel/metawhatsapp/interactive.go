package metawhatsapp

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// WhatsApp's limits on interactive messages, in characters. A send over one
// of them fails with channel.ErrUnsupportedContent before any request: the
// choices are never cut.
const (
	// MaxReplyButtons is the most reply buttons one message carries.
	MaxReplyButtons = 3
	// MaxButtonTitle bounds a reply button's title and a URL button's text.
	MaxButtonTitle = 20
	// MaxButtonID bounds a reply button's id.
	MaxButtonID = 256
	// MaxButtonBody bounds the body text of a button or URL-button message.
	MaxButtonBody = 1024
	// MaxListRows is the most rows of a list, all sections together.
	MaxListRows = 10
	// MaxListSections is the most sections of a list.
	MaxListSections = 10
	// MaxListButton bounds the text of the button that opens a list.
	MaxListButton = 20
	// MaxSectionTitle bounds a list section's title.
	MaxSectionTitle = 24
	// MaxRowTitle bounds a list row's title.
	MaxRowTitle = 24
	// MaxRowDescription bounds a list row's description.
	MaxRowDescription = 72
	// MaxRowID bounds a list row's id.
	MaxRowID = 200
	// MaxListBody bounds the body text of a list message.
	MaxListBody = 4096
)

// headerTypes are the media a button or URL-button message can carry as its
// header; a list's header is text only, so a list with media is refused.
var headerTypes = map[string]bool{"image": true, "video": true, "document": true}

// unsupported is a send refused before any request: what is wrong, and the
// limit when there is one.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: meta-whatsapp: %s", channel.ErrUnsupportedContent, fmt.Sprintf(format, args...))
}

// tooLong checks that s is non-empty and at most max characters.
func tooLong(what, s string, max int) error {
	if strings.TrimSpace(s) == "" {
		return unsupported("%s is empty (WhatsApp requires it)", what)
	}
	if n := utf8.RuneCountInString(s); n > max {
		return unsupported("%s is %d characters, WhatsApp allows at most %d", what, n, max)
	}
	return nil
}

// interactive builds the "interactive" object of a send with buttons or a
// list, checked against WhatsApp's limits:
//
//   - reply buttons: {"type":"button","body":{"text"},"action":{"buttons":[{"type":"reply","reply":{"id","title"}}]}}
//   - one URL button: {"type":"cta_url","body":{"text"},"action":{"name":"cta_url","parameters":{"display_text","url"}}}
//   - a list: {"type":"list","body":{"text"},"action":{"button","sections":[{"title","rows":[{"id","title","description"}]}]}}
//
// The body is the send's text (with the media's caption in front when both
// are set, and the caption alone when the text is empty); it must not be
// empty. Media rides as the header ({"type":"image","image":{"id"|"link"}},
// or video, document) of a button or URL-button message; a list, whose
// header can only be text, refuses media, and so do audio and stickers.
func interactive(msg channel.Outbound) (map[string]any, error) {
	if len(msg.Buttons) > 0 && msg.List != nil {
		return nil, unsupported("buttons and a list cannot go on one message")
	}
	body := msg.Text
	var header map[string]any
	if m := msg.Media; m != nil {
		if msg.List != nil {
			return nil, unsupported("a list message cannot carry media (its header is text only)")
		}
		if !headerTypes[m.Type] {
			return nil, unsupported("media of type %q cannot go with buttons (image, video or document only)", m.Type)
		}
		obj, err := mediaObject(m)
		if err != nil {
			return nil, err
		}
		header = map[string]any{"type": m.Type, m.Type: obj}
		body = httpkit.CaptionText(m.Caption, body)
	}
	var out map[string]any
	var err error
	if msg.List != nil {
		out, err = listMessage(msg.List, body)
	} else {
		out, err = buttonMessage(msg.Buttons, body)
	}
	if err != nil {
		return nil, err
	}
	if header != nil {
		out["header"] = header
	}
	return out, nil
}

// buttonMessage is a reply-button message, or a cta_url message for a single
// URL button.
func buttonMessage(buttons []abi.Button, body string) (map[string]any, error) {
	urls := 0
	for _, b := range buttons {
		if b.URL != "" {
			urls++
		}
	}
	if urls > 0 {
		if len(buttons) > 1 {
			return nil, unsupported("%d buttons with %d URL buttons: WhatsApp shows a URL button alone (one per message, without reply buttons)", len(buttons), urls)
		}
		b := buttons[0]
		if err := tooLong("the body text of a URL-button message", body, MaxButtonBody); err != nil {
			return nil, err
		}
		if err := tooLong("the URL button's title", b.Title, MaxButtonTitle); err != nil {
			return nil, err
		}
		return map[string]any{"type": "cta_url", "body": map[string]any{"text": body},
			"action": map[string]any{"name": "cta_url", "parameters": map[string]any{"display_text": b.Title, "url": b.URL}}}, nil
	}
	if len(buttons) > MaxReplyButtons {
		return nil, unsupported("%d reply buttons, WhatsApp shows at most %d", len(buttons), MaxReplyButtons)
	}
	if err := tooLong("the body text of a button message", body, MaxButtonBody); err != nil {
		return nil, err
	}
	titles, ids := map[string]bool{}, map[string]bool{}
	out := make([]any, 0, len(buttons))
	for i, b := range buttons {
		if err := tooLong(fmt.Sprintf("buttons[%d]'s title", i), b.Title, MaxButtonTitle); err != nil {
			return nil, err
		}
		if err := tooLong(fmt.Sprintf("buttons[%d]'s id", i), b.ID, MaxButtonID); err != nil {
			return nil, err
		}
		if titles[b.Title] || ids[b.ID] {
			return nil, unsupported("buttons[%d] repeats a title or an id (WhatsApp requires each unique)", i)
		}
		titles[b.Title], ids[b.ID] = true, true
		out = append(out, map[string]any{"type": "reply", "reply": map[string]any{"id": b.ID, "title": b.Title}})
	}
	return map[string]any{"type": "button", "body": map[string]any{"text": body},
		"action": map[string]any{"buttons": out}}, nil
}

// listMessage is a list message.
func listMessage(l *abi.List, body string) (map[string]any, error) {
	if err := tooLong("the body text of a list message", body, MaxListBody); err != nil {
		return nil, err
	}
	if err := tooLong("the list's button", l.Button, MaxListButton); err != nil {
		return nil, err
	}
	if len(l.Sections) == 0 {
		return nil, unsupported("the list has no sections")
	}
	if len(l.Sections) > MaxListSections {
		return nil, unsupported("the list has %d sections, WhatsApp allows at most %d", len(l.Sections), MaxListSections)
	}
	rows := 0
	for _, s := range l.Sections {
		rows += len(s.Rows)
	}
	if rows > MaxListRows {
		return nil, unsupported("the list has %d rows, WhatsApp allows at most %d in all sections", rows, MaxListRows)
	}
	ids := map[string]bool{}
	sections := make([]any, 0, len(l.Sections))
	for i, s := range l.Sections {
		sec := map[string]any{}
		if s.Title != "" || len(l.Sections) > 1 {
			// WhatsApp requires a title on each section of a list with more
			// than one.
			if err := tooLong(fmt.Sprintf("list.sections[%d]'s title", i), s.Title, MaxSectionTitle); err != nil {
				return nil, err
			}
			sec["title"] = s.Title
		}
		if len(s.Rows) == 0 {
			return nil, unsupported("list.sections[%d] has no rows", i)
		}
		out := make([]any, 0, len(s.Rows))
		for j, r := range s.Rows {
			what := fmt.Sprintf("list.sections[%d].rows[%d]", i, j)
			if err := tooLong(what+"'s title", r.Title, MaxRowTitle); err != nil {
				return nil, err
			}
			if err := tooLong(what+"'s id", r.ID, MaxRowID); err != nil {
				return nil, err
			}
			if n := utf8.RuneCountInString(r.Description); n > MaxRowDescription {
				return nil, unsupported("%s's description is %d characters, WhatsApp allows at most %d", what, n, MaxRowDescription)
			}
			if ids[r.ID] {
				return nil, unsupported("%s repeats an id (WhatsApp requires each unique)", what)
			}
			ids[r.ID] = true
			row := map[string]any{"id": r.ID, "title": r.Title}
			if r.Description != "" {
				row["description"] = r.Description
			}
			out = append(out, row)
		}
		sec["rows"] = out
		sections = append(sections, sec)
	}
	return map[string]any{"type": "list", "body": map[string]any{"text": body},
		"action": map[string]any{"button": l.Button, "sections": sections}}, nil
}
