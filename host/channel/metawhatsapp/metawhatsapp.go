// Package metawhatsapp is the Meta WhatsApp Cloud API channel (type
// "meta-whatsapp"): webhooks verified by the hub.challenge handshake and the
// X-Hub-Signature-256 HMAC of the raw body; sends through
// POST {api_url}/{phone_number_id}/messages with the Graph errors mapped onto
// the provider taxonomy; 4096-character texts; media ids as durable media
// references, downloaded with the same Bearer token.
//
// Buttons and lists go out as interactive messages (reply buttons, a single
// URL button as cta_url, a list), checked against WhatsApp's limits first;
// presses come back as interactions: button_reply and list_reply with the
// pressed id, its title and the answered message's id (context.id), and a
// template's quick-reply press with its payload.
package metawhatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// DefaultAPI is the Graph API with the version botrun speaks; api_url
// replaces it (tests, a newer version).
const DefaultAPI = "https://graph.facebook.com/v21.0"

// MaxBody is the largest webhook body accepted (Meta sends up to 3 MB).
const MaxBody = 3 << 20

// TextLimit is WhatsApp's longest text message.
const TextLimit = 4096

// SignatureHeader carries the HMAC-SHA256 of the raw body.
const SignatureHeader = graph.SignatureHeader

func init() {
	channel.Register(channel.Type{Name: "meta-whatsapp", Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "meta-whatsapp": one phone number
// on Meta's WhatsApp Cloud API.
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// Token is the access token (use ${ENV}).
	Token string `toml:"token"`
	// AppSecret verifies X-Hub-Signature-256 on every webhook (use ${ENV}).
	AppSecret string `toml:"app_secret"`
	// VerifyToken answers the hub.challenge subscription handshake.
	VerifyToken string `toml:"verify_token"`
	// PhoneNumberID is the number's id (not the number itself).
	PhoneNumberID string `toml:"phone_number_id"`
	// APIURL is the Graph API base URL with its version (default
	// https://graph.facebook.com/v21.0).
	APIURL string `toml:"api_url"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "token", c.Token, "the WhatsApp Cloud API access token (use ${ENV} to keep it out of the file)")
	httpkit.Required(problem, "app_secret", c.AppSecret, "the Meta app's secret, which signs every webhook (use ${ENV})")
	httpkit.Required(problem, "verify_token", c.VerifyToken, "a string of your choice, entered again as the webhook's verify token in the Meta app")
	httpkit.Required(problem, "phone_number_id", c.PhoneNumberID, "the phone number id from WhatsApp > API Setup (not the number itself)")
	httpkit.CheckAPIURL(c.APIURL, problem)
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one WhatsApp Business phone number.
type Provider struct {
	httpkit.Base
	cfg Config
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	p := &Provider{}
	if err := p.Open("meta-whatsapp", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID, cfg.APIURL = p.ID(), p.API.String()
	p.cfg = cfg
	p.Dial(60*time.Second, p.downloadAllowed)
	return p, nil
}

// TextLimits implements channel.Limiter: a message with buttons holds 1024
// characters of body, a list 4096.
func (p *Provider) TextLimits(msg channel.Outbound) (chars, bytes int) {
	switch {
	case msg.List != nil:
		return min(MaxListBody, TextLimit), 0
	case len(msg.Buttons) > 0:
		return min(MaxButtonBody, TextLimit), 0
	}
	return TextLimit, 0
}

// Sign returns the X-Hub-Signature-256 value of body: "sha256=<hex>".
func Sign(appSecret string, body []byte) string { return graph.Sign(appSecret, body) }

// Notification is the part of a webhook body botrun reads.
type Notification struct {
	Object string `json:"object"`
	Entry  []struct {
		Changes []struct {
			Field string `json:"field"`
			Value Value  `json:"value"`
		} `json:"changes"`
	} `json:"entry"`
}

// Value is one change's value: messages, or statuses (which are ignored).
type Value struct {
	Metadata struct {
		PhoneNumberID string `json:"phone_number_id"`
	} `json:"metadata"`
	Messages []Message        `json:"messages"`
	Statuses []map[string]any `json:"statuses"`
}

// Media is an inbound attachment.
type Media struct {
	ID       string `json:"id"`
	MimeType string `json:"mime_type"`
	Caption  string `json:"caption"`
}

// Message is one inbound message.
type Message struct {
	From      string `json:"from"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
	Text      *struct {
		Body string `json:"body"`
	} `json:"text"`
	Image    *Media `json:"image"`
	Document *Media `json:"document"`
	Audio    *Media `json:"audio"`
	Video    *Media `json:"video"`
	Sticker  *Media `json:"sticker"`
	// Button is the press of a template's quick-reply button.
	Button *struct {
		Payload string `json:"payload"`
		Text    string `json:"text"`
	} `json:"button"`
	// Interactive is the press of a reply button or the pick of a list row
	// the bot sent.
	Interactive *struct {
		Type        string `json:"type"`
		ButtonReply *Reply `json:"button_reply"`
		ListReply   *Reply `json:"list_reply"`
	} `json:"interactive"`
	// Context is the message this one answers (for a press, the message
	// the button was on).
	Context *struct {
		From string `json:"from"`
		ID   string `json:"id"`
	} `json:"context"`
}

// Reply is a pressed reply button (button_reply) or a picked list row
// (list_reply).
type Reply struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description"`
}

// ErrBadNotification is wrapped by every DecodeNotification error.
var ErrBadNotification = errors.New("bad notification")

// DecodeNotification parses a webhook body from untrusted bytes.
func DecodeNotification(b []byte) (Notification, error) {
	var n Notification
	if err := json.Unmarshal(b, &n); err != nil {
		return n, fmt.Errorf("%w: %v", ErrBadNotification, err)
	}
	if n.Object != "whatsapp_business_account" {
		return n, fmt.Errorf("%w: object %q is not whatsapp_business_account", ErrBadNotification, n.Object)
	}
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			for _, m := range c.Value.Messages {
				if m.ID == "" || m.From == "" {
					return n, fmt.Errorf("%w: a message without id or from", ErrBadNotification)
				}
			}
		}
	}
	return n, nil
}

