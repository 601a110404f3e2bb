package durabilitytest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/internal/scan"
)

// testBudget is the scan budget (scan.Budget: index entries one scan of a Kv
// journal reads) the state-list case runs under in make test; make soak
// (BOTRUN_SOAK=1) keeps the production one, 20,000.
const testBudget = 2000

// buried is how many settled records (done inbound, sent outbound) the
// state-list case puts before the records it lists: more than the index
// entries one scan reads (in pages of 256: budget rounded up to a page).
func buried() int {
	if os.Getenv("BOTRUN_SOAK") == "" {
		scan.SetBudget(testBudget)
	}
	return scan.Budget() + 1000
}

func runStateLists(t *testing.T, nb NewBackend) {
	t.Run("state lists reach the records behind more than a scan reads", func(t *testing.T) {
		j, b := open(t, nb)
		bury(t, b, j, buried())
		const at = 10_000_000 // after every buried record

		// Outbound first: the ambiguous claim that makes an unknown send
		// must not meet the others.
		l := lease("i1", at, at+10)
		putOut(t, j, "unknown:1", "c1", at+1, &l)
		claimed := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", at+20, at+1000)}))(t)
		if len(claimed) != 1 || !claimed[0].Ambiguous {
			t.Fatalf("ambiguous claim: %+v", claimed)
		}
		noErr(t, j.Outbox.ResolveAmbiguous(ctx, "unknown:1", claimed[0].Record.Token, durability.OutboxUnknown, at+30))
		for i, dead := range []bool{true, true, false} {
			key := fmt.Sprintf("dead:%d", i+1)
			if !dead {
				key = "failed:1"
			}
			l := lease("i1", at+2+int64(i), at+1000)
			rec := putOut(t, j, key, "c1", at+2+int64(i), &l)
			noErr(t, j.Outbox.MarkFailed(ctx, key, rec.Token, "refused", durability.FailOptions{Now: at + 40, Dead: dead, RetryAt: at + 500}))
		}
		if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "later:1", Provider: "web", Chat: "c1", Payload: []byte(`"x"`), NotBefore: 2 * at}, at+5, nil); err != nil {
			t.Fatal(err)
		}
		putOut(t, j, "pending:1", "c2", at+6, nil)

		putIn(t, j, "web:dead:1", "c1", at+1)
		putIn(t, j, "web:dead:2", "c2", at+2)
		putIn(t, j, "web:failed:1", "c1", at+3)
		putIn(t, j, "web:pending:1", "c1", at+4)
		for _, id := range []string{"web:dead:1", "web:dead:2", "web:failed:1"} {
			rec := check(j.Inbox.Claim(ctx, id, lease("i1", at+10, at+1000)))(t)
			noErr(t, j.Inbox.Fail(ctx, id, rec.Token, "trap", durability.FailOptions{Now: at + 20, Dead: id != "web:failed:1", RetryAt: at + 500}))
		}
		putIn(t, j, "web:leased:1", "c1", at+5)
		check(j.Inbox.Claim(ctx, "web:leased:1", lease("i1", at+30, at+1000)))(t)

		inbox := func(f durability.ListFilter) []string { return ids(check(j.Inbox.List(ctx, f))(t)) }
		outbox := func(f durability.ListFilter) []string {
			return keys(check(durability.ListShown(ctx, j.Outbox, f, at+100))(t))
		}
		for _, c := range []struct {
			what      string
			got, want []string
		}{
			{"inbox dead", inbox(durability.ListFilter{State: "dead"}), []string{"web:dead:1", "web:dead:2"}},
			{"inbox dead, limit 1", inbox(durability.ListFilter{State: "dead", Limit: 1}), []string{"web:dead:1"}},
			{"inbox dead since the second", inbox(durability.ListFilter{State: "dead", Since: at + 2}), []string{"web:dead:2"}},
			{"inbox dead in c2", inbox(durability.ListFilter{State: "dead", Chat: "c2"}), []string{"web:dead:2"}},
			{"inbox failed", inbox(durability.ListFilter{State: "failed"}), []string{"web:failed:1"}},
			{"inbox pending", inbox(durability.ListFilter{State: "pending"}), []string{"web:pending:1"}},
			{"inbox processing", inbox(durability.ListFilter{State: "processing"}), []string{"web:leased:1"}},
			{"outbox dead", outbox(durability.ListFilter{State: "dead"}), []string{"dead:1", "dead:2"}},
			{"outbox unknown", outbox(durability.ListFilter{State: "unknown"}), []string{"unknown:1"}},
			{"outbox failed", outbox(durability.ListFilter{State: "failed"}), []string{"failed:1"}},
			{"outbox scheduled", outbox(durability.ListFilter{State: "scheduled"}), []string{"later:1"}},
			{"outbox pending", outbox(durability.ListFilter{State: "pending"}), []string{"pending:1"}},
		} {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
			}
		}

		// Leaving the state leaves its list; coming back returns to it.
		noErr(t, j.Inbox.Replay(ctx, "web:dead:1", at+200))
		noErr(t, j.Outbox.Retry(ctx, "dead:1", at+200))
		if got := inbox(durability.ListFilter{State: "dead"}); !slices.Equal(got, []string{"web:dead:2"}) {
			t.Errorf("inbox dead after a replay = %v", got)
		}
		if got := inbox(durability.ListFilter{State: "pending"}); !slices.Equal(got, []string{"web:dead:1", "web:pending:1"}) {
			t.Errorf("inbox pending after a replay = %v", got)
		}
		if got := outbox(durability.ListFilter{State: "dead"}); !slices.Equal(got, []string{"dead:2"}) {
			t.Errorf("outbox dead after a retry = %v", got)
		}
		rec := check(j.Inbox.Claim(ctx, "web:dead:1", lease("i1", at+300, at+1000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:dead:1", rec.Token, "trap", durability.FailOptions{Now: at + 310, Dead: true}))
		if got := inbox(durability.ListFilter{State: "dead"}); !slices.Equal(got, []string{"web:dead:1", "web:dead:2"}) {
			t.Errorf("inbox dead after dying again = %v", got)
		}

		// The operator deletes dead letters: one, then the rest.
		wantErr(t, j.Inbox.Discard(ctx, "web:failed:1"), durability.ErrInvalidState, "discard of a failed record")
		noErr(t, j.Inbox.Discard(ctx, "web:dead:2"))
		_, err := j.Inbox.Get(ctx, "web:dead:2")
		wantErr(t, err, durability.ErrNotFound, "Get of a discarded record")
		if got := check(j.Inbox.PurgeDead(ctx, at+310))(t); len(got) != 0 {
			t.Errorf("purgeDead before the death: %v", got)
		}
		if got := check(j.Inbox.PurgeDead(ctx, at+311))(t); !slices.Equal(got, []string{"web:dead:1"}) {
			t.Errorf("inbox purgeDead = %v", got)
		}
		got := check(j.Outbox.PurgeDead(ctx, at+41))(t)
		slices.Sort(got)
		if !slices.Equal(got, []string{"dead:2", "unknown:1"}) {
			t.Errorf("outbox purgeDead = %v", got)
		}
		for _, c := range []struct {
			what      string
			got, want []string
		}{
			{"inbox dead", inbox(durability.ListFilter{State: "dead"}), nil},
			{"inbox failed", inbox(durability.ListFilter{State: "failed"}), []string{"web:failed:1"}},
			{"inbox pending", inbox(durability.ListFilter{State: "pending"}), []string{"web:pending:1"}},
			{"outbox dead", outbox(durability.ListFilter{State: "dead"}), nil},
			{"outbox unknown", outbox(durability.ListFilter{State: "unknown"}), nil},
			{"outbox failed", outbox(durability.ListFilter{State: "failed"}), []string{"failed:1"}},
			{"inbox done", inbox(durability.ListFilter{State: "done", Limit: 1}), []string{"web:old:1"}},
		} {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("%s after the purge = %v, want %v", c.what, c.got, c.want)
			}
		}
	})
}

