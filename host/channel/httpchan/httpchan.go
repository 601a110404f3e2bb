// Package httpchan is the generic HTTP channel (type "http"): it connects a bot
// to any gateway that speaks two small JSON calls, both signed with a shared
// secret. Each request carries its signing time in X-Botrun-Timestamp (Unix
// seconds) and X-Botrun-Signature: "sha256=<hex HMAC-SHA256 of
// "<timestamp>.<raw body>">". A request signed more than the signature window
// (default 5 minutes) away from the receiver's clock is refused, so a
// captured request cannot be replayed once its record has been purged.
//
// Inbound, the gateway POSTs {"id","chat","from","text"} to
// /webhooks/{provider id}; botrun answers 202 {"id":…} once the message is
// journaled, 200 with "duplicate":true for a repeated id, 401 for a missing,
// bad or stale signature (nothing is journaled), 400 or 413 for a bad body.
//
// Outbound, botrun POSTs {"chat","text"} (and "media" when present) to the
// configured url, signed the same way, and expects 2xx {"id":"<message id>"}.
// 429 with Retry-After is a rate limit; 400, 404, 413 and 422 are permanent;
// other failures are retried. Redirects are not followed.
//
// With dedupes = true (the gateway deduplicates), every send carries its
// outbox key in an Idempotency-Key header, the same on every attempt, and
// the ambiguous window is closed: botrun then resends a send a crash left in
// flight, and the gateway must answer a repeated key with the first answer
// (the same {"id"}) without sending again, keeping keys at least as long as
// durability.retention. Without dedupes, sends carry no Idempotency-Key.
package httpchan

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/unit"
)

// IdempotencyKeyHeader carries a send's outbox key, the same on every
// attempt, when the entry says dedupes = true.
const IdempotencyKeyHeader = "Idempotency-Key"

// IdempotentSends implements channel.Idempotent: true when the entry says
// the gateway deduplicates (dedupes = true).
func (p *Provider) IdempotentSends() bool { return p.cfg.Dedupes }

// SignatureHeader carries the HMAC of the timestamp and the body.
const SignatureHeader = "X-Botrun-Signature"

// TimestampHeader carries the signing time, in decimal Unix seconds.
const TimestampHeader = "X-Botrun-Timestamp"

// DefaultWindow is how far a signed timestamp may be from the receiver's
// clock, either way, when the config does not say.
const DefaultWindow = 5 * time.Minute

// MaxBody is the largest inbound body.
const MaxBody = 64 << 10

// Errors of VerifyRequest.
var (
	// ErrBadSignature: the signature is missing or does not match.
	ErrBadSignature = errors.New("missing or bad " + SignatureHeader)
	// ErrStale: the timestamp is missing, unreadable or outside the window.
	ErrStale = errors.New("missing, bad or stale " + TimestampHeader)
)

// Sign returns the signature header value of body signed at ts (the
// TimestampHeader value): "sha256=" and the hex HMAC-SHA256 of ts + "." + body.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SignRequest sets the timestamp and signature headers of a request whose
// body is body, signed at now.
func SignRequest(h http.Header, secret, body []byte, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(TimestampHeader, ts)
	h.Set(SignatureHeader, Sign(secret, ts, body))
}

// ParseTimestamp reads a TimestampHeader value: 1 to 12 decimal digits of Unix
// seconds.
func ParseTimestamp(s string) (time.Time, error) {
	if len(s) == 0 || len(s) > 12 {
		return time.Time{}, ErrStale
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return time.Time{}, ErrStale
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, ErrStale
	}
	return time.Unix(n, 0), nil
}

// VerifyRequest checks, in constant time, that h signs body with secret and
// that its timestamp is within window of now. Gateways verify botrun's sends
// with it too.
func VerifyRequest(h http.Header, secret, body []byte, now time.Time, window time.Duration) error {
	ts := h.Get(TimestampHeader)
	at, err := ParseTimestamp(ts)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(h.Get(SignatureHeader)), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	if d := now.Sub(at); d > window || d < -window {
		return fmt.Errorf("%w: signed %s from now, outside the %s window", ErrStale, d.Round(time.Second), window)
	}
	return nil
}

func init() {
	channel.Register(channel.Type{Name: "http", Config: func() channel.Config {
		return &Config{Window: unit.Duration(DefaultWindow)}
	}})
}

// Config is a [[channels]] entry of type "http": any gateway that speaks
// botrun's signed JSON webhooks.
type Config struct {
	// ID is the entry's id (the webhook path is /webhooks/<id>).
	ID string `toml:"id"`
	// URL receives the bot's sends.
	URL string `toml:"url"`
	// Secret signs both directions (HMAC-SHA256); use ${ENV}.
	Secret string `toml:"secret"`
	// Window is how far a signed timestamp may be from now (default 5m); it
	// must be under half of durability.retention.
	Window unit.Duration `toml:"signature_window"`
	// Dedupes declares that the gateway deduplicates sends on their
	// Idempotency-Key header (see the package doc): botrun then resends a
	// send a crash left ambiguous, whatever durability.outbox.on_ambiguous
	// says.
	Dedupes bool `toml:"dedupes"`
}

