package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestHookBudgetIsSharedByTheEventsHooks: the send hooks of one event draw
// on one Budget: a hook that spins is cut at the event's bound and every
// later hook of the event is refused without running (ErrHookBudget, the
// send refused); hooks that log share the event's output budget, with one
// truncation line for the event.
func TestHookBudgetIsSharedByTheEventsHooks(t *testing.T) {
	ctx := context.Background()
	e, logs := newEngine(t, Config{HandlerTimeout: 200 * time.Millisecond})
	m, err := e.Load(ctx, wasmbuild.Go(t, "testdata/guests/slowhook"))
	if err != nil {
		t.Fatal(err)
	}
	hook := func(i int, text string) abi.SendHook {
		return abi.SendHook{Event: "ev", Provider: "web", Chat: fmt.Sprint("c", i), Key: fmt.Sprint("ev:", i), Text: text}
	}
	b := NewBudget(200 * time.Millisecond)
	refused := 0
	for i := range 50 {
		if _, err := m.BeforeSend(WithBudget(ctx, b), hook(i, "spin")); errors.Is(err, ErrHookBudget) {
			refused++
		} else {
			t.Errorf("hook %d: err = %v, want the budget's refusal", i, err)
		}
	}
	if ran := strings.Count(logs.String(), "hook ran for"); refused != 50 || ran != 1 {
		t.Errorf("%d of 50 spinning hooks refused, %d ran; want all refused, 1 run (cut at the event's bound)", refused, ran)
	}

	start := len(logs.String())
	b = NewBudget(200 * time.Millisecond)
	for i := range 50 {
		if _, err := m.BeforeSend(WithBudget(ctx, b), hook(i, "log")); err != nil {
			t.Fatalf("hook %d: %v", i, err)
		}
	}
	out := logs.String()[start:]
	line := strings.Repeat("x", 1000)
	if n := strings.Count(out, line); n*1000 > outputBudgetBytes {
		t.Errorf("50 hooks of one event logged %d lines of 1,000 bytes: over the event's output budget of %d bytes", n, outputBudgetBytes)
	}
	if n := strings.Count(out, "guest output truncated"); n != 1 {
		t.Errorf("%d truncation lines, want the event's one", n)
	}
}
