package httpkit

import (
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

func TestHeaderRetryAfter(t *testing.T) {
	h := http.Header{}
	if got := HeaderRetryAfter(h, time.Second); got != time.Second {
		t.Fatalf("none: %s", got)
	}
	h.Set("Retry-After", "7")
	if got := HeaderRetryAfter(h, time.Second); got != 7*time.Second {
		t.Fatalf("7: %s", got)
	}
	h.Set("Retry-After", "Wed, 21 Oct 2026 07:28:00 GMT")
	if got := HeaderRetryAfter(h, 2*time.Second); got != 2*time.Second {
		t.Fatalf("a date: %s", got)
	}
}
