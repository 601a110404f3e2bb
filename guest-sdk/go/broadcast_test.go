//go:build !wasip1

package bot

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

// broadcastHost answers broadcast with a scripted result or code.
type broadcastHost struct {
	fakeHost
	reqs [][]byte
	res  string
	code int32
}

func (h *broadcastHost) broadcast(req []byte) ([]byte, int32) {
	h.reqs = append(h.reqs, req)
	return []byte(h.res), h.code
}

// The request is JSON that encoding/json reads back as the SDK was given it:
// chats, text and the prefix escaped, media and at when set, no key.
func TestEncodeBroadcastRequest(t *testing.T) {
	chats := []string{"c1", `quote " slash \ nl` + "\n", "tab\tctl\x01", "uni é 😀", "bad \xff utf8"}
	b := encodeBroadcastRequest(chats, sendRequest{Text: "hi \"all\"", Media: &Media{Type: "image", URL: "https://x/y.png"}, At: 1764412805000,
		IdempotencyKey: "ignored"}, `news:"7"`)
	var got struct {
		Chats     []string
		Text      string
		Media     *Media
		KeyPrefix string `json:"key_prefix"`
		At        int64
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := append(chats[:4:4], "bad \uFFFD utf8")
	if !reflect.DeepEqual(got.Chats, want) || got.Text != `hi "all"` || got.KeyPrefix != `news:"7"` || got.At != 1764412805000 ||
		got.Media == nil || got.Media.URL != "https://x/y.png" {
		t.Fatalf("%s decoded as %+v", b, got)
	}
	// No chats is an empty list (the host refuses it), never null; no at is
	// no field.
	if b := string(encodeBroadcastRequest(nil, sendRequest{Text: "hi"}, "p")); b != `{"chats":[],"text":"hi","key_prefix":"p"}` {
		t.Fatalf("%s", b)
	}
}

func TestBroadcast(t *testing.T) {
	ctx := &Context{Event: Event{ID: "ev", Chat: "c1"}}
	// Outside a host (or on one without broadcast): UNSUPPORTED.
	if _, err := ctx.Broadcast([]string{"a"}, "hi", "p"); !errors.Is(err, ErrUnsupported) || err.Error() != "botrun.broadcast: UNSUPPORTED" {
		t.Fatalf("Broadcast without a host: %v", err)
	}
	h := &broadcastHost{res: `{"journaled":2,"existing":1}`}
	newFakeHost(t)
	native = h
	res, err := ctx.Broadcast([]string{"a", "b", "c"}, "hi", "news:7", WithAt(time.UnixMilli(1764412805000)))
	if err != nil || res != (BroadcastResult{Journaled: 2, Existing: 1}) {
		t.Fatalf("Broadcast: %+v, %v", res, err)
	}
	if got := string(h.reqs[0]); got != `{"chats":["a","b","c"],"text":"hi","key_prefix":"news:7","at":1764412805000}` {
		t.Fatalf("request %s", got)
	}
	h.code = -5
	if _, err := ctx.Broadcast([]string{"a"}, "hi", "p"); !errors.Is(err, ErrTooLarge) || CodeOf(err) != CodeTooLarge {
		t.Fatalf("TOO_LARGE: %v", err)
	}
	h.code, h.res = 0, `{"journaled":"x"}`
	if _, err := ctx.Broadcast([]string{"a"}, "hi", "p"); err == nil || err.Error() != "botrun.broadcast: bad result: "+errSyntax.Error() {
		t.Fatalf("bad result: %v", err)
	}
	// A flow replaying a step already taken makes no host call.
	n := len(h.reqs)
	ctx.replaying = true
	if res, err := ctx.Broadcast([]string{"a"}, "hi", "p"); err != nil || !res.Replayed || len(h.reqs) != n {
		t.Fatalf("replaying: %+v, %v, %d calls", res, err, len(h.reqs)-n)
	}
}
