// Package gohighlevel is the GoHighLevel channel (type "gohighlevel"): one
// location's conversations of one message type (SMS, WhatsApp, …) through
// GoHighLevel's Conversations API v2.
//
// Inbound, a Marketplace app's InboundMessage webhook is verified before it
// is parsed: X-GHL-Signature, when present, is the base64 Ed25519 signature
// of the raw body with GoHighLevel's published Ed25519 key; else
// x-wh-signature is the base64 RSA-SHA256 (PKCS #1 v1.5) signature with its
// webhook key (public_key, default GoHighLevel's published one). A webhook
// whose timestamp is more than 5 minutes from now is refused (401), and so is
// a webhookId seen before with another body (403): the ids are kept in the
// backend's Kv (memory without one) for 15 minutes, three times the window,
// since an older webhook is refused by its timestamp anyway. A redelivery of
// the same body is acknowledged again and deduplicated by the inbox on its
// messageId. Other event types, outbound messages, other locations' events
// and other message types than message_type are acknowledged and ignored.
//
// GoHighLevel retries a webhook only when it is answered 429 (the same
// payload, six times at 10-minute intervals): a message the host does not
// take (a full queue, a journal down) is answered 429, and its id is kept
// for 2 hours marked so, to let those retries in past the window.
//
// Outbound, a send is POST {api_url}/conversations/messages with the token as
// a Bearer header and Version: 2021-04-15: {"type","contactId","message",
// "attachments"}. The chat is the contact's id. GoHighLevel allows 100
// requests per 10 seconds per location: botrun makes at most 100 sends in any
// 10 seconds per location_id, and a send over that returns a
// channel.RateLimitedError with the wait, without making a request; a 429
// waits its Retry-After (10 s without one). GoHighLevel has no buttons, no
// edits and no typing.
//
// Inbound attachments are URLs: journaled (package urlmedia) only when https
// on GoHighLevel's storage (MediaHosts, MediaPrefixes; media_ref_hosts
// replaces the hosts) and downloaded without the token.
package gohighlevel

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// DefaultAPI is GoHighLevel's API; api_url replaces it (tests).
const DefaultAPI = "https://services.leadconnectorhq.com"

// APIVersion is the Version header of the Conversations API calls.
const APIVersion = "2021-04-15"

// SignatureHeader carries the webhook's RSA-SHA256 signature, in base64.
const SignatureHeader = "x-wh-signature"

// MaxBody is the largest webhook body accepted.
const MaxBody = 256 << 10

// Window is how far a webhook's timestamp may be from now, either way.
const Window = 5 * time.Minute

// MediaHosts are the hosts (and their subdomains) whose attachment URLs are
// journaled and downloaded, unless media_ref_hosts replaces them:
// GoHighLevel's API and app domains and its media CDN.
var MediaHosts = []string{"leadconnectorhq.com", "msgsndr.com", "filesafe.space"}

// MediaPrefixes are GoHighLevel's buckets on shared storage hosts, allowed
// whatever media_ref_hosts says.
var MediaPrefixes = []string{"https://storage.googleapis.com/msgsndr/", "https://firebasestorage.googleapis.com/v0/b/highlevel-backend.appspot.com/"}

// TextLimits are the longest texts botrun sends by message type, the
// downstream channel's (GoHighLevel passes the text on).
var TextLimits = map[string]int{"SMS": 1600, "WhatsApp": 4096, "FB": 2000, "IG": 1000, "Live_Chat": 4096}

func init() {
	channel.Register(channel.Type{Name: "gohighlevel", Config: func() channel.Config {
		return &Config{APIURL: DefaultAPI, MessageType: "SMS"}
	}})
}

// Config is a [[channels]] entry of type "gohighlevel".
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// APIURL is the API base URL (default https://services.leadconnectorhq.com).
	APIURL string `toml:"api_url"`
	// Token is a Private Integration token, or a location access token, with
	// the conversations/message.write scope (use ${ENV}).
	Token string `toml:"token"`
	// LocationID is the sub-account (location) whose conversations this is.
	LocationID string `toml:"location_id"`
	// PublicKey replaces one of GoHighLevel's published webhook keys
	// (DefaultPublicKey, DefaultEd25519Key), PEM: an RSA key verifies
	// x-wh-signature, an Ed25519 key X-GHL-Signature. Set it if GoHighLevel
	// rotates one.
	PublicKey string `toml:"public_key"`
	// MessageType is the conversations' type: SMS (default), WhatsApp, FB,
	// IG or Live_Chat; inbound messages of other types are ignored.
	MessageType string `toml:"message_type"`
	// MediaRefHosts replaces MediaHosts.
	MediaRefHosts []string `toml:"media_ref_hosts"`
}

