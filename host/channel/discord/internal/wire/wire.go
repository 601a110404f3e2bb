package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
)

// User is a Discord user.
type User struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot"`
}

// Attachment is a file on a message (or an attachment option's file).
type Attachment struct {
	ID          string `json:"id"`
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	URL         string `json:"url"`
	ProxyURL    string `json:"proxy_url"`
}

// Message is a Discord message (a Gateway MESSAGE_CREATE's d).
type Message struct {
	ID          string       `json:"id"`
	ChannelID   string       `json:"channel_id"`
	GuildID     string       `json:"guild_id"`
	Author      *User        `json:"author"`
	Content     string       `json:"content"`
	Timestamp   string       `json:"timestamp"`
	Type        int          `json:"type"`
	WebhookID   string       `json:"webhook_id"`
	Attachments []Attachment `json:"attachments"`
	Components  []Component  `json:"components"`
}

// The message types botrun reads: a plain message and a reply.
const (
	messageDefault = 0
	messageReply   = 19
)

// Interaction is an interaction, posted to the webhook or dispatched as the
// Gateway's INTERACTION_CREATE.
type Interaction struct {
	ID            string           `json:"id"`
	ApplicationID string           `json:"application_id"`
	Type          int              `json:"type"`
	Data          *InteractionData `json:"data"`
	GuildID       string           `json:"guild_id"`
	ChannelID     string           `json:"channel_id"`
	Channel       *struct {
		ID string `json:"id"`
	} `json:"channel"`
	Member *struct {
		User *User `json:"user"`
	} `json:"member"`
	User    *User    `json:"user"`
	Token   string   `json:"token"`
	Message *Message `json:"message"`
}

// InteractionData is a command's name, options and resolved attachments, or
// a component's custom_id and selected values.
type InteractionData struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Options  []CommandOption `json:"options"`
	Resolved *struct {
		Attachments map[string]Attachment `json:"attachments"`
	} `json:"resolved"`
	CustomID      string   `json:"custom_id"`
	ComponentType int      `json:"component_type"`
	Values        []string `json:"values"`
}

// CommandOption is one option of a slash command (or a subcommand with its
// own options).
type CommandOption struct {
	Name    string          `json:"name"`
	Type    int             `json:"type"`
	Value   json.RawMessage `json:"value"`
	Options []CommandOption `json:"options"`
}

// The interaction types, the callback types botrun answers with, and the
// option types it reads.
const (
	InteractionPing         = 1
	InteractionCommand      = 2
	InteractionComponent    = 3
	InteractionAutocomplete = 4

	CallbackPong            = 1
	CallbackDeferredMessage = 5
	CallbackDeferredUpdate  = 6
	CallbackAutocomplete    = 8

	optionSubcommand      = 1
	optionSubcommandGroup = 2
	optionAttachment      = 11
)

// ErrBadPayload is wrapped by every decoding error.
var ErrBadPayload = errors.New("bad discord payload")

// maxTokenLen bounds an interaction token (Discord's are about 200
// characters).
const maxTokenLen = 1024

// DecodeInteraction parses an interaction from untrusted bytes.
func DecodeInteraction(b []byte) (Interaction, error) {
	var ix Interaction
	if err := json.Unmarshal(b, &ix); err != nil {
		return ix, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	if !Snowflake(ix.ID) || ix.Type < InteractionPing {
		return ix, fmt.Errorf("%w: an interaction without id or type", ErrBadPayload)
	}
	if ix.ChannelID == "" && ix.Channel != nil {
		ix.ChannelID = ix.Channel.ID
	}
	if ix.Type == InteractionCommand || ix.Type == InteractionComponent {
		switch {
		case ix.Data == nil:
			return ix, fmt.Errorf("%w: interaction %s has no data", ErrBadPayload, ix.ID)
		case !Snowflake(ix.ChannelID):
			return ix, fmt.Errorf("%w: interaction %s has no channel_id", ErrBadPayload, ix.ID)
		case ix.Token == "" || len(ix.Token) > maxTokenLen || strings.ContainsAny(ix.Token, "/?#%"):
			return ix, fmt.Errorf("%w: interaction %s has no usable token", ErrBadPayload, ix.ID)
		case ix.Message != nil && !Snowflake(ix.Message.ID):
			return ix, fmt.Errorf("%w: interaction %s: its message has no id", ErrBadPayload, ix.ID)
		}
	}
	return ix, nil
}

// DecodeMessage parses a message (a MESSAGE_CREATE's d) from untrusted
// bytes.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	if !Snowflake(m.ID) || !Snowflake(m.ChannelID) {
		return m, fmt.Errorf("%w: a message without id or channel_id", ErrBadPayload)
	}
	return m, nil
}

// mediaType is the kind of an attachment, by its content type.
func mediaType(contentType string) string {
	for _, kind := range []string{"image", "video", "audio"} {
		if strings.HasPrefix(contentType, kind+"/") {
			return kind
		}
	}
	return "document"
}

