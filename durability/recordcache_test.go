package durability_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
)

// TestRecordCacheBoundedInBytes: the write-through record cache holds at most
// its budget of bytes however large the records, evicting the least recently
// written; an evicted record is read back from the store, and a record larger
// than the whole budget is not cached.
func TestRecordCacheBoundedInBytes(t *testing.T) {
	const budget = 1 << 20
	ctx := context.Background()
	d := durability.NewKvDurability(memory.NewKv()).WithRecordCache(budget)
	j, err := d.Open(ctx, durability.Scope{Bot: "b", Connection: "default"})
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 200, 64 << 10 // 12.5 MiB of payloads
	lease := durability.Lease{Owner: "i1", Now: 1, Until: 1 << 40}
	for i := range n {
		payload := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: fmt.Sprint("m", i), Provider: "web", Chat: "c", Payload: payload}, 1, &lease); err != nil {
			t.Fatal(err)
		}
		if got, _ := durability.RecordCacheSize(d); got > budget {
			t.Fatalf("after %d records of %d bytes the cache holds %d bytes, over its %d budget", i+1, size, got, budget)
		}
	}
	got, records := durability.RecordCacheSize(d)
	if records == 0 || records >= n || got < budget/2 {
		t.Fatalf("the cache holds %d records, %d bytes: want the latest ones, about %d bytes", records, got, budget)
	}
	// The oldest (evicted) and the newest (cached) records complete alike.
	for _, id := range []string{"m0", fmt.Sprint("m", n-1)} {
		if err := j.Inbox.Complete(ctx, id, 1, durability.Completion{Module: "mod", Now: 2}); err != nil {
			t.Fatalf("complete %s: %v", id, err)
		}
		if rec, err := j.Inbox.Get(ctx, id); err != nil || rec.State != durability.InboxDone || len(rec.Payload) != size {
			t.Fatalf("%s: %+v %v", id, rec.State, err)
		}
	}
	// A record over the whole budget is not kept.
	big := durability.NewKvDurability(memory.NewKv()).WithRecordCache(budget)
	jb, _ := big.Open(ctx, durability.Scope{Bot: "b", Connection: "default"})
	if _, _, err := jb.Inbox.Put(ctx, durability.InboxPut{ID: "huge", Provider: "web", Chat: "c", Payload: make([]byte, 2*budget)}, 1, &lease); err != nil {
		t.Fatal(err)
	}
	if got, records := durability.RecordCacheSize(big); got != 0 || records != 0 {
		t.Fatalf("a record over the budget was cached: %d records, %d bytes", records, got)
	}
}

// TestRecordCacheRefusalsCheckTheStore: a transition refused on what the
// cache holds is decided again on the store, since another writer (a replica,
// or another goroutine of this process) may have moved the record on: a send
// begun elsewhere under a new token is marked sent with that token here.
func TestRecordCacheRefusalsCheckTheStore(t *testing.T) {
	ctx := context.Background()
	kv := memory.NewKv()
	scope := durability.Scope{Bot: "b", Connection: "default"}
	open := func() durability.Journals {
		j, err := durability.NewKvDurability(kv).Open(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	here, there := open(), open()
	lease := durability.Lease{Owner: "i1", Now: 1, Until: 2}
	// Here: journaled and begun (token 1), then its lease expires.
	if _, _, err := here.Outbox.Put(ctx, durability.OutboxPut{Key: "k", Provider: "web", Chat: "c", Payload: []byte(`{"text":"hi"}`)}, 1, &lease); err != nil {
		t.Fatal(err)
	}
	// There: the expired send is claimed, resolved to pending, begun again.
	claimed, err := there.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: durability.Lease{Owner: "i2", Now: 10, Until: 20}, Limit: 10})
	if err != nil || len(claimed) != 1 || !claimed[0].Ambiguous {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	if err := there.Outbox.ResolveAmbiguous(ctx, "k", claimed[0].Record.Token, durability.OutboxPending, 11); err != nil {
		t.Fatal(err)
	}
	rec, err := there.Outbox.Begin(ctx, "k", durability.Lease{Owner: "i2", Now: 12, Until: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	// Here the cache still holds token 1; the store has the new token.
	if err := here.Outbox.MarkSent(ctx, "k", rec.Token, "ref-1", 13); err != nil {
		t.Fatalf("MarkSent with the store's token refused on a stale cache: %v", err)
	}
	if err := here.Outbox.MarkSent(ctx, "k", 1, "ref-0", 14); !errors.Is(err, durability.ErrStaleLease) && !errors.Is(err, durability.ErrInvalidState) {
		t.Fatalf("MarkSent with the old token: %v, want refused", err)
	}
}
