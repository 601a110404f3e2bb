package abi

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// FetchRequest is the JSON argument of fetch: one call of a configured API
// ([[apis]] in bot.toml), made by the host. The URL is the API's url plus
// Path (an absolute path, with its query). Headers the config sets replace
// the guest's of the same name; the guest never reads them. The body is
// Body (UTF-8 text) or BodyBase64 (any bytes), not both. Key, when set,
// replaces the derived Idempotency-Key "<event id>:fetch:<n>".
type FetchRequest struct {
	API        string            `json:"api"`
	Method     string            `json:"method,omitempty"`
	Path       string            `json:"path"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Key        string            `json:"key,omitempty"`
}

// FetchResponse is the result of fetch: the API's answer, whatever its
// status (a 404 is a response, not an error). Body holds the body when it
// is valid UTF-8, BodyBase64 otherwise. Replayed is true when the answer
// came from the journal (a replayed turn), not from a new call.
type FetchResponse struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Replayed   bool              `json:"replayed,omitempty"`
}

// FetchError is the pending result of FETCH_FAILED: why the call got no
// response (Reason: refused, connection, timeout, too-large) and a message
// the guest may log.
type FetchError struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

func (e *FetchError) Error() string {
	if e.Message == "" {
		return "fetch failed: " + e.Reason
	}
	return "fetch failed: " + e.Reason + ": " + e.Message
}

// Reasons of a FetchError.
const (
	FetchRefused    = "refused"
	FetchConnection = "connection"
	FetchTimeout    = "timeout"
	FetchTooLarge   = "too-large"
)

// DecodeFetchRequest parses and checks a fetch request from untrusted
// bytes: the fields' shape only (the host checks the path against the
// API's base). Every error wraps ErrBadPayload.
func DecodeFetchRequest(b []byte) (FetchRequest, error) {
	var r FetchRequest
	if err := decodeStrict(b, "fetch request", &r); err != nil {
		return FetchRequest{}, err
	}
	bad := func(format string, args ...any) (FetchRequest, error) {
		return FetchRequest{}, fmt.Errorf("%w: fetch request: "+format, append([]any{ErrBadPayload}, args...)...)
	}
	switch {
	case r.API == "":
		return bad("\"api\" is required: the name of an [[apis]] entry")
	case len(r.API) > 64:
		return bad("\"api\" is %d bytes: an [[apis]] name has at most 63", len(r.API))
	case r.Path == "" || !strings.HasPrefix(r.Path, "/"):
		return bad("\"path\" %q: want an absolute path such as \"/orders/42\"", cut(r.Path))
	case r.Body != "" && r.BodyBase64 != "":
		return bad("\"body\" and \"body_base64\" are both set: send one")
	}
	if err := CheckName("\"api\"", r.API); err != nil {
		return bad("%w", err)
	}
	if r.Key != "" {
		if err := CheckKey("\"key\"", r.Key); err != nil {
			return bad("%w", err)
		}
	}
	if r.BodyBase64 != "" {
		if _, err := base64.StdEncoding.DecodeString(r.BodyBase64); err != nil {
			return bad("\"body_base64\" is not base64: %v", err)
		}
	}
	return r, nil
}

// cut is s for a message: at most 64 bytes of it.
func cut(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

// Bytes is the request's body.
func (r FetchRequest) Bytes() []byte {
	if r.BodyBase64 != "" {
		b, _ := base64.StdEncoding.DecodeString(r.BodyBase64)
		return b
	}
	return []byte(r.Body)
}
