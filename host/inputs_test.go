package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/wasm"
)

// TestTurnInputsRecorded checks what a turn records with its completion: the
// first store read of each key it reads (not a second read, not a read of its
// own write), "recorded, nothing read" for a turn that reads nothing,
// "too large" past inputs.MaxBytes without failing the turn, and a dead
// record's failing attempt's inputs.
func TestTurnInputsRecorded(t *testing.T) {
	guest := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		switch ev.Text {
		case "count":
			v, _, err := env.StateGet(ctx, "n")
			if err != nil {
				return err
			}
			env.StateGet(ctx, "n") // the guest's own doing: not recorded twice
			env.StateGet(ctx, "user/name")
			if err := env.StateSet(ctx, "n", append(v, 'x')); err != nil {
				return err
			}
			env.StateGet(ctx, "n") // its own write
			env.StateSet(ctx, "w", []byte("1"))
			env.StateGet(ctx, "w") // written before any read: not a store read
		case "greedy":
			for i := range 2 * inputs.MaxBytes / 64 {
				if _, _, err := env.StateGet(ctx, fmt.Sprintf("%064d", i)); err != nil {
					return err
				}
			}
		case "trap":
			env.StateGet(ctx, "n")
			return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("unreachable")}
		}
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "ok"})
		return err
	})
	cfg := testConfig(t, "")
	cfg.Durability.Inbox.MaxAttempts = 1
	b := newTestBot(t, cfg, memory.New(), guest, newChannel())
	defer b.stop(t)
	for i, text := range []string{"count", "count", "quiet", "greedy", "trap"} {
		if _, err := b.admit(t, "c1", fmt.Sprint("m", i+1), text); err != nil {
			t.Fatal(err)
		}
		if !waitFor(time.Minute, func() bool { return b.inboxState(t, fmt.Sprint("web:m", i+1)).State.Terminal() }) {
			t.Fatalf("%s did not settle: %+v", text, b.inboxState(t, fmt.Sprint("web:m", i+1)))
		}
	}
	want := map[string]string{
		"web:m1": `{"v":1,"state":[{"k":"n"},{"k":"user/name"}]}`,
		"web:m2": `{"v":1,"state":[{"k":"n","v":"eA==","ok":true},{"k":"user/name"}]}`,
		"web:m3": `{"v":1}`,
		"web:m4": `{"v":1,"too_large":true}`,
		"web:m5": `{"v":1,"state":[{"k":"n","v":"eHg=","ok":true}]}`,
	}
	for id, w := range want {
		r := b.inboxState(t, id)
		if string(r.Inputs) != w {
			t.Errorf("%s (%s): inputs %s, want %s", id, r.State, r.Inputs, w)
		}
	}
	if r := b.inboxState(t, "web:m4"); r.State != durability.InboxDone {
		t.Errorf("a turn over the inputs cap failed: %+v", r)
	}
	if r := b.inboxState(t, "web:m5"); r.State != durability.InboxDead {
		t.Errorf("the trapping turn is %s, want dead", r.State)
	}
	if _, err := inputs.Parse(nil); err == nil || !strings.Contains(err.Error(), "not recorded") {
		t.Errorf("Parse of no inputs: %v", err)
	}
}
