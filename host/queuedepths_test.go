package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/wasm"
)

// TestQueueDepthsCountDeadLettersBehindOlderRecords: the queue gauges count
// the dead letters and unknown sends created after more than 20,000 done and
// sent records (the walk of the creation index they used stopped there).
func TestQueueDepthsCountDeadLettersBehindOlderRecords(t *testing.T) {
	idle := native(func(context.Context, abi.Event, wasm.Env) error { return nil })
	b := newTestBot(t, testConfig(t, ""), memory.New(), idle, newChannel())
	defer b.stop(t)
	ctx := context.Background()
	far := nowMs() + 3_600_000
	for i := range 21_000 {
		l := durability.Lease{Owner: "old", Now: int64(i + 1), Until: far}
		id := fmt.Sprintf("web:old:%d", i)
		if _, _, err := b.inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: "c1"}, int64(i+1), &l); err != nil {
			t.Fatal(err)
		}
		if err := b.inbox.Complete(ctx, id, 1, durability.Completion{Now: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.outbox.Put(ctx, durability.OutboxPut{Key: id + ":1", Provider: "web", Chat: "c1"}, int64(i+1), &l); err != nil {
			t.Fatal(err)
		}
		if err := b.outbox.MarkSent(ctx, id+":1", 1, "ref", int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	l := durability.Lease{Owner: "old", Now: 30_000, Until: far}
	if _, _, err := b.inbox.Put(ctx, durability.InboxPut{ID: "web:dead", Provider: "web", Chat: "c1"}, 30_000, &l); err != nil {
		t.Fatal(err)
	}
	if err := b.inbox.Fail(ctx, "web:dead", 1, "trap", durability.FailOptions{Now: 30_001, Dead: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.outbox.Put(ctx, durability.OutboxPut{Key: "web:dead:1", Provider: "web", Chat: "c1"}, 30_000, &l); err != nil {
		t.Fatal(err)
	}
	if err := b.outbox.MarkFailed(ctx, "web:dead:1", 1, "refused", durability.FailOptions{Now: 30_001, Dead: true}); err != nil {
		t.Fatal(err)
	}
	inbox, outbox, err := b.Observer().QueueDepths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inbox["dead"] != 1 || outbox["dead"] != 1 {
		t.Fatalf("dead letters counted: inbox %d, outbox %d; want 1 and 1", inbox["dead"], outbox["dead"])
	}
}