var locationID = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	httpkit.Required(problem, "token", c.Token, "a Private Integration token (Settings > Private Integrations) with the conversations/message.write scope (use ${ENV} to keep it out of the file)")
	if !locationID.MatchString(c.LocationID) {
		problem("location_id", "%q: want the sub-account's location id (Settings > Business Profile, or the app URL's /location/<id>/)", c.LocationID)
	}
	if c.PublicKey != "" {
		if _, err := ParsePublicKey(c.PublicKey); err != nil {
			problem("public_key", "%v (leave it out for GoHighLevel's published key)", err)
		}
	}
	if _, ok := TextLimits[c.MessageType]; !ok {
		problem("message_type", "%q: want SMS, WhatsApp, FB, IG or Live_Chat (Email and Custom need fields botrun does not send)", c.MessageType)
	}
	httpkit.CheckAPIURL(c.APIURL, problem)
	urlmedia.CheckHosts(problem, "media_ref_hosts", c.MediaRefHosts)
}

// ReplayWindow implements channel.Replayable: a webhook's timestamp may be
// Window either way, and one botrun answered 429 is accepted again, its old
// timestamp past the window, for RetryKeep (GoHighLevel's retries): a
// captured webhook passes for at most RetryKeep.
func (c *Config) ReplayWindow() time.Duration { return max(2*Window, RetryKeep) }

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// ParsePublicKey parses public_key: a PEM RSA public key (PKIX "PUBLIC
// KEY" or PKCS #1 "RSA PUBLIC KEY") of at least 2048 bits, which verifies
// x-wh-signature, or a PEM Ed25519 key, which verifies X-GHL-Signature. A
// key pasted on one line with "\n" escapes is read too.
func ParsePublicKey(s string) (crypto.PublicKey, error) {
	if !strings.Contains(s, "\n") {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	block, _ := pem.Decode([]byte(strings.TrimSpace(s)))
	if block == nil {
		return nil, errors.New("not a PEM key (-----BEGIN PUBLIC KEY----- …)")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block, want PUBLIC KEY", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("the PEM key: %v", err)
	}
	if ed, ok := key.(ed25519.PublicKey); ok {
		return ed, nil
	}
	pub, ok := key.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an RSA or an Ed25519 key", key)
	}
	if pub.N.BitLen() < 2048 {
		return nil, fmt.Errorf("an RSA key of %d bits, want at least 2048", pub.N.BitLen())
	}
	return pub, nil
}

// Provider is one location's conversations of one type. Its embedded Media
// journals and loads the inbound attachments.
type Provider struct {
	httpkit.Base
	*urlmedia.Media
	cfg Config
	key *rsa.PublicKey
	// ed verifies X-GHL-Signature (GoHighLevel's published Ed25519 key).
	ed     ed25519.PublicKey
	seen   *seen
	window *window
	now    func() time.Time
	// horizon is what the purge of expired webhookIds judges by.
	horizon func() time.Time
}

// Open returns the channel cfg describes.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.MessageType == "" {
		cfg.MessageType = "SMS"
	}
	p := &Provider{now: env.Clock(), horizon: env.PurgeClock()}
	if err := p.Open("gohighlevel", cfg.ID, env, cfg.APIURL, DefaultAPI); err != nil {
		return nil, err
	}
	cfg.ID = p.ID()
	// GoHighLevel's published keys, one of them replaced by public_key.
	k, _ := ParsePublicKey(DefaultPublicKey)
	key := k.(*rsa.PublicKey)
	ed, _ := parseEd25519(DefaultEd25519Key)
	if cfg.PublicKey != "" {
		switch k, err := ParsePublicKey(cfg.PublicKey); k := k.(type) {
		case *rsa.PublicKey:
			key = k
		case ed25519.PublicKey:
			ed = k
		default:
			return nil, fmt.Errorf("gohighlevel %s: public_key: %w", cfg.ID, err)
		}
	}
	hosts := cfg.MediaRefHosts
	if hosts == nil {
		hosts = MediaHosts
	}
	p.Media, p.cfg, p.key, p.ed = urlmedia.New("gohighlevel "+cfg.ID, p.API, hosts, MediaPrefixes), cfg, key, ed
	p.seen = &seen{kv: env.Kv, group: env.KeyPrefix + "gohighlevel/" + cfg.ID + "/webhook/", mem: map[string]seenID{}}
	p.window = windowOf(cfg.LocationID)
	p.Dial(30*time.Second, nil)
	return p, nil
}

