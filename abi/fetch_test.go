package abi

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeFetchRequest: any bytes decode to a fetch request of the right
// shape (an api, an absolute path, at most one body) or to ErrBadPayload.
func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add([]byte(`{"api":"crm","path":"/orders/42"}`))
	f.Add([]byte(`{"api":"llm","method":"POST","path":"/v1/chat/completions","headers":{"Content-Type":"application/json"},"body":"{}"}`))
	f.Add([]byte(`{"api":"x","path":"/a","body_base64":"AAE=","key":"k"}`))
	f.Add([]byte(`{"api":"x","path":"a"}`))
	f.Add([]byte(`{"api":"x","path":"/a","body":"b","body_base64":"Yg=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeFetchRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error %v does not wrap ErrBadPayload", err)
			}
			return
		}
		if r.API == "" || !strings.HasPrefix(r.Path, "/") || (r.Body != "" && r.BodyBase64 != "") {
			t.Fatalf("accepted an invalid request %+v", r)
		}
		_ = r.Bytes()
	})
}

// TestDecodeFetchRequestRefusals: each refusal names what is wrong.
func TestDecodeFetchRequestRefusals(t *testing.T) {
	for body, want := range map[string]string{
		`{"path":"/a"}`:               `"api" is required`,
		`{"api":"x","path":"orders"}`: `want an absolute path`,
		`{"api":"x","path":"/a","body":"b","body_base64":"Yg=="}`: `both set`,
		`{"api":"x","path":"/a","body_base64":"%%"}`:              `not base64`,
		`{"api":"x\u0000","path":"/a"}`:                           `control character`,
		`{"api":"x","path":"/a","key":"k@after_send"}`:            `reserves`,
		`{"api":"x","path":"/a","url":"http://evil"}`:             `unknown field`,
	} {
		_, err := DecodeFetchRequest([]byte(body))
		if !errors.Is(err, ErrBadPayload) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a bad payload saying %q", body, err, want)
		}
	}
	r, err := DecodeFetchRequest([]byte(`{"api":"x","path":"/a","body_base64":"AAE="}`))
	if err != nil || string(r.Bytes()) != "\x00\x01" {
		t.Errorf("body_base64: %v %q", err, r.Bytes())
	}
}
