package httpkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// AdmitAndAnswer admits a webhook's messages in order for the provider id
// and answers it: 200 when every one is journaled (or refused for good,
// ErrInvalidMessage), else 503 with Retry-After at the first the host did
// not take. The channel redelivers the whole body; what was admitted comes
// back as duplicates.
func AdmitAndAnswer(w http.ResponseWriter, r *http.Request, admitter channel.Admitter, id string, msgs ...channel.Message) {
	for _, msg := range msgs {
		if _, err := admitter.Admit(r.Context(), id, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
			NotAdmitted(w.Header(), err)
			http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// RateLimited is the error of a rate-limited answer (a 429, or the API's
// own rate-limit error), cause: wait the answer's Retry-After (whole
// seconds), else def.
func RateLimited(h http.Header, def time.Duration, cause error) error {
	wait := def
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		wait = time.Duration(s) * time.Second
	}
	return &channel.RateLimitedError{RetryAfter: wait, Err: cause}
}

// ErrorAnswer reads a JSON error answer of the HTTP status for its mapping
// onto the taxonomy: the cause, "HTTP <status>: <message>" (ErrorMessage),
// and the message in lower case, to match the API's words against.
func ErrorAnswer(status int, body []byte) (cause error, lower string) {
	what := ErrorMessage(body)
	return fmt.Errorf("HTTP %d: %s", status, what), strings.ToLower(what)
}

// ErrorMessage is the "message" of a JSON error answer: a string, or a list
// of strings joined with "; " (NestJS validation errors), else the field as
// it is; at most 200 bytes.
func ErrorMessage(body []byte) string {
	var e struct {
		Message json.RawMessage `json:"message"`
	}
	json.Unmarshal(body, &e)
	var one string
	var many []string
	what := strings.TrimSpace(string(e.Message))
	if json.Unmarshal(e.Message, &one) == nil {
		what = one
	} else if json.Unmarshal(e.Message, &many) == nil {
		what = strings.Join(many, "; ")
	}
	if len(what) > 200 {
		what = what[:200]
	}
	return what
}
