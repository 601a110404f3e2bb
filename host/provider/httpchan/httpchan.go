// Package httpchan is the generic HTTP channel (type "http"): it connects a bot
// to any gateway that speaks two small JSON calls, both signed with a shared
// secret (HMAC-SHA256 of the raw body, hex, in X-Botrun-Signature as
// "sha256=<hex>").
//
// Inbound, the gateway POSTs {"id","chat","from","text"} to
// /webhooks/{provider id}; botrun answers 202 {"id":…} once the message is
// journaled, 200 with "duplicate":true for a repeated id, 401 for a missing or
// bad signature (nothing is journaled), 400 or 413 for a bad body.
//
// Outbound, botrun POSTs {"chat","text"} (and "media" when present) to the
// configured url and expects 2xx {"id":"<message id>"}. 429 with Retry-After is
// a rate limit; 400, 404, 413 and 422 are permanent; other failures are
// retried.
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
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/host/provider"
)

// SignatureHeader carries the HMAC of a body.
const SignatureHeader = "X-Botrun-Signature"

// MaxBody is the largest inbound body.
const MaxBody = 64 << 10

// Sign returns the signature header value of body.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header value in constant time.
func Verify(secret, body []byte, header string) bool {
	want := Sign(secret, body)
	return hmac.Equal([]byte(header), []byte(want))
}

// Provider is one HTTP channel.
type Provider struct {
	id     string
	url    string
	secret []byte
	admit  provider.Admitter
	client *http.Client
}

// New returns the channel id posting to url and admitting through admit.
func New(id, url, secret string, admit provider.Admitter) *Provider {
	return &Provider{id: id, url: url, secret: []byte(secret), admit: admit, client: &http.Client{Timeout: 30 * time.Second}}
}

// ID implements provider.Provider.
func (p *Provider) ID() string { return p.id }

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

// Routes implements provider.Router.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/"+p.id, p.inbound)
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
	if !Verify(p.secret, body, r.Header.Get(SignatureHeader)) {
		reply(w, http.StatusUnauthorized, map[string]string{"error": "missing or bad " + SignatureHeader})
		return
	}
	in, err := DecodeInbound(body)
	if err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	adm, err := p.admit.Admit(r.Context(), p.id, provider.Message{ID: in.ID, Chat: in.Chat, From: in.From, Text: in.Text})
	if err != nil {
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
	Chat  string          `json:"chat"`
	Text  string          `json:"text,omitempty"`
	Media *provider.Media `json:"media,omitempty"`
}

// Send implements provider.Provider.
func (p *Provider) Send(ctx context.Context, msg provider.Outbound) (string, error) {
	body, err := json.Marshal(Outbound{Chat: msg.Chat, Text: msg.Text, Media: msg.Media})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(p.secret, body))
	resp, err := p.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("http channel %s: %w", p.id, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(rb, &out); err != nil || out.ID == "" {
			return "", fmt.Errorf("http channel %s: %d without {\"id\"}: %.200s", p.id, resp.StatusCode, rb)
		}
		return out.ID, nil
	}
	cause := fmt.Errorf("http channel %s: %d: %s", p.id, resp.StatusCode, strings.TrimSpace(string(rb)))
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return "", &provider.RateLimitedError{RetryAfter: time.Duration(secs) * time.Second, Err: cause}
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "", fmt.Errorf("%w: %w", provider.ErrUnsupportedContent, cause)
	case http.StatusNotFound:
		return "", fmt.Errorf("%w: %w", provider.ErrRecipientUnreachable, cause)
	case http.StatusRequestEntityTooLarge:
		return "", fmt.Errorf("%w: %w", provider.ErrPayloadTooLarge, cause)
	}
	return "", cause
}
