package durability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
)

var scope = durability.Scope{Bot: "b", Connection: "default"}

// oldStore is a store written by a botrun older than the state indexes: n
// done records, then a dead inbound record and a dead and an unknown send,
// none with a state index marker.
func oldStore(t *testing.T, n int) *memory.Kv {
	t.Helper()
	kv := memory.NewKv()
	p := scope.ID() + "/"
	var writes []durability.Write
	add := func(group, id string, rec any, created int64) {
		v, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, durability.Write{Key: group + id, Value: v, Group: group, Order: &created})
	}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("web:%d", i)
		add(p+"in/", id, durability.InboxRecord{ID: id, State: durability.InboxDone, CreatedAt: int64(i), CompletedAt: int64(i)}, int64(i))
	}
	at := int64(n + 1)
	add(p+"in/", "web:dead", durability.InboxRecord{ID: "web:dead", State: durability.InboxDead, CreatedAt: at, CompletedAt: at}, at)
	add(p+"out/", "k:dead", durability.OutboxRecord{Key: "k:dead", State: durability.OutboxDead, CreatedAt: at, CompletedAt: at}, at)
	add(p+"out/", "k:unknown", durability.OutboxRecord{Key: "k:unknown", State: durability.OutboxUnknown, CreatedAt: at, CompletedAt: at}, at)
	if err := kv.Commit(context.Background(), writes); err != nil {
		t.Fatal(err)
	}
	return kv
}

// wantListed fails t unless j lists oldStore's dead letters by state.
func wantListed(t *testing.T, j durability.Journals) {
	t.Helper()
	in, dead, unknown := listed(t, j)
	if !slices.Equal(in, []string{"web:dead"}) || !slices.Equal(dead, []string{"k:dead"}) || !slices.Equal(unknown, []string{"k:unknown"}) {
		t.Fatalf("dead inbound %v, dead sends %v, unknown sends %v; want each listed", in, dead, unknown)
	}
}

func listed(t *testing.T, j durability.Journals) (in, dead, unknown []string) {
	t.Helper()
	ctx := context.Background()
	ins, err := j.Inbox.List(ctx, durability.ListFilter{State: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ins {
		in = append(in, r.ID)
	}
	for _, c := range []struct {
		state string
		into  *[]string
	}{{"dead", &dead}, {"unknown", &unknown}} {
		outs, err := j.Outbox.List(ctx, durability.ListFilter{State: c.state})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range outs {
			*c.into = append(*c.into, r.Key)
		}
	}
	return in, dead, unknown
}

// TestOpenIndexesAnOlderStore: the dead letters of a store written before
// the state indexes are listed behind more than 20,000 other records once a
// botrun that keeps the indexes opened it, and still on the next open.
func TestOpenIndexesAnOlderStore(t *testing.T) {
	kv := oldStore(t, 21_000)
	for range 2 {
		j, err := durability.NewKvDurability(kv).Open(context.Background(), scope)
		if err != nil {
			t.Fatal(err)
		}
		wantListed(t, j)
	}
}

// refusingKv is a store that refuses every write (opened read-only).
type refusingKv struct{ *memory.Kv }

func (refusingKv) Commit(context.Context, []durability.Write) error {
	return fmt.Errorf("test: %w", durability.ErrReadOnly)
}

// flakyKv is a store whose writes fail (a transient error) while failing.
type flakyKv struct {
	*memory.Kv
	failing bool
}

func (k *flakyKv) Commit(ctx context.Context, ws []durability.Write) error {
	if k.failing {
		return errors.New("test: connection reset")
	}
	return k.Kv.Commit(ctx, ws)
}

// TestOpenFailsWhenIndexingFails: a write error other than a read-only
// refusal while indexing an older store fails the open, naming the
// migration, instead of leaving the scope unindexed (its dead letters past
// 20,000 records unlisted); the next open indexes it.
func TestOpenFailsWhenIndexingFails(t *testing.T) {
	kv := &flakyKv{Kv: oldStore(t, 21_000), failing: true}
	_, err := durability.NewKvDurability(kv).Open(context.Background(), scope)
	if err == nil || !strings.Contains(err.Error(), "connection reset") || !strings.Contains(err.Error(), "by state") {
		t.Fatalf("open with failing writes: err = %v, want the indexing error", err)
	}
	kv.failing = false
	j, err := durability.NewKvDurability(kv).Open(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	wantListed(t, j)
}

// TestOpenReadOnlyStoreListsByWalking: a store that refuses the index
// writes still opens, and its dead letters are listed by walking the
// creation index.
func TestOpenReadOnlyStoreListsByWalking(t *testing.T) {
	j, err := durability.NewKvDurability(refusingKv{oldStore(t, 10)}).Open(context.Background(), scope)
	if err != nil {
		t.Fatal(err)
	}
	wantListed(t, j)
}
