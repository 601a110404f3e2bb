package metawhatsapptest

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Interactive is the "interactive" object of a sent message, as the Cloud
// API reads it: a reply-button message ("button"), a URL-button message
// ("cta_url") or a list ("list").
type Interactive struct {
	Type   string  `json:"type"`
	Header *Header `json:"header,omitempty"`
	Body   *struct {
		Text string `json:"text"`
	} `json:"body,omitempty"`
	Footer *struct {
		Text string `json:"text"`
	} `json:"footer,omitempty"`
	Action Action `json:"action"`
}

// Header is an interactive message's header: text, or a media object
// ({"id"} or {"link"}) under its type's key.
type Header struct {
	Type     string            `json:"type"`
	Text     string            `json:"text,omitempty"`
	Image    map[string]string `json:"image,omitempty"`
	Video    map[string]string `json:"video,omitempty"`
	Document map[string]string `json:"document,omitempty"`
}

// Action is what an interactive message offers: reply buttons, a URL button
// (Name "cta_url" with Parameters) or a list (Button and Sections).
type Action struct {
	Buttons []struct {
		Type  string `json:"type"`
		Reply struct {
			ID    string `json:"id"`
			Title string `json:"title"`
		} `json:"reply"`
	} `json:"buttons,omitempty"`
	Name       string `json:"name,omitempty"`
	Parameters *struct {
		DisplayText string `json:"display_text"`
		URL         string `json:"url"`
	} `json:"parameters,omitempty"`
	Button   string `json:"button,omitempty"`
	Sections []struct {
		Title string `json:"title,omitempty"`
		Rows  []struct {
			ID          string `json:"id"`
			Title       string `json:"title"`
			Description string `json:"description,omitempty"`
		} `json:"rows"`
	} `json:"sections,omitempty"`
}

// Graph error codes the fake answers an invalid interactive message with.
const (
	codeInvalidParameter = 100    // malformed or unknown
	codeMissing          = 131008 // Required parameter is missing
	codeInvalidValue     = 131009 // Parameter value is not valid
)

