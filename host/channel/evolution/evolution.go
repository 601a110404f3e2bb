// Package evolution is the Evolution API channel (type "evolution"): one
// WhatsApp account as an instance of a self-hosted Evolution API server.
//
// Inbound, Evolution POSTs its events to /webhooks/<id> (and, with
// webhook_by_events, /webhooks/<id>/<event>). With jwt_key set, every
// webhook must carry Authorization: Bearer <HS256 JWT> signed with it,
// checked before the body is read (VerifyJWT); without it, the body's apikey
// (the instance's token, which Evolution adds when
// AUTHENTICATION_EXPOSE_IN_FETCH_INSTANCES is true) must equal api_key,
// compared in constant time. messages.upsert is admitted under key.id, so
// Evolution's retries (up to 10) are duplicates; the channel's own messages
// (fromMe), status broadcasts, channels, other instances' events and every
// other event are acknowledged and ignored. The inline base64 a webhook may
// carry (webhook_base64) is never read or journaled: a media's reference is
// its message's key.id on the instance, and its bytes are asked of
// POST /chat/getBase64FromMediaMessage/{instance} when a handler loads them.
//
// Outbound: POST /message/sendText/{instance} and /message/sendMedia/{instance}
// with the apikey header; the id is the answer's key.id. Buttons and lists
// are refused (WhatsApp shows them to Business Platform senders only), and
// so are edits and typing: Evolution's updateMessage edits within 15
// minutes only, and its sendPresence holds the request open for the whole
// "typing" time.
package evolution

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/gateway"
)

// MaxBody is the largest webhook body accepted (turn webhook_base64 off).
const MaxBody = gateway.MaxBody

// SignatureHeader carries the webhook's JWT when jwt_key is set.
const SignatureHeader = "Authorization"

func init() {
	channel.Register(channel.Type{Name: "evolution", Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "evolution".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is the Evolution server's base URL.
	APIURL string `toml:"api_url"`
	// APIKey authenticates sends (the apikey header): the instance's token,
	// or the server's AUTHENTICATION_API_KEY. Without jwt_key it must be the
	// instance's token, which webhooks carry (use ${ENV}).
	APIKey string `toml:"api_key"`
	// Instance is the instance's name.
	Instance string `toml:"instance"`
	// JWTKey, when set, is the jwt_key of the instance's webhook headers:
	// every webhook must carry a JWT it signed (use ${ENV}).
	JWTKey string `toml:"jwt_key"`
}

// minJWTKey is the shortest jwt_key: a captured token lets anyone try keys
// offline.
const minJWTKey = 16

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "api_url", c.APIURL, "the Evolution API server's URL (https, or http on loopback)")
	httpkit.CheckAPIURL(c.APIURL, problem)
	httpkit.Required(problem, "api_key", c.APIKey, "the instance's token (its apikey) from Evolution, or the server's AUTHENTICATION_API_KEY with jwt_key set (use ${ENV})")
	httpkit.Required(problem, "instance", c.Instance, "the Evolution instance's name")
	if strings.ContainsFunc(c.Instance, unicode.IsControl) {
		problem("instance", "%q holds a control character", c.Instance)
	}
	if c.JWTKey != "" && len(c.JWTKey) < minJWTKey {
		problem("jwt_key", "%d characters: use at least %d random ones (a captured token lets anyone guess a short key offline)", len(c.JWTKey), minJWTKey)
	}
}

// ReplayWindow implements channel.Replayable: with jwt_key, a captured
// webhook's token passes for ReplayWindow. Without it the body's apikey has
// no time at all (see docs/security.md: replayable once its record is purged).
func (c *Config) ReplayWindow() time.Duration {
	if c.JWTKey == "" {
		return 0
	}
	return ReplayWindow
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Evolution API instance.
type Provider struct {
	*gateway.Channel
	cfg Config
	now func() time.Time
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.Instance == "" || cfg.APIKey == "" {
		return nil, fmt.Errorf("evolution %s: instance and api_key are required", cfg.ID)
	}
	p := &Provider{cfg: cfg, now: env.Clock()}
	ch, err := gateway.New(gateway.Spec{Type: "evolution", ID: cfg.ID, APIURL: cfg.APIURL, Owner: cfg.Instance,
		Auth: func(h http.Header) { h.Set("apikey", cfg.APIKey) }, MapError: mapError, Media: p.media, Decode: p.decode}, env)
	if err != nil {
		return nil, err
	}
	p.Channel, p.cfg.ID = ch, ch.ID()
	return p, nil
}

// Routes implements channel.Router: the webhook, with and without the
// event's name appended (webhook_by_events).
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID+"/{event}", p.webhook)
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	if p.cfg.JWTKey != "" && !p.checkJWT(w, r) {
		return
	}
	p.Serve(w, r)
}