// kvBackend is a Backend kept in a durability.Kv by durability.KvDurability.
type kvBackend interface{ Kv() durability.Kv }

// bury puts n done inbound records and n sent outbound records, created at
// 1 to n, in scope A: written straight into the Kv of a backend that keeps
// one (KvDurability's layout, 2,000 records a commit), else through the
// journals.
func bury(t *testing.T, b durability.Backend, j durability.Journals, n int) {
	t.Helper()
	kb, ok := b.(kvBackend)
	if !ok {
		for i := 1; i <= n; i++ {
			id, now := fmt.Sprintf("web:old:%d", i), int64(i)
			st, rec, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: "old", Payload: []byte(`{}`)}, now, &durability.Lease{Owner: "i0", Now: now, Until: now + 10})
			if err != nil || st != durability.Created {
				t.Fatalf("Put %s: %v %v", id, st, err)
			}
			noErr(t, j.Inbox.Complete(ctx, id, rec.Token, durability.Completion{Now: now}))
			l := lease("i0", now, now+10)
			out := putOut(t, j, id+":1", "old", now, &l)
			noErr(t, j.Outbox.MarkSent(ctx, id+":1", out.Token, "ref", now))
		}
		return
	}
	p := scopeA.ID() + "/"
	// The inbound and outbound records commit apart: a backend may keep
	// the two journals in stores that cannot commit together.
	var in, out []durability.Write
	add := func(writes *[]durability.Write, group, id string, rec any, created int64) {
		v, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		*writes = append(*writes, durability.Write{Key: group + id, Value: v, Group: group, Order: &created})
	}
	for i := 1; i <= n; i++ {
		id, now := fmt.Sprintf("web:old:%d", i), int64(i)
		add(&in, p+"in/", id, durability.InboxRecord{ID: id, Provider: "web", Chat: "old", Payload: []byte(`{}`), State: durability.InboxDone,
			Attempts: 1, Token: 1, CreatedAt: now, UpdatedAt: now, CompletedAt: now}, now)
		add(&out, p+"out/", id+":1", durability.OutboxRecord{Key: id + ":1", Provider: "web", Chat: "old", Payload: []byte(`"x"`), State: durability.OutboxSent,
			Attempts: 1, Token: 1, Ref: "ref", CreatedAt: now, UpdatedAt: now, CompletedAt: now}, now)
		if len(in) == 2000 || i == n {
			noErr(t, kb.Kv().Commit(ctx, in))
			noErr(t, kb.Kv().Commit(ctx, out))
			in, out = in[:0], out[:0]
		}
	}
}