// checkInteractive validates an interactive object as the Cloud API does;
// it returns the Graph error code and message, or 0 when valid.
func checkInteractive(v any) (int, string) {
	if v == nil {
		return codeMissing, "Required parameter is missing: The parameter interactive is required."
	}
	raw, _ := json.Marshal(v)
	var in Interactive
	if err := json.Unmarshal(raw, &in); err != nil {
		return codeInvalidParameter, "(#100) Invalid parameter: " + err.Error()
	}
	invalid := func(format string, args ...any) (int, string) {
		return codeInvalidValue, "(#131009) Parameter value is not valid: " + fmt.Sprintf(format, args...)
	}
	length := func(what, s string, max int) (int, string) {
		if n := utf8.RuneCountInString(s); n < 1 || n > max {
			return invalid("%s length invalid. Min length: 1, Max length: %d", what, max)
		}
		return 0, ""
	}
	switch in.Type {
	case "button", "cta_url", "list":
	case "":
		return codeMissing, "Required parameter is missing: The parameter interactive['type'] is required."
	default:
		return invalid("Interactive message type %q is not supported", in.Type)
	}
	if in.Body == nil || in.Body.Text == "" {
		return codeMissing, "Required parameter is missing: The parameter interactive['body']['text'] is required."
	}
	if h := in.Header; h != nil {
		media := map[string]map[string]string{"image": h.Image, "video": h.Video, "document": h.Document}
		switch {
		case in.Type == "list" && h.Type != "text":
			return invalid("Header type %q is not supported for list messages", h.Type)
		case h.Type == "text":
			if code, msg := length("Header text", h.Text, 60); code != 0 {
				return code, msg
			}
		case media[h.Type] == nil:
			return invalid("Header type %q is not supported", h.Type)
		case media[h.Type]["id"] == "" && media[h.Type]["link"] == "":
			return codeMissing, fmt.Sprintf("Required parameter is missing: interactive['header']['%s'] needs an id or a link.", h.Type)
		}
	}
	switch in.Type {
	case "button":
		n := len(in.Action.Buttons)
		if n < 1 || n > 3 {
			return invalid("Invalid buttons count. Min allowed buttons: 1, Max allowed buttons: 3")
		}
		if code, msg := length("Body text", in.Body.Text, 1024); code != 0 {
			return code, msg
		}
		titles, ids := map[string]bool{}, map[string]bool{}
		for _, b := range in.Action.Buttons {
			if b.Type != "reply" {
				return invalid("Button type %q is not supported", b.Type)
			}
			if code, msg := length("Button title", b.Reply.Title, 20); code != 0 {
				return code, msg
			}
			if code, msg := length("Button id", b.Reply.ID, 256); code != 0 {
				return code, msg
			}
			if titles[b.Reply.Title] || ids[b.Reply.ID] {
				return invalid("Button title and id must be unique")
			}
			titles[b.Reply.Title], ids[b.Reply.ID] = true, true
		}
	case "cta_url":
		p := in.Action.Parameters
		if in.Action.Name != "cta_url" || p == nil || p.URL == "" {
			return codeMissing, "Required parameter is missing: interactive['action'] needs name cta_url and parameters display_text and url."
		}
		if code, msg := length("Body text", in.Body.Text, 1024); code != 0 {
			return code, msg
		}
		if code, msg := length("Button display_text", p.DisplayText, 20); code != 0 {
			return code, msg
		}
	case "list":
		if code, msg := length("Body text", in.Body.Text, 4096); code != 0 {
			return code, msg
		}
		if code, msg := length("Button text", in.Action.Button, 20); code != 0 {
			return code, msg
		}
		secs := len(in.Action.Sections)
		if secs < 1 || secs > 10 {
			return invalid("Invalid sections count. Min allowed sections: 1, Max allowed sections: 10")
		}
		rows, ids := 0, map[string]bool{}
		for _, s := range in.Action.Sections {
			if secs > 1 || s.Title != "" {
				if code, msg := length("Section title", s.Title, 24); code != 0 {
					return code, msg
				}
			}
			if len(s.Rows) == 0 {
				return invalid("Each section needs at least one row")
			}
			for _, r := range s.Rows {
				rows++
				if code, msg := length("Row title", r.Title, 24); code != 0 {
					return code, msg
				}
				if code, msg := length("Row id", r.ID, 200); code != 0 {
					return code, msg
				}
				if utf8.RuneCountInString(r.Description) > 72 {
					return invalid("Row description length invalid. Max length: 72")
				}
				if ids[r.ID] {
					return invalid("Row id must be unique")
				}
				ids[r.ID] = true
			}
		}
		if rows > 10 {
			return invalid("Invalid rows count. Max allowed rows: 10 for all sections")
		}
	}
	return 0, ""
}

// ButtonReply is an inbound press of a reply button: id and title of the
// button, on the message context (a wamid the fake returned).
func ButtonReply(from, wamid, context, id, title string) map[string]any {
	return interactiveMessage(from, wamid, context, map[string]any{"type": "button_reply",
		"button_reply": map[string]any{"id": id, "title": title}})
}

// ListReply is an inbound pick of a list row: its id, title and description,
// on the message context.
func ListReply(from, wamid, context, id, title, description string) map[string]any {
	return interactiveMessage(from, wamid, context, map[string]any{"type": "list_reply",
		"list_reply": map[string]any{"id": id, "title": title, "description": description}})
}

// QuickReply is an inbound press of a template's quick-reply button: its
// payload and text, on the message context.
func QuickReply(from, wamid, context, payload, text string) map[string]any {
	m := map[string]any{"from": from, "id": wamid, "timestamp": "1764412800", "type": "button",
		"button": map[string]any{"payload": payload, "text": text}}
	if context != "" {
		m["context"] = map[string]any{"from": "15550001111", "id": context}
	}
	return m
}

func interactiveMessage(from, wamid, context string, interactive map[string]any) map[string]any {
	m := map[string]any{"from": from, "id": wamid, "timestamp": "1764412800", "type": "interactive", "interactive": interactive}
	if context != "" {
		m["context"] = map[string]any{"from": "15550001111", "id": context}
	}
	return m
}
