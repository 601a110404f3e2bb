package httpkit

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// MaxHandlerTime is how long the host lets a channel's HTTP handler run
// and write its answer (its server's write timeout): a long poll must answer
// well within it.
const MaxHandlerTime = 60 * time.Second

// NotAdmitted sets the Retry-After of a webhook's 503 answer to a message
// Admit refused: the wait err asks for (a full admission queue), at least a
// second, so the sender redelivers later rather than at once.
func NotAdmitted(h http.Header, err error) {
	SetRetryAfter(h, RetryAfter(err))
}

// SetRetryAfter sets Retry-After to wait in whole seconds, at least one.
func SetRetryAfter(h http.Header, wait time.Duration) {
	h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
}

// ReadWebhook reads a webhook body of at most max bytes; a larger one is
// answered 413 and ok is false.
func ReadWebhook(w http.ResponseWriter, r *http.Request, max int64) (body []byte, ok bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		http.Error(w, fmt.Sprintf("body over %d bytes", max), http.StatusRequestEntityTooLarge)
		return nil, false
	}
	return body, true
}

// CallJSON performs an API request and decodes a 2xx JSON answer (at most
// 1 MiB) into out. Any other status goes to mapErr with the status, headers
// and body, which maps the channel's error onto the taxonomy.
func CallJSON(client *http.Client, req *http.Request, out any, mapErr func(status int, h http.Header, body []byte) error) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return mapErr(resp.StatusCode, resp.Header, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("HTTP %d with an unreadable body", resp.StatusCode)
	}
	return nil
}

// CheckQueryToken checks a webhook request of a gateway that does not sign
// its webhooks: its token query parameter must be want (the entry's
// webhook_token), compared in constant time. It answers 401 when the
// parameter is missing and 403 when it is wrong, and reports whether the
// request may go on. Never log the request's URL: it holds the token.
func CheckQueryToken(w http.ResponseWriter, r *http.Request, want string) bool {
	got := r.URL.Query().Get("token")
	switch {
	case got == "":
		http.Error(w, "missing the token query parameter: the webhook URL ends in ?token=<the entry's webhook_token>", http.StatusUnauthorized)
		return false
	case want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1:
		http.Error(w, "bad token query parameter: it is not the entry's webhook_token", http.StatusForbidden)
		return false
	}
	return true
}