// TextLimits implements channel.Limiter: the message type's.
func (p *Provider) TextLimits(channel.Outbound) (chars, bytes int) {
	return TextLimits[p.cfg.MessageType], 0
}

// Verify checks sig (x-wh-signature) against body with key: base64 of the
// RSA PKCS #1 v1.5 signature of its SHA-256.
func Verify(key *rsa.PublicKey, body []byte, sig string) bool {
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || key == nil {
		return false
	}
	sum := sha256.Sum256(body)
	return rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], raw) == nil
}

// Webhook is the part of a webhook body botrun reads: an InboundMessage
// event's fields, and every event's timestamp and webhookId.
type Webhook struct {
	Type           string   `json:"type"`
	LocationID     string   `json:"locationId"`
	Attachments    []string `json:"attachments"`
	Body           string   `json:"body"`
	ContactID      string   `json:"contactId"`
	ConversationID string   `json:"conversationId"`
	DateAdded      string   `json:"dateAdded"`
	Direction      string   `json:"direction"`
	MessageType    string   `json:"messageType"`
	MessageID      string   `json:"messageId"`
	Timestamp      Time     `json:"timestamp"`
	WebhookID      string   `json:"webhookId"`
}

// Time is a webhook's timestamp: an RFC 3339 string, or a number (or a
// string of one) of milliseconds or seconds since the epoch. Anything else is
// the zero time, which no window accepts.
type Time struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
		t.Time = at
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n <= 0:
		t.Time = time.Time{}
	case n < 1e11:
		t.Time = time.Unix(n, 0)
	default:
		t.Time = time.UnixMilli(n)
	}
	return nil
}

// ErrBadWebhook is wrapped by every DecodeWebhook error.
var ErrBadWebhook = errors.New("bad webhook")

var webhookID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// DecodeWebhook parses a webhook body from untrusted bytes. Every event needs
// a webhookId; an InboundMessage needs its messageId and contactId.
func DecodeWebhook(b []byte) (Webhook, error) {
	var w Webhook
	if err := json.Unmarshal(b, &w); err != nil {
		return Webhook{}, fmt.Errorf("%w: %v", ErrBadWebhook, err)
	}
	if !webhookID.MatchString(w.WebhookID) {
		return Webhook{}, fmt.Errorf("%w: no webhookId, or not 1-128 of A-Z a-z 0-9 . _ : -", ErrBadWebhook)
	}
	if w.Type == "InboundMessage" && (w.MessageID == "" || w.ContactID == "") {
		return Webhook{}, fmt.Errorf("%w: an InboundMessage without messageId or contactId", ErrBadWebhook)
	}
	return w, nil
}

// sameType reports whether a webhook's messageType ("SMS", "TYPE_SMS",
// "TYPE_FACEBOOK", …) is the configured type.
func sameType(got, want string) bool {
	got = strings.ToUpper(strings.TrimPrefix(strings.ToUpper(got), "TYPE_"))
	switch got {
	case "FACEBOOK":
		got = "FB"
	case "INSTAGRAM":
		got = "IG"
	}
	return got == strings.ToUpper(want)
}

// mediaTypes guesses an attachment's type from its file name's extension.
var mediaTypes = map[string]string{
	".jpg": "image", ".jpeg": "image", ".png": "image", ".gif": "image", ".webp": "image",
	".mp4": "video", ".mov": "video", ".3gp": "video", ".webm": "video",
	".mp3": "audio", ".ogg": "audio", ".oga": "audio", ".opus": "audio", ".amr": "audio", ".m4a": "audio", ".wav": "audio", ".aac": "audio",
}