// inbound turns a message into what botrun admits; ok is false for types
// botrun does not handle (reactions, locations, contacts, system messages,
// flow replies). A press (button_reply, list_reply, a template's quick reply)
// is an Interaction with an empty Text (the host puts the title there);
// its Message is context.id, the message the button was on.
func (m Message) inbound() (channel.Message, bool) {
	out := channel.Message{ID: m.ID, Chat: m.From, From: m.From}
	if ts, err := strconv.ParseInt(m.Timestamp, 10, 64); err == nil && ts > 0 {
		out.ReceivedAt = time.Unix(ts, 0)
	}
	media := func(kind string, md *Media) {
		if md != nil && md.ID != "" {
			out.Media = append(out.Media, channel.Media{Type: kind, Ref: md.ID, MIME: md.MimeType, Caption: md.Caption})
			out.Text = md.Caption
		}
	}
	switch {
	case m.Type == "text" && m.Text != nil:
		out.Text = m.Text.Body
	case m.Type == "image":
		media("image", m.Image)
	case m.Type == "document":
		media("document", m.Document)
	case m.Type == "audio":
		media("audio", m.Audio)
	case m.Type == "video":
		media("video", m.Video)
	case m.Type == "sticker":
		media("sticker", m.Sticker)
	case m.Type == "button" && m.Button != nil:
		if m.Button.Payload == "" {
			out.Text = m.Button.Text // no payload to report: read as text
			break
		}
		out.Interaction = &abi.Interaction{ID: m.Button.Payload, Title: m.Button.Text}
	case m.Type == "interactive" && m.Interactive != nil:
		r := m.Interactive.ButtonReply
		if m.Interactive.Type == "list_reply" || r == nil {
			r = m.Interactive.ListReply
		}
		if r == nil {
			break
		}
		if r.ID == "" {
			out.Text = r.Title // no id to report: read as the title's text
			break
		}
		out.Interaction = &abi.Interaction{ID: r.ID, Title: r.Title}
	}
	if out.Interaction != nil && m.Context != nil {
		out.Interaction.Message = m.Context.ID
	}
	return out, out.Text != "" || len(out.Media) > 0 || out.Interaction != nil
}

