package abi

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeSendRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantErr string
		want              SendRequest
	}{
		{name: "text", in: `{"chat":"c1","text":"hi"}`, want: SendRequest{Chat: "c1", Text: "hi"}},
		{name: "explicit key", in: `{"chat":"c1","text":"hi","media":null,"idempotency_key":"k"}`, want: SendRequest{Chat: "c1", Text: "hi", IdempotencyKey: "k"}},
		{name: "media", in: `{"chat":"c1","media":{"type":"image","url":"https://x/y.png"}}`, want: SendRequest{Chat: "c1", Media: &Media{Type: "image", URL: "https://x/y.png"}}},
		{name: "not json", in: `{"chat":`, wantErr: "send request: unexpected EOF"},
		{name: "unknown field", in: `{"chat":"c1","txt":"hi"}`, wantErr: `unknown field "txt"`},
		{name: "trailing", in: `{"chat":"c1","text":"a"}{}`, wantErr: "trailing data"},
		{name: "no chat", in: `{"text":"hi"}`, wantErr: `"chat" is required`},
		{name: "empty", in: `{"chat":"c1"}`, wantErr: `"text" or "media" is required`},
		{name: "bad media type", in: `{"chat":"c1","media":{"type":"gif","url":"u"}}`, wantErr: `unknown type "gif"`},
		{name: "media without ref", in: `{"chat":"c1","media":{"type":"image"}}`, wantErr: `"ref" or "url" is required`},
		{name: "wrong type", in: `{"chat":1,"text":"x"}`, wantErr: "cannot unmarshal number"},
		{name: "too large", in: `{"chat":"c","text":"` + strings.Repeat("a", MaxPayload) + `"}`, wantErr: "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeSendRequest([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrBadPayload) {
					t.Fatalf("err = %v, want one containing %q wrapping ErrBadPayload", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Chat != tt.want.Chat || got.Text != tt.want.Text || got.IdempotencyKey != tt.want.IdempotencyKey ||
				(got.Media == nil) != (tt.want.Media == nil) || (got.Media != nil && *got.Media != *tt.want.Media) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzDecodeSendRequest(f *testing.F) {
	f.Add([]byte(`{"chat":"c1","text":"hi"}`))
	f.Add([]byte(`{"chat":"c1","media":{"type":"image","ref":"r"},"idempotency_key":"k"}`))
	f.Add([]byte(`{"chat":"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeSendRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error %v does not wrap ErrBadPayload", err)
			}
			return
		}
		if r.Chat == "" || (r.Text == "" && r.Media == nil) {
			t.Fatalf("accepted an invalid request %+v", r)
		}
	})
}

// TestControlCharactersRejectedInSends: a send's chat or idempotency key with
// a NUL or another control character is a bad payload (it would become a
// journal key).
func TestControlCharactersRejectedInSends(t *testing.T) {
	for _, b := range []string{
		`{"chat":"n\u0000x","text":"hi"}`,
		`{"chat":"c","text":"hi","idempotency_key":"k\u001b"}`,
		`{"chat":"c\n","text":"hi"}`,
	} {
		if _, err := DecodeSendRequest([]byte(b)); !errors.Is(err, ErrBadPayload) || !errors.Is(err, ErrBadName) {
			t.Errorf("%s: %v, want a bad payload naming the field", b, err)
		}
	}
	if _, err := DecodeSendRequest([]byte(`{"chat":"c/1 ü","text":"a\u0000b"}`)); err != nil {
		t.Fatalf("printable chat, any text: %v", err)
	}
}

func FuzzDecodeBroadcastRequest(f *testing.F) {
	f.Add([]byte(`{"chats":["c1","c2"],"text":"hi","key_prefix":"news:1"}`))
	f.Add([]byte(`{"chats":["c1"],"media":{"type":"image","url":"https://x/y.png"},"key_prefix":"k","at":5}`))
	f.Add([]byte(`{"chats":[""],"text":"x","key_prefix":"k"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeBroadcastRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error %v does not wrap ErrBadPayload", err)
			}
			return
		}
		if len(r.Chats) == 0 || r.KeyPrefix == "" || (r.Text == "" && r.Media == nil) || r.At < 0 {
			t.Fatalf("accepted an incomplete request %+v", r)
		}
		for _, c := range r.Chats {
			if c == "" || CheckName("chat", c) != nil {
				t.Fatalf("accepted chat %q", c)
			}
		}
	})
}

func FuzzDecodeEditRequest(f *testing.F) {
	f.Add([]byte(`{"chat":"c1","message":"42","text":"final"}`))
	f.Add([]byte(`{"chat":"c1","message":"","text":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeEditRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error %v does not wrap ErrBadPayload", err)
			}
			return
		}
		if r.Chat == "" || r.Message == "" || r.Text == "" || CheckName("chat", r.Chat) != nil || CheckName("message", r.Message) != nil {
			t.Fatalf("accepted %+v", r)
		}
		if _, err := DecodeTypingRequest(b); err == nil {
			t.Fatalf("a typing request with edit fields %q was accepted", b)
		}
	})
}