// decode is the gateway's Spec.Decode: without jwt_key, the body's apikey
// authenticates it.
func (p *Provider) decode(body []byte) (gateway.Event, error) {
	wh, err := DecodeWebhook(body)
	if err != nil {
		return gateway.Event{}, err
	}
	if p.cfg.JWTKey == "" {
		if err := p.checkAPIKey(wh.APIKey); err != nil {
			return gateway.Event{}, err
		}
	}
	msgs, err := wh.Messages()
	return gateway.Event{Owner: wh.Instance, Messages: msgs}, err
}

// checkJWT checks the Authorization header's JWT: missing is 401, bad 403.
func (p *Provider) checkJWT(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get(SignatureHeader)
	if auth == "" {
		http.Error(w, "missing Authorization: Bearer <JWT> (jwt_key is set: put the same jwt_key in the instance's webhook headers)", http.StatusUnauthorized)
		return false
	}
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		http.Error(w, "Authorization is not Bearer <JWT>", http.StatusForbidden)
		return false
	}
	if err := VerifyJWT(token, []byte(p.cfg.JWTKey), p.now()); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return false
	}
	return true
}

// checkAPIKey checks the body's apikey against api_key (no jwt_key):
// missing is 401, different 403.
func (p *Provider) checkAPIKey(got *string) error {
	if got == nil || *got == "" {
		return &gateway.Refusal{Status: http.StatusUnauthorized, Reason: "the body has no apikey: set jwt_key, or let Evolution send the instance's apikey (AUTHENTICATION_EXPOSE_IN_FETCH_INSTANCES=true) with api_key that instance's token"}
	}
	if subtle.ConstantTimeCompare([]byte(*got), []byte(p.cfg.APIKey)) != 1 {
		return &gateway.Refusal{Status: http.StatusForbidden, Reason: "the body's apikey is not api_key (without jwt_key, api_key must be the instance's token)"}
	}
	return nil
}

// ErrBadWebhook is wrapped by every DecodeWebhook and Messages error.
var ErrBadWebhook = gateway.ErrBadWebhook

// Webhook is the envelope of an Evolution event.
type Webhook struct {
	Event    string          `json:"event"`
	Instance string          `json:"instance"`
	Data     json.RawMessage `json:"data"`
	// APIKey is the instance's token, when Evolution exposes it.
	APIKey *string `json:"apikey"`
}

// DecodeWebhook parses an event's envelope from untrusted bytes; its data is
// read by Messages, once the webhook is authenticated.
func DecodeWebhook(b []byte) (Webhook, error) {
	return gateway.DecodeEnvelope(b, func(wh Webhook) string { return wh.Event })
}

// Upsert is one message of a messages.upsert event.
type Upsert struct {
	Key struct {
		RemoteJid   string `json:"remoteJid"`
		FromMe      bool   `json:"fromMe"`
		ID          string `json:"id"`
		Participant string `json:"participant"`
	} `json:"key"`
	PushName         string            `json:"pushName"`
	Message          *Content          `json:"message"`
	MessageType      string            `json:"messageType"`
	MessageTimestamp gateway.Timestamp `json:"messageTimestamp"`
}

