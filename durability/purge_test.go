package durability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
)

// kvWithInbox is a store whose inbox holds recs, each created (and ordered)
// at its CreatedAt.
func kvWithInbox(t *testing.T, recs []durability.InboxRecord) *memory.Kv {
	t.Helper()
	kv := memory.NewKv()
	g := scope.ID() + "/in/"
	writes := make([]durability.Write, len(recs))
	for i, r := range recs {
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		writes[i] = durability.Write{Key: g + r.ID, Value: v, Group: g, Order: &recs[i].CreatedAt}
	}
	if err := kv.Commit(context.Background(), writes); err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestPurgeMovesPastKeptRecords: retention purges a done record created
// after more than 20,000 records it keeps (dead letters here): successive
// purges read on from where the last one stopped instead of reading the
// same kept records each time.
func TestPurgeMovesPastKeptRecords(t *testing.T) {
	const n = 21_000
	var recs []durability.InboxRecord
	for i := 1; i <= n; i++ {
		recs = append(recs, durability.InboxRecord{ID: fmt.Sprintf("web:%d", i), State: durability.InboxDead, CreatedAt: int64(i), CompletedAt: int64(i)})
	}
	recs = append(recs, durability.InboxRecord{ID: "web:done", State: durability.InboxDone, CreatedAt: n + 1, CompletedAt: n + 1})
	ctx := context.Background()
	j, err := durability.NewKvDurability(kvWithInbox(t, recs)).Open(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	purged := 0
	for range 3 {
		k, err := j.Inbox.Purge(ctx, n+2)
		if err != nil {
			t.Fatal(err)
		}
		purged += k
	}
	if _, err := j.Inbox.Get(ctx, "web:done"); purged != 1 || err == nil {
		t.Fatalf("after three purges: %d purged, the done record behind %d dead ones: %v; want it purged", purged, n, err)
	}
}

// TestPurgeDeadReadsPastUnpurgeableOnes: PurgeDead deletes a dead letter
// completed before the cut even behind more than 20,000 dead letters
// completed after it.
func TestPurgeDeadReadsPastUnpurgeableOnes(t *testing.T) {
	const n = 21_000
	var recs []durability.InboxRecord
	for i := 1; i <= n; i++ {
		recs = append(recs, durability.InboxRecord{ID: fmt.Sprintf("web:%d", i), State: durability.InboxDead, CreatedAt: int64(i), CompletedAt: 10 * n})
	}
	recs = append(recs, durability.InboxRecord{ID: "web:old", State: durability.InboxDead, CreatedAt: n + 1, CompletedAt: n + 1})
	ctx := context.Background()
	j, err := durability.NewKvDurability(kvWithInbox(t, recs)).Open(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := j.Inbox.PurgeDead(ctx, n+2)
	if err != nil || len(gone) != 1 || gone[0] != "web:old" {
		t.Fatalf("PurgeDead: %v, %v; want [web:old]", gone, err)
	}
}
