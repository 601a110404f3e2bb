package httpkit

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"status":"error","message":"Invalid Destination"}`:               "Invalid Destination",
		`{"statusCode":422,"message":["message should not be empty","x"]}`: "message should not be empty; x",
		`{"message":{"code":7}}`:                                           `{"code":7}`,
		`not json`:                                                         "",
		`{"message":"` + strings.Repeat("a", 300) + `"}`:                   strings.Repeat("a", 200),
	} {
		if got := ErrorMessage([]byte(body)); got != want {
			t.Errorf("%.40s: %q, want %q", body, got, want)
		}
	}
}

// TestRateLimited: the wait is Retry-After in whole seconds, else the
// default (a date is not read); the cause is kept.
func TestRateLimited(t *testing.T) {
	cause := errors.New("HTTP 429")
	h := http.Header{}
	for _, tt := range []struct {
		retryAfter string
		def, want  time.Duration
	}{
		{"", time.Second, time.Second},
		{"7", time.Second, 7 * time.Second},
		{"Wed, 21 Oct 2026 07:28:00 GMT", 2 * time.Second, 2 * time.Second},
	} {
		h.Set("Retry-After", tt.retryAfter)
		err := RateLimited(h, tt.def, cause)
		if got := RetryAfter(err); got != tt.want || !errors.Is(err, cause) {
			t.Fatalf("Retry-After %q: %v waits %s, want %s", tt.retryAfter, err, got, tt.want)
		}
	}
}

// TestErrorAnswer: the cause names the status and the message; the message
// comes back in lower case.
func TestErrorAnswer(t *testing.T) {
	cause, low := ErrorAnswer(400, []byte(`{"status":"error","message":"Invalid Destination"}`))
	if cause.Error() != "HTTP 400: Invalid Destination" || low != "invalid destination" {
		t.Fatalf("%v, %q", cause, low)
	}
}