// Content is a message's content as Baileys writes it. Only what botrun
// reads is decoded: never the base64 Evolution may add beside it.
type Content struct {
	Conversation        string `json:"conversation"`
	ExtendedTextMessage *struct {
		Text string `json:"text"`
	} `json:"extendedTextMessage"`
	ImageMessage    *MediaContent `json:"imageMessage"`
	VideoMessage    *MediaContent `json:"videoMessage"`
	AudioMessage    *MediaContent `json:"audioMessage"`
	DocumentMessage *MediaContent `json:"documentMessage"`
	StickerMessage  *MediaContent `json:"stickerMessage"`
	// Wrappers of another message.
	DocumentWithCaptionMessage *Wrapper `json:"documentWithCaptionMessage"`
	EphemeralMessage           *Wrapper `json:"ephemeralMessage"`
	ViewOnceMessage            *Wrapper `json:"viewOnceMessage"`
	ViewOnceMessageV2          *Wrapper `json:"viewOnceMessageV2"`
}

// Wrapper holds another message (ephemeral, view once, a document with a
// caption).
type Wrapper struct {
	Message *Content `json:"message"`
}

// MediaContent is a media message's description (its bytes are fetched
// from Evolution).
type MediaContent struct {
	Mimetype string `json:"mimetype"`
	Caption  string `json:"caption"`
	FileName string `json:"fileName"`
}

// unwrap is the message a wrapper holds, at most three deep.
func (c *Content) unwrap() *Content {
	for range 3 {
		if c == nil {
			return nil
		}
		var next *Wrapper
		for _, w := range []*Wrapper{c.DocumentWithCaptionMessage, c.EphemeralMessage, c.ViewOnceMessage, c.ViewOnceMessageV2} {
			if w != nil && w.Message != nil {
				next = w
			}
		}
		if next == nil {
			return c
		}
		c = next.Message
	}
	return c
}

// Messages are the messages of a messages.upsert event that botrun admits
// (none for any other event). Untrusted bytes.
func (wh Webhook) Messages() ([]channel.Message, error) {
	if ev := strings.ToLower(strings.ReplaceAll(wh.Event, "_", ".")); ev != "messages.upsert" {
		return nil, nil
	}
	var ups []Upsert
	data := strings.TrimSpace(string(wh.Data))
	if strings.HasPrefix(data, "[") {
		if err := json.Unmarshal(wh.Data, &ups); err != nil {
			return nil, fmt.Errorf("%w: data: %v", ErrBadWebhook, err)
		}
	} else {
		var u Upsert
		if err := json.Unmarshal(wh.Data, &u); err != nil {
			return nil, fmt.Errorf("%w: data: %v", ErrBadWebhook, err)
		}
		ups = []Upsert{u}
	}
	var out []channel.Message
	for _, u := range ups {
		if u.Key.ID == "" || u.Key.RemoteJid == "" {
			return nil, fmt.Errorf("%w: a message without key.id or key.remoteJid", ErrBadWebhook)
		}
		if msg, ok := u.Inbound(); ok {
			out = append(out, msg)
		}
	}
	return out, nil
}

// Inbound turns a message into what botrun admits; ok is false for the
// instance's own messages (fromMe), status broadcasts and channels, and the
// kinds botrun does not handle (reactions, polls, locations, contacts,
// protocol messages, button replies).
func (u Upsert) Inbound() (channel.Message, bool) {
	k := u.Key
	if k.FromMe || !gateway.Conversational(k.RemoteJid) {
		return channel.Message{}, false
	}
	out := channel.Message{ID: k.ID, Chat: k.RemoteJid, From: k.RemoteJid, ReceivedAt: u.MessageTimestamp.Time()}
	if k.Participant != "" {
		out.From = k.Participant // a group's member
	}
	c := u.Message.unwrap()
	if c == nil {
		return channel.Message{}, false
	}
	out.Text = c.Conversation
	if c.ExtendedTextMessage != nil && out.Text == "" {
		out.Text = c.ExtendedTextMessage.Text
	}
	for _, m := range []struct {
		kind string
		md   *MediaContent
	}{{"image", c.ImageMessage}, {"video", c.VideoMessage}, {"audio", c.AudioMessage}, {"document", c.DocumentMessage}, {"sticker", c.StickerMessage}} {
		if m.md != nil {
			out.Media = []channel.Media{{Type: m.kind, Ref: k.ID, MIME: m.md.Mimetype, Caption: m.md.Caption}}
			out.Text = m.md.Caption
			break
		}
	}
	return out, out.Text != "" || len(out.Media) > 0
}