// Routes implements channel.Router: the verification handshake and the
// webhook.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /webhooks/"+p.cfg.ID, p.verify)
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
}

// verify answers Meta's subscription handshake.
func (p *Provider) verify(w http.ResponseWriter, r *http.Request) {
	graph.Verify(w, r, p.cfg.VerifyToken)
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	body, ok := graph.ReadSigned(w, r, MaxBody, p.cfg.AppSecret)
	if !ok {
		return
	}
	n, err := DecodeNotification(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msgs []channel.Message
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			if c.Field != "messages" {
				continue
			}
			if id := c.Value.Metadata.PhoneNumberID; id != "" && id != p.cfg.PhoneNumberID {
				p.Log.Warn("meta-whatsapp: a notification for another phone number ignored", "provider", p.cfg.ID, "phone_number_id", id)
				continue
			}
			for _, m := range c.Value.Messages {
				msg, ok := m.inbound()
				if !ok {
					p.Log.Info("meta-whatsapp: message type not handled", "provider", p.cfg.ID, "type", m.Type, "id", m.ID)
					continue
				}
				msgs = append(msgs, msg)
			}
		}
	}
	graph.Admit(w, r, p.Admitter, p.cfg.ID, msgs)
}

// codes maps WhatsApp's Graph error codes onto the taxonomy. Rate limits
// carry no Retry-After; the waits are those Meta's documentation implies.
var codes = graph.Codes{
	RateLimits: map[int]time.Duration{
		130429: time.Second,      // throughput of the number
		131056: 6 * time.Second,  // pair rate: one message every 6 s to one user
		80007:  time.Minute,      // the business account
		4:      time.Minute,      // the app
		131048: 10 * time.Minute, // spam rate limit
	},
	Classify: func(e graph.Error) error {
		switch e.Code {
		case 131047:
			return channel.ErrOutsideSessionWindow
		case 131026, 131030:
			return channel.ErrRecipientUnreachable
		case 100:
			if strings.Contains(strings.ToLower(e.Message+e.ErrorData.Details), "at most") {
				return channel.ErrPayloadTooLarge
			}
			return channel.ErrUnsupportedContent
		case 131051, 131052, 131053, 131008, 131009:
			return channel.ErrUnsupportedContent
		case 131031, 368, 190:
			return graph.ErrPermanent
		}
		return nil
	},
}

// do sends an authorized Graph request and decodes a 2xx JSON answer into out.
func (p *Provider) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	if err := httpkit.CallJSON(p.Client, req, out, codes.MapError); err != nil {
		return fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
	}
	return nil
}

// Send implements channel.Provider. A send with buttons or a list goes as an
// interactive message (see interactive); what WhatsApp cannot show fails with
// channel.ErrUnsupportedContent before any request.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	req := map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": msg.Chat}
	if len(msg.Buttons) > 0 || msg.List != nil {
		obj, err := interactive(msg)
		if err != nil {
			return "", fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
		}
		req["type"], req["interactive"] = "interactive", obj
	} else if m := msg.Media; m != nil {
		switch m.Type {
		case "image", "document", "audio", "video", "sticker":
		default:
			return "", fmt.Errorf("%w: meta-whatsapp cannot send media of type %q", channel.ErrUnsupportedContent, m.Type)
		}
		obj, err := mediaObject(m)
		if err != nil {
			return "", err
		}
		caption := m.Caption
		if caption == "" {
			caption = msg.Text
		}
		if caption != "" && m.Type != "audio" && m.Type != "sticker" {
			obj["caption"] = caption
		}
		req["type"], req[m.Type] = m.Type, obj
	} else {
		req["type"], req["text"] = "text", map[string]any{"body": msg.Text, "preview_url": false}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.APIURL+"/"+url.PathEscape(p.cfg.PhoneNumberID)+"/messages", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	var out struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
	}
	if err := p.do(hr, &out); err != nil {
		return "", err
	}
	if len(out.Messages) == 0 {
		return "", fmt.Errorf("meta-whatsapp %s: the answer has no message id", p.cfg.ID)
	}
	return out.Messages[0].ID, nil
}

