// Package graph is what Meta's three channels (WhatsApp Cloud, Messenger,
// Instagram) share of the Graph API: the hub.challenge subscription
// handshake, the X-Hub-Signature-256 HMAC of a webhook's raw body, and the
// Graph error body mapped onto the provider taxonomy. Each channel keeps its
// own wire format and its own table of error codes.
//
// graph is not under host/channel/internal because cmd/botrun's end-to-end
// tests sign webhooks with it. It imports the standard library, the SPI
// (host/channel) and the toolkit (host/channel/httpkit).
package graph

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// SignatureHeader carries the HMAC-SHA256 of a webhook's raw body.
const SignatureHeader = "X-Hub-Signature-256"

// Sign returns the X-Hub-Signature-256 value of body: "sha256=<hex>".
func Sign(appSecret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(appSecret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify answers Meta's subscription handshake (GET ?hub.mode=subscribe&
// hub.verify_token=…&hub.challenge=…): the challenge as plain text when the
// token matches verifyToken, else 403.
func Verify(w http.ResponseWriter, r *http.Request, verifyToken string) {
	q := r.URL.Query()
	if q.Get("hub.mode") != "subscribe" || verifyToken == "" ||
		subtle.ConstantTimeCompare([]byte(q.Get("hub.verify_token")), []byte(verifyToken)) != 1 {
		http.Error(w, "verification failed: hub.verify_token does not match verify_token", http.StatusForbidden)
		return
	}
	// The challenge is echoed: plain text, never sniffed as HTML.
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	io.WriteString(w, q.Get("hub.challenge"))
}

// ReadSigned reads a webhook body of at most max bytes and checks its
// X-Hub-Signature-256 against appSecret before anything parses it: a missing
// signature is 401, a wrong one 403, a body over max 413. ok is false when
// the request was answered.
func ReadSigned(w http.ResponseWriter, r *http.Request, max int64, appSecret string) (body []byte, ok bool) {
	// An unsigned request is refused before its body is read.
	sig := r.Header.Get(SignatureHeader)
	if sig == "" {
		http.Error(w, "missing "+SignatureHeader, http.StatusUnauthorized)
		return nil, false
	}
	body, ok = httpkit.ReadWebhook(w, r, max)
	if !ok {
		return nil, false
	}
	if appSecret == "" || !hmac.Equal([]byte(sig), []byte(Sign(appSecret, body))) {
		http.Error(w, "bad "+SignatureHeader, http.StatusForbidden)
		return nil, false
	}
	return body, true
}

// Admit admits a webhook's messages and answers it (httpkit.AdmitAndAnswer):
// Meta redelivers the whole body; what was admitted comes back as
// duplicates.
func Admit(w http.ResponseWriter, r *http.Request, admitter channel.Admitter, id string, msgs []channel.Message) {
	httpkit.AdmitAndAnswer(w, r, admitter, id, msgs...)
}

// Error is a Graph API error body's error.
type Error struct {
	Message   string `json:"message"`
	Type      string `json:"type"`
	Code      int    `json:"code"`
	Subcode   int    `json:"error_subcode"`
	ErrorData struct {
		Details string `json:"details"`
	} `json:"error_data"`
}

// Codes maps a channel's Graph error codes onto the taxonomy.
type Codes struct {
	// RateLimits are the codes of rate limits, with the wait when the
	// answer has no Retry-After.
	RateLimits map[int]time.Duration
	// Classify returns the taxonomy error of e (one of channel.ErrOutsideSessionWindow,
	// ErrRecipientUnreachable, ErrPayloadTooLarge, ErrUnsupportedContent, or
	// channel.ErrPermanent for a code a retry cannot fix), or nil for a
	// code retried with backoff.
	Classify func(e Error) error
}

// ErrPermanent, from Codes.Classify, marks a code no retry fixes (a bad
// token, a policy block) that is none of the taxonomy's classes.
var ErrPermanent = errors.New("permanent")

// Decode decodes a Graph error body; ok is false when body is not one.
func Decode(body []byte) (Error, bool) {
	var g struct {
		Error Error `json:"error"`
	}
	if json.Unmarshal(body, &g) != nil || g.Error.Code == 0 {
		return Error{}, false
	}
	return g.Error, true
}

// MapError maps a Graph answer that is not 2xx onto the taxonomy with
// codes: the signature of httpkit.CallJSON's mapErr.
func (c Codes) MapError(status int, header http.Header, body []byte) error {
	e, ok := Decode(body)
	if !ok {
		err := fmt.Errorf("HTTP %d", status)
		switch {
		case status == http.StatusTooManyRequests:
			return httpkit.RateLimited(header, time.Second, err)
		case status == http.StatusUnauthorized, status == http.StatusForbidden:
			return &channel.PermanentError{Err: err}
		}
		return err
	}
	cause := fmt.Errorf("HTTP %d: code %d: %s", status, e.Code, e.Message)
	if e.Subcode != 0 {
		cause = fmt.Errorf("HTTP %d: code %d/%d: %s", status, e.Code, e.Subcode, e.Message)
	}
	if e.ErrorData.Details != "" {
		cause = fmt.Errorf("%w (%s)", cause, e.ErrorData.Details)
	}
	if wait, ok := c.RateLimits[e.Code]; ok {
		return httpkit.RateLimited(header, wait, cause)
	}
	if c.Classify == nil {
		return cause
	}
	switch class := c.Classify(e); {
	case class == nil:
		return cause
	case errors.Is(class, ErrPermanent):
		return &channel.PermanentError{Err: cause}
	default:
		return fmt.Errorf("%w: %w", class, cause)
	}
}
