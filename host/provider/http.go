package provider

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

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

// CheckQueryToken checks the token query parameter of a webhook against
// want in constant time, for a sender that signs nothing and can only be
// given a secret URL (https://…/webhooks/<id>?token=…): a missing token is
// answered 401, a wrong one 403, and ok is false when the request was
// answered. The URL then holds a credential: never log it.
func CheckQueryToken(w http.ResponseWriter, r *http.Request, want string) (ok bool) {
	got := r.URL.Query().Get("token")
	if got == "" {
		http.Error(w, "missing the token query parameter", http.StatusUnauthorized)
		return false
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		http.Error(w, "bad token", http.StatusForbidden)
		return false
	}
	return true
}

// AdmitWebhook admits a webhook's messages in order for the provider id and
// answers it: 200 when every one is journaled (or refused for good,
// ErrInvalidMessage), else 503 with Retry-After at the first the host did
// not take. A sender that redelivers the whole body sends what was admitted
// again, and the host counts it a duplicate.
func AdmitWebhook(w http.ResponseWriter, r *http.Request, admitter Admitter, id string, msgs []Message) {
	for _, msg := range msgs {
		if _, err := admitter.Admit(r.Context(), id, msg); err != nil && !errors.Is(err, ErrInvalidMessage) {
			NotAdmitted(w.Header(), err)
			http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
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
