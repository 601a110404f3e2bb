package wire

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Discord's limits on message components.
const (
	maxRows          = 5   // action rows in a message
	maxRowButtons    = 5   // buttons in an action row
	maxLabel         = 80  // a button's label, in characters
	maxCustomID      = 100 // a custom_id or a select option's value
	maxOptions       = 25  // options in a select menu
	maxOptionText    = 100 // a select option's label and description
	maxPlaceholder   = 150 // a select menu's placeholder
	maxButtonURL     = 512 // a link button's url
	componentRow     = 1
	componentButton  = 2
	componentSelect  = 3
	stylePrimary     = 1
	styleLink        = 5
	ListCustomID     = "botrun:list" // the custom_id of a list's select menu
	mentionsNoneLoud = "users"       // the only mentions that notify
)

// OutMessage is a message as botrun creates it (a channel message or a
// follow-up).
type OutMessage struct {
	Content         string      `json:"content,omitempty"`
	Embeds          []embed     `json:"embeds,omitempty"`
	Components      []Component `json:"components,omitempty"`
	AllowedMentions mentions    `json:"allowed_mentions"`
	Nonce           string      `json:"nonce,omitempty"`
	EnforceNonce    bool        `json:"enforce_nonce,omitempty"`
}

// mentions is allowed_mentions: a user mention in a bot's text notifies that
// user; @everyone, @here and roles do not.
type mentions struct {
	Parse []string `json:"parse"`
}

// maxEmbedDescription is the longest embed description Discord takes.
const maxEmbedDescription = 4096

type embed struct {
	Title       string `json:"title,omitempty"`
	URL         string `json:"url,omitempty"`
	Description string `json:"description,omitempty"`
	Image       *struct {
		URL string `json:"url"`
	} `json:"image,omitempty"`
}

// Component is a message component: an action row (type 1) of buttons (type
// 2) or of one string select (type 3).
type Component struct {
	Type        int            `json:"type"`
	Components  []Component    `json:"components,omitempty"`
	Style       int            `json:"style,omitempty"`
	Label       string         `json:"label,omitempty"`
	CustomID    string         `json:"custom_id,omitempty"`
	URL         string         `json:"url,omitempty"`
	Placeholder string         `json:"placeholder,omitempty"`
	Options     []SelectOption `json:"options,omitempty"`
}

// SelectOption is one option of a string select.
type SelectOption struct {
	Label       string `json:"label"`
	Value       string `json:"value"`
	Description string `json:"description,omitempty"`
}

// MessageBody builds the message msg describes. Media: an image is an embed
// of its URL; a video, an audio file or a document is its URL on a line of
// its own after the text, which Discord unfurls (botrun does not upload
// files); a caption goes in front of the text. When that is over TextLimit
// (the text fills its part), the text stays alone and the caption and the
// link go into the embed. Media without an http(s) URL, of another type, and choices Discord
// cannot show fail with channel.ErrUnsupportedContent.
func MessageBody(msg channel.Outbound) (*OutMessage, error) {
	out := &OutMessage{Content: msg.Text, AllowedMentions: mentions{Parse: []string{mentionsNoneLoud}}}
	if m := msg.Media; m != nil {
		link := m.URL
		if link == "" {
			link = m.Ref // an inbound attachment's URL
		}
		if u, err := url.Parse(link); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("%w: discord sends media by an http(s) URL, not %q", channel.ErrUnsupportedContent, link)
		}
		// The caption joins the text, and a file's link follows it, when
		// they fit one message; the text is a part of at most TextLimit
		// already, so what does not fit goes into an embed (its
		// description holds 4,096 characters) and the text stays whole.
		content := httpkit.CaptionText(m.Caption, msg.Text)
		var e embed
		switch m.Type {
		case "image":
			e.Image = &struct {
				URL string `json:"url"`
			}{URL: link}
		case "video", "audio", "document":
			if content != "" {
				content += "\n"
			}
			content += link
		default:
			return nil, fmt.Errorf("%w: discord cannot send media of type %q", channel.ErrUnsupportedContent, m.Type)
		}
		if utf8.RuneCountInString(content) > TextLimit {
			content, e.Description = msg.Text, m.Caption
			if pu, err := url.Parse(link); err == nil && m.Type != "image" {
				e.Title, e.URL = strings.ToValidUTF8(cut(path.Base(pu.Path), 256), ""), link
			}
			if utf8.RuneCountInString(e.Description) > maxEmbedDescription {
				return nil, fmt.Errorf("%w: a caption of %d characters is over Discord's %d", channel.ErrUnsupportedContent, utf8.RuneCountInString(e.Description), maxEmbedDescription)
			}
		}
		out.Content = content
		if e != (embed{}) {
			out.Embeds = []embed{e}
		}
	}
	var err error
	if out.Components, err = components(msg.Buttons, msg.List); err != nil {
		return nil, err
	}
	return out, nil
}

