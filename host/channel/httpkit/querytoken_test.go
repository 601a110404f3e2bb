package httpkit

import (
	"net/http/httptest"
	"testing"
)

// TestCheckQueryToken: a missing token is 401, a wrong one 403 (a prefix, a
// longer one, another parameter's), and an empty want refuses every one.
func TestCheckQueryToken(t *testing.T) {
	const want = "wpp-webhook-token-0123456789"
	for _, c := range []struct {
		query, want string
		code        int
	}{
		{"token=" + want, want, 200},
		{"a=1&token=" + want, want, 200},
		{"", want, 401},
		{"token=", want, 401},
		{"secret=" + want, want, 401},
		{"token=" + want[:len(want)-1], want, 403},
		{"token=" + want + "0", want, 403},
		{"token=x", "", 403},
	} {
		rec := httptest.NewRecorder()
		ok := CheckQueryToken(rec, httptest.NewRequest("POST", "/webhooks/x?"+c.query, nil), c.want)
		if code := rec.Code; ok != (c.code == 200) || (!ok && code != c.code) {
			t.Errorf("?%s: ok %v, HTTP %d; want %d", c.query, ok, code, c.code)
		}
	}
}
