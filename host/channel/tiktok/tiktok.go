// Package tiktok is the TikTok Business Messaging channel (type "tiktok"):
// the direct messages of one TikTok Business Account.
//
// Webhooks are POSTed to /webhooks/<id> and signed: the Tiktok-Signature
// header is "t=<unix seconds>,s=<hex HMAC-SHA256 of "<t>.<raw body>" keyed
// with client_secret>". The signature is checked in constant time before the
// body is parsed, and a timestamp more than five minutes from the clock is
// refused (a replayed request): a missing signature is 401, a wrong or stale
// one 403. The body is {"event","user_openid","content"} where content is a
// JSON string holding the message; it is parsed strictly (one JSON object,
// nothing after it, the ids present and strings). Only im_receive_msg events
// are read; of those, text, image and sticker messages are admitted under
// their message_id in the chat of their conversation_id; every other event
// and type (share_post, reads, the business's own sends) is acknowledged and
// ignored.
//
// Sends are POST {api_url}/business/message/send/ with the access token in
// the Access-Token header; TikTok answers HTTP 200 even to a refusal, with
// a code other than 0 (see mapCode). Texts hold 6,000 characters. Buttons,
// lists, edits and typing do not exist on TikTok's API: a send with choices
// is refused as unsupported content before any request.
//
// An inbound image is referenced by its coordinates (conversation_id,
// message_id, media_id and type), which are journaled as they are (no
// credential); its bytes come from POST {api_url}/business/message/media/download/,
// whose data.download_url is fetched without the token, only when it is
// https on a TikTok CDN host (MediaHosts; media_ref_hosts replaces the list)
// or on api_url's origin. A sticker is referenced by its URL, on the same
// hosts.
package tiktok

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// DefaultAPI is TikTok's Business API; api_url replaces it (tests).
const DefaultAPI = "https://business-api.tiktok.com/open_api/v1.3"

// Paths below api_url.
const (
	SendPath     = "/business/message/send/"
	DownloadPath = "/business/message/media/download/"
)

// SignatureHeader carries a webhook's signature.
const SignatureHeader = "Tiktok-Signature"

// MaxSkew is how far a webhook's signed timestamp may be from the clock.
const MaxSkew = 5 * time.Minute

// MaxBody is the largest webhook body accepted.
const MaxBody = 256 << 10

// TextLimit is the longest text message, in characters.
const TextLimit = 6000

// MediaHosts are the hosts (and their subdomains) whose media URLs (a
// sticker's URL, a download_url) are journaled and fetched, unless
// media_ref_hosts replaces them: TikTok's and ByteDance's CDNs.
var MediaHosts = []string{"tiktokcdn.com", "tiktokcdn-us.com", "tiktokcdn-eu.com", "tiktokv.com", "byteoversea.com", "ibyteimg.com"}

func init() {
	channel.Register(channel.Type{Name: "tiktok", Config: func() channel.Config {
		return &Config{APIURL: DefaultAPI}
	}})
}

