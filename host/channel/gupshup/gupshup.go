// Package gupshup is the Gupshup WhatsApp channel (type "gupshup"): one
// Gupshup app and its WhatsApp number.
//
// Gupshup does not sign its webhooks. The callback URL configured in
// Gupshup's console carries the entry's webhook_token as its token query
// parameter (https://<host>/webhooks/<id>?token=<webhook_token>), checked in
// constant time before the body is read: a missing token is 401, a wrong one
// 403. Bodies are Gupshup's own format (version 2): a "message" event is
// admitted under its payload id; "message-event" (statuses), "user-event"
// and every other type are acknowledged and ignored, and so are the events
// of another app. Gupshup waits 10 seconds for an answer and then retries:
// the webhook answers as soon as the message is journaled, and the bot's
// handler runs after the answer (from the inbox), never within it.
//
// Sends are POST {api_url}/wa/api/v1/msg, a form (channel=whatsapp, source,
// destination, src.name, and message: the message object as JSON) with the
// api key in the apikey header. Texts hold 4,096 characters; media go by
// public URL with the send's text as the caption; reply buttons (up to 3) go
// as a quick_reply message and a list (up to 10 rows) as a list message, and
// their presses come back as button_reply and list_reply interactions. URL
// buttons, edits and typing are not supported.
//
// Inbound media are journaled by their URL (package urlmedia), only when it
// is https on gupshup.io or a subdomain (media_ref_hosts replaces the list),
// and downloaded without the api key; Gupshup keeps them for a limited time.
package gupshup

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// DefaultAPI is Gupshup's API; api_url replaces it (tests).
const DefaultAPI = "https://api.gupshup.io"

// SendPath is the path of the send API below api_url.
const SendPath = "/wa/api/v1/msg"

// MaxBody is the largest webhook body accepted.
const MaxBody = 256 << 10

// TextLimit is WhatsApp's longest text message, in characters.
const TextLimit = 4096

// MediaHosts are the hosts whose media URLs are journaled and downloaded,
// unless media_ref_hosts replaces them.
var MediaHosts = []string{"gupshup.io"}

func init() {
	channel.Register(channel.Type{Name: "gupshup", Config: func() channel.Config {
		return &Config{APIURL: DefaultAPI}
	}})
}

// Config is a [[channels]] entry of type "gupshup".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is Gupshup's API base URL (default https://api.gupshup.io).
	APIURL string `toml:"api_url"`
	// APIKey authenticates sends (the apikey header; use ${ENV}).
	APIKey string `toml:"api_key"`
	// AppName is the Gupshup app's name: src.name of every send, and the
	// app of the webhooks this channel handles.
	AppName string `toml:"app_name"`
	// Source is the app's WhatsApp number, country code and number in
	// digits (917834811114).
	Source string `toml:"source"`
	// WebhookToken is the token query parameter the callback URL carries
	// (Gupshup signs nothing); at least 16 URL-safe characters.
	WebhookToken string `toml:"webhook_token"`
	// MediaRefHosts replaces MediaHosts.
	MediaRefHosts []string `toml:"media_ref_hosts"`
}

var (
	digits    = regexp.MustCompile(`^[0-9]{6,15}$`)
	tokenChar = regexp.MustCompile(`^[A-Za-z0-9._~-]{16,256}$`)
)

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "api_key", c.APIKey, "the API key from Gupshup's console (your profile > API key; use ${ENV} to keep it out of the file)")
	httpkit.Required(problem, "app_name", c.AppName, "the Gupshup app's name, as in the console's dashboard")
	if !digits.MatchString(c.Source) {
		problem("source", "%q: want the app's WhatsApp number, country code and number in digits, without + (917834811114)", c.Source)
	}
	if !tokenChar.MatchString(c.WebhookToken) {
		problem("webhook_token", "missing or not 16-256 of A-Z a-z 0-9 . _ ~ -: Gupshup does not sign its webhooks, so its callback URL must carry this secret as ?token=<webhook_token> (use ${ENV})")
	}
	httpkit.CheckAPIURL(c.APIURL, problem)
	urlmedia.CheckHosts(problem, "media_ref_hosts", c.MediaRefHosts)
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Gupshup app. Its embedded Media journals and loads the
// inbound media.
type Provider struct {
	httpkit.Base
	*urlmedia.Media
	cfg Config
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	p := &Provider{}
	if err := p.Open("gupshup", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID = p.ID()
	hosts := cfg.MediaRefHosts
	if hosts == nil {
		hosts = MediaHosts
	}
	p.Media, p.cfg = urlmedia.New("gupshup "+cfg.ID, p.API, hosts, nil), cfg
	// The api key rides in a header Go keeps on a redirect: sends follow
	// none.
	p.Dial(30*time.Second, nil)
	return p, nil
}

// TextLimits implements channel.Limiter: the text of a message with buttons
// or a list holds 1,024 characters.
func (p *Provider) TextLimits(msg channel.Outbound) (chars, bytes int) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return min(MaxChoiceBody, TextLimit), 0
	}
	return TextLimit, 0
}

