//go:build !wasip1

package bot

import (
	"errors"
	"strings"
	"testing"
)

// editHost answers edit and typing with a scripted result and code.
type editHost struct {
	fakeHost
	reqs []string
	res  string
	code int32
}

func (h *editHost) channelOp(fn string, req []byte) ([]byte, int32) {
	h.reqs = append(h.reqs, fn+" "+string(req))
	if h.code == -9 {
		return []byte(h.res), h.code
	}
	return nil, h.code
}

func TestEncodeEditRequest(t *testing.T) {
	if got := string(encodeEditRequest(`c"1`, "m\\7", "é\n😀")); got != `{"chat":"c\"1","message":"m\\7","text":"é\n😀"}` {
		t.Fatalf("%s", got)
	}
	if got := string(encodeTypingRequest("c1")); got != `{"chat":"c1"}` {
		t.Fatalf("%s", got)
	}
}

func TestEditAndTyping(t *testing.T) {
	ctx := &Context{Event: Event{ID: "ev", Chat: "c1"}}
	// Outside a host (or on one without edit): UNSUPPORTED.
	if err := ctx.Edit("c1", "7", "x"); !errors.Is(err, ErrUnsupported) || err.Error() != "botrun.edit: UNSUPPORTED" {
		t.Fatalf("Edit without a host: %v", err)
	}
	if err := ctx.Typing("c1"); !errors.Is(err, ErrUnsupported) || CodeOf(err) != CodeUnsupported {
		t.Fatalf("Typing without a host: %v", err)
	}
	h := &editHost{}
	newFakeHost(t)
	native = h
	if err := ctx.Edit("c1", "7", "final"); err != nil {
		t.Fatalf("Edit: %v", err)
	}
	if err := ctx.Typing("c1"); err != nil {
		t.Fatalf("Typing: %v", err)
	}
	if got := strings.Join(h.reqs, "\n"); got != "edit {\"chat\":\"c1\",\"message\":\"7\",\"text\":\"final\"}\ntyping {\"chat\":\"c1\"}" {
		t.Fatalf("requests %s", got)
	}
	// CHANNEL_FAILED: the channel's message, from the pending result, past
	// 1 KiB of escapes.
	long := strings.Repeat("<", 512)
	h.code, h.res = -9, `{"error":"`+strings.Repeat(`\u003c`, 512)+`"}`
	err := ctx.Edit("c1", "7", "final")
	var ce *ChannelError
	if !errors.As(err, &ce) || ce.Func != "edit" || ce.Message != long || !errors.Is(err, ErrChannelFailed) || CodeOf(err) != CodeChannelFailed ||
		errors.Is(err, ErrHostError) {
		t.Fatalf("CHANNEL_FAILED: %v", err)
	}
	h.res = `{"error":"Forbidden: bot was blocked"}`
	if err := ctx.Typing("c1"); err == nil || err.Error() != "botrun.typing: CHANNEL_FAILED: Forbidden: bot was blocked" {
		t.Fatalf("typing CHANNEL_FAILED: %v", err)
	}
	h.res = `{}`
	if err := ctx.Typing("c1"); err == nil || err.Error() != "botrun.typing: CHANNEL_FAILED" {
		t.Fatalf("no message: %v", err)
	}
	h.res = `{"error":7}`
	if err := ctx.Edit("c1", "7", "x"); err == nil || !strings.HasPrefix(err.Error(), "botrun.edit: bad result: ") || CodeOf(err) != 0 {
		t.Fatalf("bad result: %v", err)
	}
	h.code = -2
	if err := ctx.Edit("c1", "", "x"); !errors.Is(err, ErrBadPayload) || err.Error() != "botrun.edit: BAD_PAYLOAD" {
		t.Fatalf("BAD_PAYLOAD: %v", err)
	}
	if CodeChannelFailed.String() != "CHANNEL_FAILED" {
		t.Fatalf("name %s", CodeChannelFailed)
	}
	// A flow replaying a step already taken makes no host call.
	n := len(h.reqs)
	ctx.replaying = true
	if err := ctx.Edit("c1", "7", "x"); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Typing("c1"); err != nil {
		t.Fatal(err)
	}
	if len(h.reqs) != n {
		t.Fatalf("replaying made %d calls", len(h.reqs)-n)
	}
}