// Config is a [[channels]] entry of type "tiktok".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is TikTok's Business API base URL
	// (default https://business-api.tiktok.com/open_api/v1.3).
	APIURL string `toml:"api_url"`
	// AccessToken authenticates sends and downloads (the Access-Token
	// header; use ${ENV}).
	AccessToken string `toml:"access_token"`
	// ClientSecret is the developer app's secret: the key of the webhooks'
	// signatures (use ${ENV}).
	ClientSecret string `toml:"client_secret"`
	// BusinessID is the Business Account's id, the business_id of sends.
	BusinessID string `toml:"business_id"`
	// MediaRefHosts replaces MediaHosts.
	MediaRefHosts []string `toml:"media_ref_hosts"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "access_token", c.AccessToken, "the Business Account's access token from the TikTok for Business developer portal (use ${ENV} to keep it out of the file)")
	httpkit.Required(problem, "client_secret", c.ClientSecret, "the developer app's secret, which signs the webhooks (use ${ENV})")
	httpkit.Required(problem, "business_id", c.BusinessID, "the Business Account's id (the business_id the authorization returned)")
	httpkit.CheckAPIURL(c.APIURL, problem)
	urlmedia.CheckHosts(problem, "media_ref_hosts", c.MediaRefHosts)
}

// ReplayWindow implements channel.Replayable: a webhook's timestamp may be
// MaxSkew either way, so a captured one passes for twice MaxSkew.
func (c *Config) ReplayWindow() time.Duration { return 2 * MaxSkew }

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one Business Account.
type Provider struct {
	httpkit.Base
	cfg  Config
	urls *urlmedia.Media
	now  func() time.Time
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	p := &Provider{now: env.Clock()}
	if err := p.Open("tiktok", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID = p.ID()
	hosts := cfg.MediaRefHosts
	if hosts == nil {
		hosts = MediaHosts
	}
	p.cfg, p.urls = cfg, urlmedia.New("tiktok "+cfg.ID, p.API, hosts, nil)
	// The token rides in a header Go keeps on a redirect: API calls
	// follow none.
	p.Dial(30*time.Second, nil)
	return p, nil
}

// TextLimits implements channel.Limiter.
func (p *Provider) TextLimits(channel.Outbound) (chars, bytes int) { return TextLimit, 0 }

// Routes implements channel.Router: the webhook URL.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
}

// ErrBadSignature is wrapped by every Verify error.
var ErrBadSignature = errors.New("bad Tiktok-Signature")

// ParseSignature splits a Tiktok-Signature header "t=<unix>,s=<hex>" (in
// either order, each once) into its timestamp and its signature bytes.
func ParseSignature(h string) (t int64, ts string, sig []byte, err error) {
	var gotT, gotS bool
	for _, part := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return 0, "", nil, fmt.Errorf("%w: %q is not key=value", ErrBadSignature, part)
		case k == "t" && !gotT:
			gotT, ts = true, v
			if t, err = strconv.ParseInt(v, 10, 64); err != nil || t <= 0 {
				return 0, "", nil, fmt.Errorf("%w: the timestamp is not unix seconds", ErrBadSignature)
			}
		case k == "s" && !gotS:
			gotS = true
			if sig, err = hex.DecodeString(v); err != nil || len(sig) != sha256.Size {
				return 0, "", nil, fmt.Errorf("%w: the signature is not a hex HMAC-SHA256", ErrBadSignature)
			}
		default:
			return 0, "", nil, fmt.Errorf("%w: unexpected or repeated %q", ErrBadSignature, k)
		}
	}
	if !gotT || !gotS {
		return 0, "", nil, fmt.Errorf("%w: want t=<unix>,s=<hex>", ErrBadSignature)
	}
	return t, ts, sig, nil
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, ts)
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a Tiktok-Signature header over body with secret at now: the
// HMAC (constant time), then the timestamp within MaxSkew.
func Verify(header, secret string, body []byte, now time.Time) error {
	t, ts, sig, err := ParseSignature(header)
	if err != nil {
		return err
	}
	if secret == "" || !hmac.Equal(sig, mac(secret, ts, body)) {
		return fmt.Errorf("%w: the signature does not match (is client_secret the app's?)", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(t, 0)); d > MaxSkew || d < -MaxSkew {
		return fmt.Errorf("%w: the timestamp is %s from the clock, more than %s", ErrBadSignature, d.Round(time.Second), MaxSkew)
	}
	return nil
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	header := r.Header.Get(SignatureHeader)
	if header == "" {
		http.Error(w, "missing the "+SignatureHeader+" header", http.StatusUnauthorized)
		return
	}
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	if err := Verify(header, p.cfg.ClientSecret, body, p.now()); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	ev, c, err := DecodeWebhook(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msgs []channel.Message
	if c != nil && c.From.ID != p.cfg.BusinessID {
		if m, ok := c.Inbound(); ok {
			msgs = append(msgs, m)
		}
	}
	if c == nil && ev.Event == "" {
		p.Log.Warn("tiktok: a webhook without an event ignored", "provider", p.cfg.ID)
	}
	p.Answer(w, r, msgs...)
}

// ReceiveEvent is the event of a message a user sent the business.
const ReceiveEvent = "im_receive_msg"

// Event is a webhook body.
type Event struct {
	Event      string          `json:"event"`
	UserOpenID string          `json:"user_openid"`
	Content    json.RawMessage `json:"content"`
}

// Content is the message a webhook's content string holds.
type Content struct {
	ConversationID string `json:"conversation_id"`
	MessageID      string `json:"message_id"`
	// Timestamp is informational (milliseconds): a number or a string of
	// digits; anything else is ignored, never a reason to refuse a message.
	Timestamp json.RawMessage `json:"timestamp"`
	Type      string          `json:"type"`
	Text      *struct {
		Body string `json:"body"`
	} `json:"text"`
	Image *struct {
		MediaID string `json:"media_id"`
	} `json:"image"`
	Sticker *struct {
		URL string `json:"url"`
	} `json:"sticker"`
	From struct {
		ID string `json:"id"`
	} `json:"from_user"`
}

// ErrBadWebhook is wrapped by every DecodeWebhook error.
var ErrBadWebhook = errors.New("bad webhook")

// strictJSON decodes exactly one JSON value from b into v: nothing but
// white space may follow it.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// ID is a TikTok id: conversation, message, media or user.
var ID = regexp.MustCompile(`^[A-Za-z0-9_.:=+/-]{1,256}$`)

func validID(s string) bool { return ID.MatchString(s) && !strings.Contains(s, "..") }

// DecodeWebhook parses a webhook body from untrusted bytes. c is nil for an
// event that is not a received message, which is acknowledged and ignored.
// The content of an im_receive_msg must be a JSON string holding one JSON
// object with the conversation, message and sender ids.
func DecodeWebhook(b []byte) (ev Event, c *Content, err error) {
	if err := strictJSON(b, &ev); err != nil {
		return Event{}, nil, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	if ev.Event != ReceiveEvent {
		return ev, nil, nil
	}
	var inner string
	if err := json.Unmarshal(ev.Content, &inner); err != nil {
		return Event{}, nil, fmt.Errorf("%w: content is not a JSON string", ErrBadWebhook)
	}
	var m Content
	if !strings.HasPrefix(strings.TrimSpace(inner), "{") {
		return Event{}, nil, fmt.Errorf("%w: content does not hold a JSON object", ErrBadWebhook)
	}
	if err := strictJSON([]byte(inner), &m); err != nil {
		return Event{}, nil, fmt.Errorf("%w: content: %v", ErrBadWebhook, err)
	}
	if !validID(m.ConversationID) || !validID(m.MessageID) || !validID(m.From.ID) || m.Type == "" {
		return Event{}, nil, fmt.Errorf("%w: content lacks a valid conversation_id, message_id, from_user.id or type", ErrBadWebhook)
	}
	return ev, &m, nil
}

// Inbound turns a received message into what botrun admits; ok is false for
// the types botrun does not read (share_post, …) and for empty messages.
func (c Content) Inbound() (channel.Message, bool) {
	out := channel.Message{ID: c.MessageID, Chat: c.ConversationID, From: c.From.ID}
	if ms, err := strconv.ParseInt(strings.Trim(string(c.Timestamp), `"`), 10, 64); err == nil && ms > 0 {
		out.ReceivedAt = time.UnixMilli(ms)
	}
	switch c.Type {
	case "text":
		if c.Text == nil || c.Text.Body == "" {
			return channel.Message{}, false
		}
		out.Text = c.Text.Body
	case "image":
		if c.Image == nil || !validID(c.Image.MediaID) {
			return channel.Message{}, false
		}
		co := Coords{ConversationID: c.ConversationID, MessageID: c.MessageID, MediaID: c.Image.MediaID, Type: "image"}
		out.Media = []channel.Media{{Type: "image", Ref: co.Ref()}}
	case "sticker":
		if c.Sticker == nil || c.Sticker.URL == "" || len(c.Sticker.URL) > urlmedia.MaxURL {
			return channel.Message{}, false
		}
		out.Media = []channel.Media{{Type: "sticker", Ref: c.Sticker.URL}}
	default:
		return channel.Message{}, false
	}
	return out, true
}