// Check implements channel.Config.
func (c *Config) Check(in channel.Setting, problem channel.Problem) {
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problem("url", "%q must be an http(s) URL", c.URL)
	}
	if len(c.Secret) < 16 {
		problem("secret", "missing or shorter than 16 characters (use ${ENV} to keep it out of the file)")
	}
	if w := c.Window.D(); w < time.Second {
		problem("signature_window", "%s is below the 1s minimum", w)
	}
}

// ReplayWindow implements channel.Replayable: a timestamp up to the window
// ahead is accepted, so a captured request stays valid for twice the window
// (which must therefore be under half of durability.retention).
func (c *Config) ReplayWindow() time.Duration { return 2 * c.Window.D() }

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is one HTTP channel.
type Provider struct {
	cfg    Config
	secret []byte
	admit  channel.Admitter
	client *http.Client
	now    func() time.Time
}

// Open returns the channel posting to cfg.URL.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.ID == "" {
		cfg.ID = env.ID
	}
	if cfg.Window <= 0 {
		cfg.Window = unit.Duration(DefaultWindow)
	}
	gw, err := url.Parse(cfg.URL)
	if err != nil || (gw.Scheme != "http" && gw.Scheme != "https") || gw.Host == "" {
		return nil, fmt.Errorf("http channel %s: url %q is not an absolute http(s) URL", cfg.ID, cfg.URL)
	}
	return &Provider{cfg: cfg, secret: []byte(cfg.Secret), admit: env.Admitter, client: httpkit.NewClient(30*time.Second, gw, nil), now: env.Clock()}, nil
}

// ID implements channel.Provider.
func (p *Provider) ID() string { return p.cfg.ID }

// Inbound is the body of an inbound webhook.
type Inbound struct {
	ID   string `json:"id"`
	Chat string `json:"chat"`
	From string `json:"from"`
	Text string `json:"text"`
}

// ErrBadRequest is wrapped by every DecodeInbound error.
var ErrBadRequest = errors.New("bad request")

// DecodeInbound parses and validates an inbound body from untrusted bytes.
func DecodeInbound(b []byte) (Inbound, error) {
	var in Inbound
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return Inbound{}, fmt.Errorf("%w: trailing data", ErrBadRequest)
	}
	if in.ID == "" || in.Chat == "" {
		return Inbound{}, fmt.Errorf("%w: \"id\" and \"chat\" are required", ErrBadRequest)
	}
	if len(in.ID) > 256 || len(in.Chat) > 256 || len(in.From) > 256 {
		return Inbound{}, fmt.Errorf("%w: \"id\", \"chat\" and \"from\" are limited to 256 bytes", ErrBadRequest)
	}
	return in, nil
}

// Routes implements channel.Router.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.cfg.ID, p.inbound)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (p *Provider) inbound(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		reply(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body over %d bytes", MaxBody)})
		return
	}
	if err := VerifyRequest(r.Header, p.secret, body, p.now(), p.cfg.Window.D()); err != nil {
		reply(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
		return
	}
	in, err := DecodeInbound(body)
	if err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	adm, err := p.admit.Admit(r.Context(), p.cfg.ID, channel.Message{ID: in.ID, Chat: in.Chat, From: in.From, Text: in.Text})
	if errors.Is(err, channel.ErrInvalidMessage) {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err != nil {
		httpkit.NotAdmitted(w.Header(), err)
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": "not admitted, redeliver: " + err.Error()})
		return
	}
	if adm.Duplicate {
		reply(w, http.StatusOK, map[string]any{"id": adm.ID, "duplicate": true})
		return
	}
	reply(w, http.StatusAccepted, map[string]any{"id": adm.ID})
}

// Outbound is the body botrun posts to the gateway.
type Outbound struct {
	Chat  string         `json:"chat"`
	Text  string         `json:"text,omitempty"`
	Media *channel.Media `json:"media,omitempty"`
	// Buttons and List are the send's choices, as the guest gave them
	// (abi/SPEC.md): the gateway shows them, never botrun silently drops them.
	Buttons []abi.Button `json:"buttons,omitempty"`
	List    *abi.List    `json:"list,omitempty"`
}

// Send implements channel.Provider.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	body, err := json.Marshal(Outbound{Chat: msg.Chat, Text: msg.Text, Media: msg.Media, Buttons: msg.Buttons, List: msg.List})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.cfg.Dedupes && msg.Key != "" {
		req.Header.Set(IdempotencyKeyHeader, msg.Key)
	}
	SignRequest(req.Header, p.secret, body, p.now())
	resp, err := p.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("http channel %s: %w", p.cfg.ID, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(rb, &out); err != nil || out.ID == "" {
			return "", fmt.Errorf("http channel %s: %d without {\"id\"}: %.200s", p.cfg.ID, resp.StatusCode, rb)
		}
		return out.ID, nil
	}
	cause := fmt.Errorf("http channel %s: %d: %s", p.cfg.ID, resp.StatusCode, strings.TrimSpace(string(rb)))
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return "", &channel.RateLimitedError{RetryAfter: time.Duration(secs) * time.Second, Err: cause}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "", fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	case http.StatusNotFound:
		return "", fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case http.StatusRequestEntityTooLarge:
		return "", fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	}
	return "", cause
}
