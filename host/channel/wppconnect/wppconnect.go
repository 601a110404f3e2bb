// Package wppconnect is the WPPConnect server channel (type "wppconnect"):
// one WhatsApp account as a session of a self-hosted WPPConnect server.
//
// Inbound, WPPConnect POSTs its events to the session's webhook URL, which
// is /webhooks/<id>?token=<webhook_token>: WPPConnect signs nothing, so the
// secret rides in the URL and is compared in constant time before the body
// is read (httpkit.CheckQueryToken). onmessage and unreadmessages are
// admitted under the message's serialized id; the session's own messages
// (fromMe), status broadcasts, channels, other sessions' events and every
// other event are acknowledged and ignored. A media's body (a thumbnail, or
// with autoDownload the whole file in base64) is never read or journaled:
// its reference is the message's id on the session, and its bytes are asked
// of GET /api/{session}/get-media-by-message/{messageId} when a handler
// loads them. WPPConnect does not retry a webhook: one botrun answers 503
// (a full queue) is lost unless the session's unread messages are sent
// again (webhook.allUnreadOnStart).
//
// Outbound: POST /api/{session}/send-message, send-image and send-file with
// the session's Bearer token; the id is the answer's response[].id. Typing
// is POST /api/{session}/typing. Buttons and lists are refused (WhatsApp
// shows them to Business Platform senders only); edits are not offered.
package wppconnect

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/gateway"
)

// MaxBody is the largest webhook body accepted (turn autoDownload off).
const MaxBody = gateway.MaxBody

// TokenParameter is the webhook URL's query parameter that carries
// webhook_token.
const TokenParameter = "token"

func init() {
	// session is the WPPConnect session's name: the gateway holds the
	// WhatsApp session, and every replica may call it.
	channel.Register(channel.Type{Name: "wppconnect", Config: func() channel.Config { return &Config{} }, OwnSessionKey: true})
}

// Config is a [[channels]] entry of type "wppconnect".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is the WPPConnect server's base URL.
	APIURL string `toml:"api_url"`
	// Token is the session's Bearer token, from
	// POST /api/{session}/{secretkey}/generate-token (use ${ENV}).
	Token string `toml:"token"`
	// Session is the session's name.
	Session string `toml:"session"`
	// WebhookToken is the secret of the webhook URL's token parameter
	// (use ${ENV}).
	WebhookToken string `toml:"webhook_token"`
}

// webhookToken is what a webhook_token may hold: characters a URL carries
// unencoded, and enough of them not to be guessed.
var webhookToken = regexp.MustCompile(`^[A-Za-z0-9._~-]{16,256}$`)

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "api_url", c.APIURL, "the WPPConnect server's URL (https, or http on loopback)")
	httpkit.CheckAPIURL(c.APIURL, problem)
	httpkit.Required(problem, "token", c.Token, "the session's token from POST /api/<session>/<secretkey>/generate-token (use ${ENV})")
	httpkit.Required(problem, "session", c.Session, "the WPPConnect session's name")
	if strings.ContainsAny(c.Session, ":/") || strings.ContainsFunc(c.Session, unicode.IsControl) {
		problem("session", "%q: a session's name holds no ':', '/' or control character", c.Session)
	}
	switch {
	case c.WebhookToken == "":
		problem("webhook_token", "missing: WPPConnect signs no webhook, so its URL must carry a secret: 16-256 random characters of A-Z a-z 0-9 . _ ~ - (use ${ENV}), then the session's webhook is https://<your host>/webhooks/<id>?token=<webhook_token>")
	case !webhookToken.MatchString(c.WebhookToken):
		problem("webhook_token", "want 16-256 random characters of A-Z a-z 0-9 . _ ~ - (the webhook URL carries it unencoded)")
	}
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one WPPConnect session.
type Provider struct {
	*gateway.Channel
	cfg Config
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.Session == "" || cfg.Token == "" || cfg.WebhookToken == "" {
		return nil, fmt.Errorf("wppconnect %s: session, token and webhook_token are required", cfg.ID)
	}
	p := &Provider{cfg: cfg}
	ch, err := gateway.New(gateway.Spec{Type: "wppconnect", ID: cfg.ID, APIURL: cfg.APIURL, Owner: cfg.Session,
		Auth: func(h http.Header) { h.Set("Authorization", "Bearer "+cfg.Token) }, MapError: mapError, Media: p.media, Decode: decode}, env)
	if err != nil {
		return nil, err
	}
	p.Channel, p.cfg.ID = ch, ch.ID()
	return p, nil
}

