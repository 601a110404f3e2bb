package durability_test

import (
	"bytes"
	"context"
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
		if err := j.Inbox.Complete(ctx, id, 1, nil, "mod", 2); err != nil {
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