// components lays buttons out in action rows of up to five, or a list as one
// string select (its button title the placeholder, its rows the options
// across sections; section titles are not shown). What Discord refuses is
// refused here, never cut.
func components(buttons []abi.Button, list *abi.List) ([]Component, error) {
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", channel.ErrUnsupportedContent, fmt.Sprintf(format, args...))
	}
	var rows []Component
	ids := map[string]bool{}
	for i, b := range buttons {
		if n := utf8.RuneCountInString(b.Title); n == 0 || n > maxLabel {
			return nil, unsupported("buttons[%d] title has %d characters; Discord's button label holds 1-%d", i, n, maxLabel)
		}
		c := Component{Type: componentButton, Label: b.Title}
		if b.URL != "" {
			if len(b.URL) > maxButtonURL {
				return nil, unsupported("buttons[%d] url is over Discord's %d characters", i, maxButtonURL)
			}
			c.Style, c.URL = styleLink, b.URL
		} else {
			if b.ID == "" || len(b.ID) > maxCustomID {
				return nil, unsupported("buttons[%d] id %q is %d bytes; Discord's custom_id holds 1-%d", i, b.ID, len(b.ID), maxCustomID)
			}
			if ids[b.ID] || b.ID == ListCustomID {
				return nil, unsupported("buttons[%d] id %q is used twice; Discord's custom_ids are unique in a message", i, b.ID)
			}
			ids[b.ID] = true
			c.Style, c.CustomID = stylePrimary, b.ID
		}
		if i%maxRowButtons == 0 {
			if len(rows) == maxRows {
				return nil, unsupported("%d buttons; Discord shows at most %d (%d rows of %d)", len(buttons), maxRows*maxRowButtons, maxRows, maxRowButtons)
			}
			rows = append(rows, Component{Type: componentRow})
		}
		rows[len(rows)-1].Components = append(rows[len(rows)-1].Components, c)
	}
	if list == nil {
		return rows, nil
	}
	sel := Component{Type: componentSelect, CustomID: ListCustomID, Placeholder: list.Button}
	if utf8.RuneCountInString(list.Button) > maxPlaceholder {
		return nil, unsupported("the list's button title is over Discord's %d-character placeholder", maxPlaceholder)
	}
	for i, sec := range list.Sections {
		for j, r := range sec.Rows {
			what := fmt.Sprintf("list.sections[%d].rows[%d]", i, j)
			switch {
			case r.ID == "" || len(r.ID) > maxCustomID:
				return nil, unsupported("%s id %q is %d bytes; Discord's option value holds 1-%d", what, r.ID, len(r.ID), maxCustomID)
			case ids[r.ID]:
				return nil, unsupported("%s id %q is used twice; Discord's option values are unique", what, r.ID)
			case r.Title == "" || utf8.RuneCountInString(r.Title) > maxOptionText:
				return nil, unsupported("%s title has %d characters; Discord's option label holds 1-%d", what, utf8.RuneCountInString(r.Title), maxOptionText)
			case utf8.RuneCountInString(r.Description) > maxOptionText:
				return nil, unsupported("%s description is over Discord's %d characters", what, maxOptionText)
			}
			ids[r.ID] = true
			sel.Options = append(sel.Options, SelectOption{Label: r.Title, Value: r.ID, Description: r.Description})
		}
	}
	if n := len(sel.Options); n == 0 || n > maxOptions {
		return nil, unsupported("the list has %d rows; Discord's select menu holds 1-%d options", n, maxOptions)
	}
	return []Component{{Type: componentRow, Components: []Component{sel}}}, nil
}

// title returns what the component a press names shows: the label of the
// button whose custom_id is id, or of the option whose value is id.
func title(rows []Component, id string) string {
	for _, row := range rows {
		for _, c := range row.Components {
			if c.Type == componentButton && c.CustomID == id {
				return c.Label
			}
			for _, o := range c.Options {
				if o.Value == id {
					return o.Label
				}
			}
		}
	}
	return ""
}

// cut shortens s to at most n bytes.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
