package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	eventsdurability "github.com/botrun/botrun/durability/events"
	"github.com/botrun/botrun/eventjournal"
	"github.com/botrun/botrun/host/wasm"
)

// TestEventsJournalReplayIsSwept: on the events backend, an application that
// replays the bot's inbound event through its own events journal makes the
// bot's sweeper process it again; its sends are answered from the outbox.
func TestEventsJournalReplayIsSwept(t *testing.T) {
	for _, kind := range []string{"events", "events-shared"} {
		t.Run(kind, func(t *testing.T) {
			backend := backends[kind](t).(*eventsdurability.Backend)
			var runs atomic.Int64
			h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
				runs.Add(1)
				return echoTwice(ctx, ev, env)
			})
			cfg := testConfig(t, "")
			ch := newChannel()
			b := newTestBot(t, cfg, backend, h, ch)
			defer b.stop(t)
			if _, err := b.admit(t, "c1", "m1", "hi"); err != nil {
				t.Fatal(err)
			}
			if !b.quiet(1, time.Minute) {
				t.Fatal("the message did not settle")
			}
			id := eventjournal.Reserved + Scope(cfg).ID() + "/web:m1"
			ev, err := backend.Journal().Get(context.Background(), id)
			if err != nil || ev.Channel != eventsdurability.Channel || ev.Type != eventsdurability.TypeMessage || ev.State != eventjournal.Done {
				t.Fatalf("the inbound event: %+v, %v", ev, err)
			}
			if err := backend.Journal().Replay(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if !waitFor(2*time.Minute, func() bool { return runs.Load() >= 2 && b.inboxState(t, "web:m1").State == durability.InboxDone }) {
				t.Fatalf("the replayed event was not processed again: %d runs, %+v", runs.Load(), b.inboxState(t, "web:m1"))
			}
			if got := ch.texts(); len(got) != 2 {
				t.Fatalf("channel got %q: the replay's sends must come from the outbox", got)
			}
			if m := b.Observer().Metrics(); m.OutboxDeduped != 2 {
				t.Fatalf("outbox_deduped = %d, want 2", m.OutboxDeduped)
			}
		})
	}
}