// Typing implements channel.Typist: WhatsApp shows "typing…" for up to 25
// seconds (or until the reply) when the message being answered is marked
// read with a typing indicator, so replyTo (that message's wamid) is needed.
func (p *Provider) Typing(ctx context.Context, _, replyTo string) error {
	if replyTo == "" {
		return fmt.Errorf("%w: meta-whatsapp shows typing only in answer to a message", channel.ErrUnsupportedContent)
	}
	body, _ := json.Marshal(map[string]any{"messaging_product": "whatsapp", "status": "read", "message_id": replyTo,
		"typing_indicator": map[string]any{"type": "text"}})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.APIURL+"/"+url.PathEscape(p.cfg.PhoneNumberID)+"/messages", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	var out struct {
		Success bool `json:"success"`
	}
	return p.do(hr, &out)
}

// mediaObject is an outbound media's reference: {"id"} for a media id,
// {"link"} for a public URL.
func mediaObject(m *channel.Media) (map[string]any, error) {
	switch {
	case m.Ref != "":
		return map[string]any{"id": m.Ref}, nil
	case m.URL != "":
		return map[string]any{"link": m.URL}, nil
	}
	return nil, fmt.Errorf("%w: media without ref or url", channel.ErrUnsupportedContent)
}

// validMediaID reports whether id looks like a Graph media id.
func validMediaID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// SerializeMediaRef implements channel.MediaRefCodec: the media id (Meta
// keeps inbound media about 30 days); the token is not stored.
func (p *Provider) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	if !validMediaID(m.Ref) {
		return channel.StoredRef{}, false
	}
	data, _ := json.Marshal(map[string]string{"media_id": m.Ref})
	return channel.StoredRef{V: 1, Data: data}, true
}

// RehydrateMediaRef implements channel.MediaRefCodec.
func (p *Provider) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	if s.V != 1 {
		return channel.Media{}, fmt.Errorf("meta-whatsapp media ref version %d is unknown", s.V)
	}
	var d struct {
		MediaID string `json:"media_id"`
	}
	if err := json.Unmarshal(s.Data, &d); err != nil || !validMediaID(d.MediaID) {
		return channel.Media{}, errors.New("meta-whatsapp media ref is invalid")
	}
	return channel.Media{Ref: d.MediaID}, nil
}

// downloadAllowed reports whether the Bearer token may be sent to u: https on
// a Meta host, or the configured API's own origin.
func (p *Provider) downloadAllowed(u *url.URL) bool {
	return httpkit.CredentialsAllowed(u, p.API, "fbsbx.com", "facebook.com", "whatsapp.net", "fbcdn.net")
}

// LoadMedia implements channel.MediaLoader: GET /{media-id} gives a URL that
// lives five minutes; its GET needs the same Bearer token.
func (p *Provider) LoadMedia(ctx context.Context, m channel.Media, max int64) ([]byte, error) {
	if !validMediaID(m.Ref) {
		return nil, fmt.Errorf("%w: meta-whatsapp media id %q is invalid", channel.ErrMediaUnavailable, m.Ref)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.APIURL+"/"+m.Ref, nil)
	if err != nil {
		return nil, fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
	}
	var info struct {
		URL string `json:"url"`
	}
	if err := p.do(req, &info); err != nil {
		return nil, err // a permanent error means the media is gone
	}
	u, err := url.Parse(info.URL)
	if err != nil || !p.downloadAllowed(u) {
		return nil, fmt.Errorf("%w: meta-whatsapp %s: media URL %q is not on a Meta host", channel.ErrMediaUnavailable, p.cfg.ID, info.URL)
	}
	dl, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("meta-whatsapp %s: %w", p.cfg.ID, err)
	}
	dl.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	return httpkit.Download(p.Client, dl, max, func(err error) string { return err.Error() })
}