// media is an attachment as an inbound media.
func (a Attachment) media() channel.Media {
	return channel.Media{Type: mediaType(a.ContentType), Ref: a.URL, MIME: a.ContentType}
}

// inbound turns a message into what botrun admits; ok is false for what it
// ignores: a bot's or a webhook's message (its own follow-ups among them),
// system messages, and a message with neither text nor files (its content is
// empty without the MESSAGE_CONTENT intent).
func (m Message) Inbound() (channel.Message, bool) {
	if m.Author == nil || m.Author.Bot || m.WebhookID != "" || (m.Type != messageDefault && m.Type != messageReply) {
		return channel.Message{}, false
	}
	out := channel.Message{ID: m.ID, Chat: m.ChannelID, From: m.Author.ID, Text: m.Content}
	if t, err := time.Parse(time.RFC3339Nano, m.Timestamp); err == nil {
		out.ReceivedAt = t
	}
	for _, a := range m.Attachments {
		if a.URL != "" {
			out.Media = append(out.Media, a.media())
		}
	}
	return out, out.Text != "" || len(out.Media) > 0
}

// from is the user who made the interaction: member.user in a guild, user
// in a DM.
func (ix Interaction) from() *User {
	if ix.Member != nil && ix.Member.User != nil {
		return ix.Member.User
	}
	return ix.User
}

// inbound turns a command or a press into what botrun admits; ok is false
// for other interactions and a bot's. A command is a text message: its
// options' values, space-separated, in order (subcommands included), or
// "/name" (with its subcommands) when it has no value; attachment options are
// its media. A press is an interaction whose id is the button's custom_id or
// the selected option's value, with its label and the message it was on.
func (ix Interaction) Inbound() (channel.Message, bool) {
	u := ix.from()
	if u == nil || u.Bot || ix.Data == nil {
		return channel.Message{}, false
	}
	out := channel.Message{ID: ix.ID, Chat: ix.ChannelID, From: u.ID}
	switch ix.Type {
	case InteractionCommand:
		var values, path []string
		ix.Data.walk(ix.Data.Options, &values, &path, &out.Media)
		out.Text = strings.Join(values, " ")
		if out.Text == "" && len(out.Media) == 0 {
			out.Text = strings.Join(append([]string{"/" + ix.Data.Name}, path...), " ")
		}
	case InteractionComponent:
		id := ix.Data.CustomID
		if ix.Data.ComponentType == componentSelect {
			if len(ix.Data.Values) == 0 {
				return channel.Message{}, false
			}
			id = ix.Data.Values[0]
		}
		if id == "" {
			return channel.Message{}, false
		}
		out.Interaction = &abi.Interaction{ID: id}
		if m := ix.Message; m != nil {
			out.Interaction.Message = m.ID
			out.Interaction.Title = title(m.Components, id)
		}
	default:
		return channel.Message{}, false
	}
	return out, true
}

// walk collects a command's option values, subcommand names and
// attachments, in order.
func (d *InteractionData) walk(opts []CommandOption, values, path *[]string, media *[]channel.Media) {
	for _, o := range opts {
		switch o.Type {
		case optionSubcommand, optionSubcommandGroup:
			*path = append(*path, o.Name)
			d.walk(o.Options, values, path, media)
		case optionAttachment:
			var id string
			if json.Unmarshal(o.Value, &id) == nil && d.Resolved != nil {
				if a, ok := d.Resolved.Attachments[id]; ok && a.URL != "" {
					*media = append(*media, a.media())
				}
			}
		default:
			// Strings (and the ids of user, channel and role options) as
			// they are; numbers and booleans as JSON writes them.
			v := strings.TrimSpace(string(o.Value))
			var s string
			if json.Unmarshal(o.Value, &s) == nil {
				v = s
			}
			if v != "" && v != "null" {
				*values = append(*values, v)
			}
		}
	}
}

// Payload is one Gateway frame.
type Payload struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  int64           `json:"s"`
	T  string          `json:"t"`
}

// The Gateway opcodes.
const (
	OpDispatch       = 0
	OpHeartbeat      = 1
	OpIdentify       = 2
	OpResume         = 6
	OpReconnect      = 7
	OpInvalidSession = 9
	OpHello          = 10
	OpHeartbeatACK   = 11
)

// DecodePayload parses a Gateway frame from untrusted bytes; a dispatch's
// data is decoded by its handler (DecodeMessage, DecodeInteraction).
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	if p.Op == OpDispatch && (p.T == "" || p.S <= 0) {
		return p, fmt.Errorf("%w: a dispatch without t or s", ErrBadPayload)
	}
	return p, nil
}

// TextLimit is Discord's longest message content, in characters.
const TextLimit = 2000

// Snowflake reports whether s is a Discord id: 1 to 20 decimal digits.
func Snowflake(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
