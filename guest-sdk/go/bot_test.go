package bot

import (
	"errors"
	"testing"
	"time"
)

// Outside WebAssembly every host call answers UNSUPPORTED; these tests pin how
// the SDK surfaces host codes and send outcomes.
func TestHostErrors(t *testing.T) {
	ctx := &Context{Event: Event{Chat: "c1"}}
	_, err := ctx.Reply("hi")
	var he *HostError
	if !errors.As(err, &he) || he.Func != "post" || he.Error() != "botrun.post: UNSUPPORTED" || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Reply outside a host: %v", err)
	}
	if _, err := ctx.Send("c1", "hi"); !errors.As(err, &he) || he.Func != "send" {
		t.Fatalf("Send outside a host: %v", err)
	}
	if _, _, err := ctx.StateGet("k"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("StateGet: %v", err)
	}
	if err := (&HostError{Func: "send", Code: -2}); err.Error() != "botrun.send: BAD_PAYLOAD" || errors.Is(err, ErrUnsupported) {
		t.Fatalf("BAD_PAYLOAD: %v", err)
	}
}

func TestSendError(t *testing.T) {
	err := &SendError{Result: SendResult{Status: "dead", Key: "web:1:1", Error: "recipient unreachable"}}
	if got := err.Error(); got != "send web:1:1 dead: recipient unreachable" {
		t.Fatalf("%q", got)
	}
}

// Every code has a name and a sentinel that only its HostError matches.
func TestCodesAreNamed(t *testing.T) {
	for code, want := range sentinelsByCode() {
		err := error(&HostError{Func: "state_get", Code: code})
		if !errors.Is(err, want) || CodeOf(err) != code || code.String() == "" || err.Error() != "botrun.state_get: "+code.String() {
			t.Fatalf("code %d: %v", code, err)
		}
		for other, s := range sentinelsByCode() {
			if other != code && errors.Is(err, s) {
				t.Fatalf("code %v matches the sentinel of %v", code, other)
			}
		}
	}
	if err := error(&MediaUnavailableError{Reason: ReasonNotDurable}); !errors.Is(err, ErrMediaUnavailable) || CodeOf(err) != CodeMediaUnavailable {
		t.Fatalf("media: %v", err)
	}
}

func sentinelsByCode() map[Code]error { return codeErrs }

// WithAt sends the time in Unix milliseconds, and nothing for a zero time.
func TestWithAt(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.UnixMilli(1764412805000), `{"chat":"c1","text":"later","at":1764412805000}`},
		{time.UnixMilli(1764412800000).Add(1500 * time.Millisecond), `{"chat":"c1","text":"later","at":1764412801500}`},
		{time.Time{}, `{"chat":"c1","text":"later"}`},
	} {
		r := sendRequest{Chat: "c1", Text: "later"}
		WithAt(time.UnixMilli(1))(&r) // the last WithAt wins
		WithAt(c.at)(&r)
		if got := string(encodeSendRequest(r)); got != c.want {
			t.Errorf("WithAt(%v): %s, want %s", c.at, got, c.want)
		}
	}
}
