package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm/internal/hostfuncs"
	"github.com/botrun/botrun/internal/waitfor"
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

	// Output: time enough that a loaded machine never runs out of it.
	e, logs = newEngine(t, Config{HandlerTimeout: 30 * time.Second})
	if m, err = e.Load(ctx, wasmbuild.Go(t, "testdata/guests/slowhook")); err != nil {
		t.Fatal(err)
	}
	b = NewBudget(time.Minute)
	for i := range 50 {
		if _, err := m.BeforeSend(WithBudget(ctx, b), hook(i, "log")); err != nil {
			t.Fatalf("hook %d: %v", i, err)
		}
	}
	out := logs.String()
	line := strings.Repeat("x", 1000)
	if n := strings.Count(out, line); n*1000 > hostfuncs.OutputBudgetBytes {
		t.Errorf("50 hooks of one event logged %d lines of 1,000 bytes: over the event's output budget of %d bytes", n, hostfuncs.OutputBudgetBytes)
	}
	if n := strings.Count(out, "guest output truncated"); n != 1 {
		t.Errorf("%d truncation lines, want the event's one", n)
	}
}

// TestHookBudgetLetsHooksRunAtOnce: a hook of an event that starts while
// another of the same event runs is not refused (the outbox runs a
// broadcast's after_send hooks several at a time): a hook draws what is
// left of the budget when it starts, and is charged what it used.
func TestHookBudgetLetsHooksRunAtOnce(t *testing.T) {
	ctx := context.Background()
	e, logs := newEngine(t, Config{HandlerTimeout: 30 * time.Second, Workers: 4})
	m, err := e.Load(ctx, wasmbuild.Go(t, "testdata/guests/slowhook"))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBudget(30 * time.Second)
	spinCtx, stop := context.WithCancel(ctx)
	spun := make(chan error, 1)
	go func() {
		spun <- m.AfterSend(WithBudget(spinCtx, b), abi.SendHook{Event: "ev", Provider: "web", Chat: "c0", Key: "ev:0", Text: "spin after"})
	}()
	if !waitfor.True(2*time.Minute, func() bool { return strings.Contains(logs.String(), "after ran for ev:0") }) {
		t.Fatalf("the spinning hook did not start:\n%s", logs.String())
	}
	err = m.AfterSend(WithBudget(ctx, b), abi.SendHook{Event: "ev", Provider: "web", Chat: "c1", Key: "ev:1", Text: "quick after"})
	stop()
	<-spun
	if err != nil {
		t.Errorf("a hook that started while another of its event ran: %v; want it run", err)
	}
	if !strings.Contains(logs.String(), "after quick for ev:1") {
		t.Errorf("the second hook did not run:\n%s", logs.String())
	}
}
