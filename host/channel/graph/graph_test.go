package graph

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// TestVerify: the hub.challenge handshake answers the challenge, as plain
// text, only to subscribe with the right verify token.
func TestVerify(t *testing.T) {
	for _, tt := range []struct {
		query string
		code  int
		body  string
	}{
		{"hub.mode=subscribe&hub.verify_token=verify-me&hub.challenge=1158201444", 200, "1158201444"},
		{"hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1158201444", 403, ""},
		{"hub.mode=unsubscribe&hub.verify_token=verify-me&hub.challenge=1", 403, ""},
		{"hub.mode=subscribe&hub.verify_token=&hub.challenge=1", 403, ""},
		{"hub.challenge=1", 403, ""},
	} {
		rec := httptest.NewRecorder()
		Verify(rec, httptest.NewRequest("GET", "/webhooks/x?"+tt.query, nil), "verify-me")
		if rec.Code != tt.code || (tt.code == 200 && (rec.Body.String() != tt.body || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8")) {
			t.Errorf("GET ?%s: %d %q, want %d %q", tt.query, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
	}
	rec := httptest.NewRecorder()
	Verify(rec, httptest.NewRequest("GET", "/webhooks/x?hub.mode=subscribe&hub.verify_token=&hub.challenge=1", nil), "")
	if rec.Code != 403 {
		t.Fatalf("an empty verify_token configured accepted an empty one: %d", rec.Code)
	}
}

// TestReadSigned: a missing signature is 401, a wrong one 403, a body over
// the limit 413; the right one passes the body on.
func TestReadSigned(t *testing.T) {
	body := []byte(`{"object":"page"}`)
	for _, tt := range []struct {
		name, sig string
		max       int64
		code      int
	}{
		{"signed", Sign("s3cret", body), 1 << 10, 200},
		{"missing", "", 1 << 10, 401},
		{"wrong secret", Sign("other", body), 1 << 10, 403},
		{"too large", Sign("s3cret", body), 8, 413},
	} {
		r := httptest.NewRequest("POST", "/webhooks/x", bytes.NewReader(body))
		if tt.sig != "" {
			r.Header.Set(SignatureHeader, tt.sig)
		}
		rec := httptest.NewRecorder()
		got, ok := ReadSigned(rec, r, tt.max, "s3cret")
		if ok != (tt.code == 200) || (ok && !bytes.Equal(got, body)) || (!ok && rec.Code != tt.code) {
			t.Errorf("%s: ok %v, HTTP %d, want %d", tt.name, ok, rec.Code, tt.code)
		}
	}
}