// Routes implements channel.Router: the webhook.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, func(w http.ResponseWriter, r *http.Request) {
		if httpkit.CheckQueryToken(w, r, p.cfg.WebhookToken) {
			p.Serve(w, r)
		}
	})
}

// decode is the gateway's Spec.Decode.
func decode(body []byte) (gateway.Event, error) {
	wh, err := DecodeWebhook(body)
	ev := gateway.Event{Owner: wh.Session}
	if err == nil && wh.Message != nil {
		if msg, ok := wh.Message.Inbound(); ok {
			ev.Messages = []channel.Message{msg}
		}
	}
	return ev, err
}

// ErrBadWebhook is wrapped by every DecodeWebhook error.
var ErrBadWebhook = gateway.ErrBadWebhook

// JID is a WhatsApp id as WPPConnect writes it: a string, or an object with
// _serialized. Anything else is "".
type JID string

// UnmarshalJSON implements json.Unmarshaler; it never fails.
func (j *JID) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*j = JID(s)
		return nil
	}
	var o struct {
		Serialized string `json:"_serialized"`
	}
	json.Unmarshal(b, &o)
	*j = JID(o.Serialized)
	return nil
}

// Webhook is a WPPConnect event: its name and session, and for the message
// events botrun reads (onmessage, unreadmessages) the message.
type Webhook struct {
	Event   string   `json:"event"`
	Session string   `json:"session"`
	Message *Message `json:"-"`
}

// Message is the part of a message event botrun reads. Body is read only
// for a text ("chat"): a media's body is a thumbnail or the file itself.
type Message struct {
	ID     JID             `json:"id"`
	Type   string          `json:"type"`
	Body   json.RawMessage `json:"body"`
	From   JID             `json:"from"`
	Author JID             `json:"author"`
	ChatID JID             `json:"chatId"`
	FromMe bool            `json:"fromMe"`
	Sender struct {
		ID JID `json:"id"`
	} `json:"sender"`
	T        gateway.Timestamp `json:"t"`
	Caption  string            `json:"caption"`
	Mimetype string            `json:"mimetype"`
}

// messageEvents are the events whose message botrun reads.
var messageEvents = map[string]bool{"onmessage": true, "unreadmessages": true}

// DecodeWebhook parses an event from untrusted bytes; a message event
// without an id or a sender is an error.
func DecodeWebhook(b []byte) (Webhook, error) {
	wh, err := gateway.DecodeEnvelope(b, func(wh Webhook) string { return wh.Event })
	if err != nil || !messageEvents[wh.Event] {
		return wh, err
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return wh, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	if m.ID == "" || (m.From == "" && m.ChatID == "") {
		return wh, fmt.Errorf("%w: a message without id, or without from and chatId", ErrBadWebhook)
	}
	wh.Message = &m
	return wh, nil
}

// mediaTypes maps WPPConnect's media message types onto botrun's.
var mediaTypes = map[string]string{"image": "image", "video": "video", "audio": "audio", "ptt": "audio", "document": "document", "sticker": "sticker"}

// Inbound turns a message into what botrun admits; ok is false for the
// session's own messages, status broadcasts and channels, and the types
// botrun does not handle (locations, contacts, revokes, notifications,
// polls, button replies).
func (m Message) Inbound() (channel.Message, bool) {
	if m.FromMe || strings.HasPrefix(string(m.ID), "true_") {
		return channel.Message{}, false
	}
	chat := string(m.ChatID)
	if chat == "" {
		chat = string(m.From)
	}
	if !gateway.Conversational(chat) {
		return channel.Message{}, false
	}
	out := channel.Message{ID: string(m.ID), Chat: chat, From: string(m.From), ReceivedAt: m.T.Time()}
	for _, from := range []JID{m.Sender.ID, m.Author} { // a group's member
		if from != "" {
			out.From = string(from)
		}
	}
	if m.Type == "chat" {
		json.Unmarshal(m.Body, &out.Text)
	} else if kind := mediaTypes[m.Type]; kind != "" {
		out.Media = []channel.Media{{Type: kind, Ref: out.ID, MIME: m.Mimetype, Caption: m.Caption}}
		out.Text = m.Caption
	}
	return out, out.Text != "" || len(out.Media) > 0
}
