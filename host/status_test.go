package host

import (
	"context"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/ops"
)

// TestStatusCountsLeases: each replica's leased records, by kind, with the
// expired ones and the earliest expiry; a session no replica leads yet
// shows no leader.
func TestStatusCountsLeases(t *testing.T) {
	ctx := context.Background()
	cfg := leaderConfig(t, "r1")
	backend := memory.New()
	j, err := backend.Open(ctx, Scope(cfg))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	lease := func(owner string, until int64) *durability.Lease {
		return &durability.Lease{Owner: owner, Now: now, Until: until}
	}
	for i, l := range []*durability.Lease{lease("r1", now+60_000), lease("r1", now+30_000), lease("r2", now-1_000), nil} {
		id := string(rune('a' + i))
		if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "wa", Chat: "c", Payload: []byte(`{}`)}, now, l); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "k", Provider: "wa", Chat: "c", Payload: []byte(`{}`)}, now, lease("r2", now+5_000)); err != nil {
		t.Fatal(err)
	}
	st, err := NewOperator(cfg, j, backend.(*durability.KvDurability).Kv()).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Provider != "wa" || st.Sessions[0].Leader != "" {
		t.Fatalf("sessions %+v, want wa without a leader", st.Sessions)
	}
	want := map[string]map[string]ops.HeldLeases{
		"r1": {"inbox": {Count: 2, Earliest: now + 30_000}},
		"r2": {"inbox": {Count: 1, Expired: 1, Earliest: now - 1_000}, "outbox": {Count: 1, Earliest: now + 5_000}},
	}
	if len(st.Replicas) != 2 {
		t.Fatalf("replicas %+v, want r1 and r2", st.Replicas)
	}
	for _, r := range st.Replicas {
		for kind, h := range want[r.Owner] {
			if r.Held[kind] != h {
				t.Errorf("%s holds %s %+v, want %+v", r.Owner, kind, r.Held[kind], h)
			}
		}
		if len(r.Held) != len(want[r.Owner]) {
			t.Errorf("%s holds %+v", r.Owner, r.Held)
		}
	}
}