// Event is a webhook body: {"app","timestamp","version":2,"type","payload"}.
type Event struct {
	App       string          `json:"app"`
	Timestamp json.Number     `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

// Message is the payload of a "message" event.
type Message struct {
	ID      string  `json:"id"`
	Source  string  `json:"source"`
	Type    string  `json:"type"`
	Payload Content `json:"payload"`
	Sender  struct {
		Phone string `json:"phone"`
		Name  string `json:"name"`
	} `json:"sender"`
	// Context is the message replied to (a press's message): Gupshup's id
	// (gsId, what a send returned) and WhatsApp's.
	Context *struct {
		ID   string `json:"id"`
		GsID string `json:"gsId"`
	} `json:"context"`
}

// Content is a message's own payload: the fields of text, media and
// button_reply/list_reply messages (the others are not read).
type Content struct {
	Text         string `json:"text"`
	URL          string `json:"url"`
	Caption      string `json:"caption"`
	ContentType  string `json:"contentType"`
	Title        string `json:"title"`
	ID           string `json:"id"`
	PostbackText string `json:"postbackText"`
}

// ErrBadWebhook is wrapped by every DecodeWebhook error.
var ErrBadWebhook = errors.New("bad webhook")

// DecodeWebhook parses a webhook body from untrusted bytes. msg is nil for
// an event that is not a message (statuses, user and system events), which
// is acknowledged and ignored.
func DecodeWebhook(b []byte) (ev Event, msg *Message, err error) {
	if err := json.Unmarshal(b, &ev); err != nil {
		return Event{}, nil, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	if ev.Type != "message" {
		return ev, nil, nil
	}
	var m Message
	if err := json.Unmarshal(ev.Payload, &m); err != nil {
		return Event{}, nil, fmt.Errorf("%w: the message payload: %v", ErrBadWebhook, err)
	}
	if m.ID == "" || m.Source == "" {
		return Event{}, nil, fmt.Errorf("%w: a message without payload.id or payload.source", ErrBadWebhook)
	}
	return ev, &m, nil
}

// mediaTypes maps Gupshup's media message types onto botrun's.
var mediaTypes = map[string]string{"image": "image", "video": "video", "audio": "audio", "file": "document", "sticker": "sticker"}

// Inbound turns a message into what botrun admits; ok is false for the types
// botrun does not read (locations, contacts, reactions, …) and for empty
// messages.
func (m Message) Inbound(at time.Time) (channel.Message, bool) {
	out := channel.Message{ID: m.ID, Chat: m.Source, From: m.Source, ReceivedAt: at}
	c := m.Payload
	switch kind := mediaTypes[m.Type]; {
	case m.Type == "text", m.Type == "quick_reply": // a template's quick reply is its text
		out.Text = c.Text
	case kind != "":
		if c.URL == "" {
			return channel.Message{}, false
		}
		out.Media = []channel.Media{{Type: kind, Ref: c.URL, MIME: c.ContentType, Caption: c.Caption}}
		out.Text = c.Caption
	case m.Type == "button_reply", m.Type == "list_reply":
		id := c.PostbackText // the button's or row's id as the send gave it
		if id == "" {
			id = c.ID
		}
		if id == "" {
			return channel.Message{}, false
		}
		out.Interaction = &abi.Interaction{ID: id, Title: c.Title}
		if m.Context != nil {
			out.Interaction.Message = m.Context.GsID
			if out.Interaction.Message == "" {
				out.Interaction.Message = m.Context.ID
			}
		}
	default:
		return channel.Message{}, false
	}
	return out, out.Text != "" || len(out.Media) > 0 || out.Interaction != nil
}

// Time is the event's time (milliseconds since the epoch), zero when unknown.
func (ev Event) Time() time.Time {
	ms, err := ev.Timestamp.Int64()
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Routes implements channel.Router: the callback URL.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	if !httpkit.CheckQueryToken(w, r, p.cfg.WebhookToken) {
		return
	}
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	if strings.TrimSpace(string(body)) == "" {
		// Gupshup's console checks a callback URL with an empty POST.
		w.WriteHeader(http.StatusOK)
		return
	}
	ev, m, err := DecodeWebhook(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.Answer(w, r, p.messages(ev, m)...)
}

// messages are what botrun admits of a webhook: its message, unless it is
// none, another app's, or of a type botrun does not read.
func (p *Provider) messages(ev Event, m *Message) []channel.Message {
	switch {
	case m == nil && ev.Type == "":
		p.Log.Warn("gupshup: a webhook that is not in Gupshup's format (version 2) ignored: set the app's callback format to Gupshup's", "provider", p.cfg.ID)
		return nil
	case m == nil:
		return nil
	case ev.App != p.cfg.AppName:
		p.Log.Warn("gupshup: a message for another app ignored", "provider", p.cfg.ID, "app", ev.App)
		return nil
	}
	if msg, ok := m.Inbound(ev.Time()); ok {
		return []channel.Message{msg}
	}
	return nil
}