// Inbound turns an InboundMessage into what botrun admits; ok is false for an
// empty one.
func (w Webhook) Inbound() (channel.Message, bool) {
	out := channel.Message{ID: w.MessageID, Chat: w.ContactID, From: w.ContactID, Text: w.Body}
	if at, err := time.Parse(time.RFC3339Nano, w.DateAdded); err == nil {
		out.ReceivedAt = at
	}
	for _, a := range w.Attachments {
		if a == "" {
			continue
		}
		kind, ext := "document", ""
		if u, err := url.Parse(a); err == nil {
			ext = strings.ToLower(path.Ext(u.Path))
		}
		if k, ok := mediaTypes[ext]; ok {
			kind = k
		}
		out.Media = append(out.Media, channel.Media{Type: kind, Ref: a})
	}
	return out, out.ID != "" && out.Chat != "" && (out.Text != "" || len(out.Media) > 0)
}

// Routes implements channel.Router: the webhook.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.webhook)
}

func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	// GoHighLevel signs with both: X-GHL-Signature (Ed25519, its newer
	// one) and x-wh-signature (RSA). Either one that verifies admits the
	// webhook, so a rotation of one key does not stop the traffic.
	switch ed, rsaSig := r.Header.Get(Ed25519Header), r.Header.Get(SignatureHeader); {
	case ed == "" && rsaSig == "":
		http.Error(w, "missing "+SignatureHeader+" (and "+Ed25519Header+")", http.StatusUnauthorized)
		return
	case !(ed != "" && VerifyEd25519(p.ed, body, ed)) && !(rsaSig != "" && Verify(p.key, body, rsaSig)):
		http.Error(w, "bad "+SignatureHeader+"/"+Ed25519Header+" (is public_key GoHighLevel's webhook key?)", http.StatusForbidden)
		return
	}
	wh, err := DecodeWebhook(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if wh.Type != "InboundMessage" || (wh.Direction != "" && wh.Direction != "inbound") {
		w.WriteHeader(http.StatusOK)
		return
	}
	if wh.LocationID != p.cfg.LocationID {
		p.Log.Warn("gohighlevel: a message of another location ignored", "provider", p.cfg.ID, "location", wh.LocationID)
		w.WriteHeader(http.StatusOK)
		return
	}
	now := p.now()
	d := now.Sub(wh.Timestamp.Time)
	sum := sha256.Sum256(body)
	v, err := p.seen.check(r.Context(), wh.WebhookID, sum[:], !wh.Timestamp.IsZero() && d <= Window && d >= -Window, now)
	switch {
	case err != nil:
		p.retryLater(w, r, wh.WebhookID, sum[:], now, fmt.Errorf("remembering the webhookId: %w", err))
		return
	case v == stale:
		http.Error(w, fmt.Sprintf("missing or stale timestamp: more than %s from now (a replay?)", Window), http.StatusUnauthorized)
		return
	case v == replayed:
		http.Error(w, "webhookId already seen with another body (a replay?)", http.StatusForbidden)
		return
	}
	if !sameType(wh.MessageType, p.cfg.MessageType) {
		w.WriteHeader(http.StatusOK)
		return
	}
	if msg, ok := wh.Inbound(); ok {
		if _, err := p.Admitter.Admit(r.Context(), p.cfg.ID, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
			p.retryLater(w, r, wh.WebhookID, sum[:], now, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// retryLater answers a webhook botrun could not take 429, the one status
// GoHighLevel retries (the same payload, 10 minutes later, six times at
// most), and remembers to accept those retries past the window.
func (p *Provider) retryLater(w http.ResponseWriter, r *http.Request, id string, hash []byte, now time.Time, cause error) {
	if err := p.seen.retry(r.Context(), id, hash, now); err != nil {
		p.Log.Error("gohighlevel: a webhook not admitted, and its retries cannot be let in: they will be refused as stale",
			"provider", p.cfg.ID, "webhookId", id, "err", err)
	}
	httpkit.NotAdmitted(w.Header(), cause)
	http.Error(w, "not admitted, retry: "+cause.Error(), http.StatusTooManyRequests)
}
