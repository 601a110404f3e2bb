// Package durabilitytest is the conformance suite every durability backend runs
// unchanged (Run); the crash harness the host's crash matrix drives is
// durability/crashpoint. It imports only durability and the standard library.
package durabilitytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/botrun/botrun/durability"
)

// NewBackend returns a fresh, empty backend for one subtest; the suite closes
// it.
type NewBackend func(t *testing.T) durability.Backend

var scopeA = durability.Scope{Tenant: "t", Environment: "test", Bot: "a", Connection: "default"}
var scopeB = durability.Scope{Tenant: "t", Environment: "test", Bot: "b", Connection: "default"}

func open(t *testing.T, nb NewBackend) (durability.Journals, durability.Backend) {
	t.Helper()
	b := nb(t)
	t.Cleanup(func() { b.Close() })
	j, err := b.Open(context.Background(), scopeA)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, b
}

// check turns a (value, error) call into a value, failing the test on error:
// check(j.Inbox.Get(ctx, id))(t).
func check[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func lease(owner string, now, until int64) durability.Lease {
	return durability.Lease{Owner: owner, Now: now, Until: until}
}

var ctx = context.Background()

// Option adjusts Run to one kind of backend.
type Option int

// WholeRewrites marks a backend that rewrites its whole state on every
// commit (a snapshot file without an append log). Its state-list case, about
// 30 commits over 42,000 records, then runs only under make soak
// (BOTRUN_SOAK=1): there it costs minutes under -race, and the index walks
// it checks are the Kv layer's, which the same store's append-log variant
// runs in every make test.
const WholeRewrites Option = 1

// Run runs the whole conformance suite against backends made by nb.
func Run(t *testing.T, nb NewBackend, opts ...Option) {
	wholeRewrites := slices.Contains(opts, WholeRewrites)
	t.Run("inbox", func(t *testing.T) { runInbox(t, nb) })
	t.Run("outbox", func(t *testing.T) { runOutbox(t, nb) })
	t.Run("scope", func(t *testing.T) { runScope(t, nb) })
	t.Run("concurrency", func(t *testing.T) { runConcurrency(t, nb) })
	t.Run("chat order", func(t *testing.T) { runChatOrder(t, nb) })
	t.Run("state lists", func(t *testing.T) {
		if wholeRewrites && os.Getenv("BOTRUN_SOAK") == "" {
			t.Skip("a backend that rewrites its whole state on every commit runs the state lists under make soak only (BOTRUN_SOAK=1)")
		}
		runStateLists(t, nb)
	})
}

func putIn(t *testing.T, j durability.Journals, id, chat string, now int64) {
	t.Helper()
	st, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: chat, Payload: []byte(`{"id":"` + id + `"}`)}, now, nil)
	if err != nil || st != durability.Created {
		t.Fatalf("Put %s: %v %v", id, st, err)
	}
}

func ids(recs []durability.InboxRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func keys(recs []durability.OutboxRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Key)
	}
	return out
}

func runInbox(t *testing.T, nb NewBackend) {
	t.Run("put is insert-if-absent and counts duplicates", func(t *testing.T) {
		j, _ := open(t, nb)
		st, rec, err := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Provider: "web", Chat: "c1", Payload: []byte("p1")}, 100, nil)
		if err != nil || st != durability.Created || rec.State != durability.InboxPending || rec.CreatedAt != 100 || string(rec.Payload) != "p1" {
			t.Fatalf("first put: %v %+v %v", st, rec, err)
		}
		st, rec, err = j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Provider: "web", Chat: "c1", Payload: []byte("other")}, 200, nil)
		if err != nil || st != durability.Exists || rec.Duplicates != 1 || string(rec.Payload) != "p1" {
			t.Fatalf("second put: %v %+v %v", st, rec, err)
		}
		j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Chat: "c1"}, 300, nil)
		if got := check(j.Inbox.Get(ctx, "web:1"))(t); got.Duplicates != 2 || got.State != durability.InboxPending {
			t.Fatalf("after third put: %+v", got)
		}
		_, err = j.Inbox.Get(ctx, "web:404")
		wantErr(t, err, durability.ErrNotFound, "Get missing")
	})

	t.Run("put with a lease creates the record claimed", func(t *testing.T) {
		j, _ := open(t, nb)
		l := lease("i1", 100, 1100)
		st, rec, err := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Chat: "c1"}, 100, &l)
		if err != nil || st != durability.Created || rec.State != durability.InboxProcessing || rec.Token != 1 || rec.Attempts != 1 || rec.Owner != "i1" {
			t.Fatalf("put with lease: %v %+v %v", st, rec, err)
		}
		st, rec, _ = j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Chat: "c1"}, 200, &l)
		if st != durability.Exists || rec.Token != 1 || rec.Duplicates != 1 {
			t.Fatalf("second put with lease: %v %+v", st, rec)
		}
		noErr(t, j.Inbox.Complete(ctx, "web:1", 1, durability.Completion{Now: 300}))
	})

	t.Run("complete with sends lands everything in one write", func(t *testing.T) {
		j, _ := open(t, nb)
		cs, ok := j.Inbox.(durability.CompleteSender)
		if !ok {
			t.Skip("this backend does not offer CompleteWithSent")
		}
		l := lease("i1", 100, 1100)
		j.Inbox.Put(ctx, durability.InboxPut{ID: "web:1", Chat: "c1"}, 100, &l)
		putOut(t, j, "web:1:1", "c1", 110, &l)
		putOut(t, j, "web:1:2", "c1", 120, &l)
		err := cs.CompleteWithSent(ctx, "web:1", 1, durability.Completion{Effects: []durability.StateWrite{{Key: "k", Value: []byte("v")}}, Module: "m", Now: 130}, []durability.SentMark{{Key: "web:1:1", Token: 1, Ref: "r1", Now: 125}, {Key: "web:1:2", Token: 1, Ref: "r2", Now: 126}})
		noErr(t, err)
		if r := check(j.Inbox.Get(ctx, "web:1"))(t); r.State != durability.InboxDone {
			t.Fatalf("inbox %+v", r)
		}
		if o := check(j.Outbox.Get(ctx, "web:1:2"))(t); o.State != durability.OutboxSent || o.Ref != "r2" || o.CompletedAt != 126 {
			t.Fatalf("outbox %+v", o)
		}
		if v, ok, _ := j.State.Get(ctx, "k"); !ok || string(v) != "v" {
			t.Fatal("state not written")
		}
		// A stale mark: nothing lands.
		j.Inbox.Put(ctx, durability.InboxPut{ID: "web:2", Chat: "c1"}, 200, &l)
		putOut(t, j, "web:2:1", "c1", 210, &l)
		err = cs.CompleteWithSent(ctx, "web:2", 1, durability.Completion{Module: "m", Now: 230}, []durability.SentMark{{Key: "web:2:1", Token: 9, Ref: "x", Now: 220}})
		wantErr(t, err, durability.ErrStaleLease, "stale mark")
		if r := check(j.Inbox.Get(ctx, "web:2"))(t); r.State != durability.InboxProcessing {
			t.Fatalf("a refused combined completion changed the inbox: %+v", r)
		}
		if o := check(j.Outbox.Get(ctx, "web:2:1"))(t); o.State != durability.OutboxSending {
			t.Fatalf("a refused combined completion changed the outbox: %+v", o)
		}
	})

	t.Run("claim leases under a fresh fencing token", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 110, 1110)))(t)
		if rec.State != durability.InboxProcessing || rec.Token != 1 || rec.Attempts != 1 || rec.Owner != "i1" || rec.LeaseUntil != 1110 || rec.LeasedAt != 110 {
			t.Fatalf("claim: %+v", rec)
		}
		_, err := j.Inbox.Claim(ctx, "web:1", lease("i2", 500, 1500))
		wantErr(t, err, durability.ErrNotClaimable, "claim of a live lease")
		_, err = j.Inbox.Claim(ctx, "web:404", lease("i2", 500, 1500))
		wantErr(t, err, durability.ErrNotFound, "claim of a missing record")
		// The lease expires: another owner claims it with token 2.
		rec = check(j.Inbox.Claim(ctx, "web:1", lease("i2", 1110, 2110)))(t)
		if rec.Token != 2 || rec.Attempts != 2 || rec.Owner != "i2" {
			t.Fatalf("second claim: %+v", rec)
		}
		// The first owner is fenced off everywhere.
		wantErr(t, j.Inbox.Complete(ctx, "web:1", 1, durability.Completion{Now: 1200}), durability.ErrStaleLease, "late complete")
		wantErr(t, j.Inbox.Extend(ctx, "web:1", 1, 5000), durability.ErrStaleLease, "late extend")
		wantErr(t, j.Inbox.Fail(ctx, "web:1", 1, "x", durability.FailOptions{Now: 1200, RetryAt: 1300}), durability.ErrStaleLease, "late fail")
		if got := check(j.Inbox.Get(ctx, "web:1"))(t); got.State != durability.InboxProcessing || got.Token != 2 {
			t.Fatalf("stale calls changed the record: %+v", got)
		}
	})

	t.Run("extend keeps the lease", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 200)))(t)
		if err := j.Inbox.Extend(ctx, "web:1", rec.Token, 900); err != nil {
			t.Fatal(err)
		}
		_, err := j.Inbox.Claim(ctx, "web:1", lease("i2", 500, 1500))
		wantErr(t, err, durability.ErrNotClaimable, "claim of an extended lease")
		if got := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 500, 1500), PendingBefore: 1000}))(t); len(got) != 0 {
			t.Fatalf("ClaimDue took an extended lease: %v", ids(got))
		}
	})

	t.Run("complete lands the state writes atomically", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 1000)))(t)
		effects := []durability.StateWrite{{Key: "chat/c1/step", Value: []byte("2")}, {Key: "chat/c1/name", Value: []byte("ana")}}
		if err := j.Inbox.Complete(ctx, "web:1", rec.Token, durability.Completion{Effects: effects, Module: "digest1", Now: 150}); err != nil {
			t.Fatal(err)
		}
		got := check(j.Inbox.Get(ctx, "web:1"))(t)
		if got.State != durability.InboxDone || got.CompletedAt != 150 || got.Module != "digest1" {
			t.Fatalf("after complete: %+v", got)
		}
		v, ok, err := j.State.Get(ctx, "chat/c1/step")
		if err != nil || !ok || string(v) != "2" {
			t.Fatalf("state: %q %v %v", v, ok, err)
		}
		wantErr(t, j.Inbox.Complete(ctx, "web:1", rec.Token, durability.Completion{Now: 160}), durability.ErrStaleLease, "second complete")
		_, err = j.Inbox.Claim(ctx, "web:1", lease("i1", 200, 1000))
		wantErr(t, err, durability.ErrNotClaimable, "claim of a done record")
		// A later record deletes a key.
		putIn(t, j, "web:2", "c1", 300)
		rec = check(j.Inbox.Claim(ctx, "web:2", lease("i1", 300, 1000)))(t)
		noErr(t, j.Inbox.Complete(ctx, "web:2", rec.Token, durability.Completion{Effects: []durability.StateWrite{{Key: "chat/c1/step", Delete: true}}, Now: 310}))
		if _, ok, _ := j.State.Get(ctx, "chat/c1/step"); ok {
			t.Fatal("deleted state key still there")
		}
		if v, ok, _ := j.State.Get(ctx, "chat/c1/name"); !ok || string(v) != "ana" {
			t.Fatal("untouched state key lost")
		}
		if _, ok, err := j.State.Get(ctx, "nope"); ok || err != nil {
			t.Fatalf("missing state key: %v %v", ok, err)
		}
	})

	t.Run("inputs ride the completion and the failure, and go with purge", func(t *testing.T) {
		j, _ := open(t, nb)
		inputs := []byte(`{"v":1,"state":[{"k":"step","v":"Mg==","ok":true}]}`)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 1000)))(t)
		noErr(t, j.Inbox.Complete(ctx, "web:1", rec.Token, durability.Completion{Module: "m", Inputs: inputs, Now: 150}))
		if got := check(j.Inbox.Get(ctx, "web:1"))(t); string(got.Inputs) != string(inputs) {
			t.Fatalf("inputs after complete: %q, want %q", got.Inputs, inputs)
		}
		if cs, ok := j.Inbox.(durability.CompleteSender); ok {
			l := lease("i1", 160, 1000)
			j.Inbox.Put(ctx, durability.InboxPut{ID: "web:2", Chat: "c2"}, 160, &l)
			putOut(t, j, "web:2:1", "c2", 165, &l)
			noErr(t, cs.CompleteWithSent(ctx, "web:2", 1, durability.Completion{Inputs: []byte(`{"v":1}`), Now: 170}, []durability.SentMark{{Key: "web:2:1", Token: 1, Ref: "r", Now: 168}}))
			if got := check(j.Inbox.Get(ctx, "web:2"))(t); string(got.Inputs) != `{"v":1}` {
				t.Fatalf("inputs after complete with sends: %q", got.Inputs)
			}
		}
		// The failing attempt's inputs stay with a dead record; a failure
		// without inputs (dead past max_attempts, no attempt run) keeps the
		// earlier attempt's.
		putIn(t, j, "web:3", "c3", 180)
		rec = check(j.Inbox.Claim(ctx, "web:3", lease("i1", 180, 1000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:3", rec.Token, "trap", durability.FailOptions{Now: 190, RetryAt: 191, Inputs: inputs}))
		rec = check(j.Inbox.Claim(ctx, "web:3", lease("i1", 192, 1000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:3", rec.Token, "too many attempts", durability.FailOptions{Now: 195, Dead: true}))
		if got := check(j.Inbox.Get(ctx, "web:3"))(t); string(got.Inputs) != string(inputs) {
			t.Fatalf("inputs after a dead failure without inputs: %q", got.Inputs)
		}
		if n := check(j.Inbox.Purge(ctx, 500))(t); n < 1 {
			t.Fatalf("purge deleted %d records", n)
		}
		_, err := j.Inbox.Get(ctx, "web:1")
		wantErr(t, err, durability.ErrNotFound, "purged record (and its inputs)")
		for _, r := range check(j.Inbox.List(ctx, durability.ListFilter{}))(t) {
			if r.State == durability.InboxDone {
				t.Fatalf("a done record survived the purge: %+v", r)
			}
		}
	})

	t.Run("a failed completion commits no state", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 200)))(t)
		check(j.Inbox.Claim(ctx, "web:1", lease("i2", 300, 1000)))(t)
		err := j.Inbox.Complete(ctx, "web:1", 1, durability.Completion{Effects: []durability.StateWrite{{Key: "k", Value: []byte("v")}}, Now: 310})
		wantErr(t, err, durability.ErrStaleLease, "stale complete")
		if _, ok, _ := j.State.Get(ctx, "k"); ok {
			t.Fatal("a refused completion wrote state")
		}
	})

	t.Run("fail schedules a retry or goes dead", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 1000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:1", rec.Token, "trap", durability.FailOptions{Now: 150, RetryAt: 500}))
		got := check(j.Inbox.Get(ctx, "web:1"))(t)
		if got.State != durability.InboxFailed || got.RetryAt != 500 || got.Error != "trap" || got.Attempts != 1 {
			t.Fatalf("after fail: %+v", got)
		}
		if due := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 499, 1499)}))(t); len(due) != 0 {
			t.Fatalf("claimed before retry_at: %v", ids(due))
		}
		due := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 500, 1500)}))(t)
		if len(due) != 1 || due[0].Token != 2 || due[0].Attempts != 2 {
			t.Fatalf("due retry: %+v", due)
		}
		noErr(t, j.Inbox.Fail(ctx, "web:1", 2, "trap again", durability.FailOptions{Now: 600, Dead: true}))
		got = check(j.Inbox.Get(ctx, "web:1"))(t)
		if got.State != durability.InboxDead || got.CompletedAt != 600 {
			t.Fatalf("after dead: %+v", got)
		}
		if due := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 1e9, 2e9), PendingBefore: 1e9}))(t); len(due) != 0 {
			t.Fatalf("claimed a dead record: %v", ids(due))
		}
	})

	t.Run("fail with refund gives the attempt back", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 1000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:1", rec.Token, "store down", durability.FailOptions{Now: 110, RetryAt: 120, Refund: true}))
		if got := check(j.Inbox.Get(ctx, "web:1"))(t); got.Attempts != 0 {
			t.Fatalf("attempts after refund = %d", got.Attempts)
		}
	})

	t.Run("claimDue takes due records oldest first", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:c", "c1", 300) // created last
		putIn(t, j, "web:a", "c1", 100)
		putIn(t, j, "web:b", "c2", 200)
		putIn(t, j, "web:new", "c3", 1000) // admitted by this process after boot
		// web:b expired processing, web:a failed and due, web:c pending.
		rb := check(j.Inbox.Claim(ctx, "web:b", lease("dead", 200, 400)))(t)
		ra := check(j.Inbox.Claim(ctx, "web:a", lease("i1", 100, 5000)))(t)
		noErr(t, j.Inbox.Fail(ctx, "web:a", ra.Token, "x", durability.FailOptions{Now: 150, RetryAt: 450}))
		got := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 500, 1500), PendingBefore: 900, Limit: 2}))(t)
		if !slices.Equal(ids(got), []string{"web:a", "web:b"}) {
			t.Fatalf("first claim = %v, want [web:a web:b]", ids(got))
		}
		if got[1].Token != rb.Token+1 || got[1].Owner != "i2" || got[1].State != durability.InboxProcessing {
			t.Fatalf("claimed record: %+v", got[1])
		}
		got = check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 500, 1500), PendingBefore: 900}))(t)
		if !slices.Equal(ids(got), []string{"web:c"}) {
			t.Fatalf("second claim = %v, want [web:c] (web:new is after PendingBefore)", ids(got))
		}
	})

	t.Run("reclaim recovers an earlier incarnation's leases only", func(t *testing.T) {
		j, _ := open(t, nb)
		for i, id := range []string{"web:old", "web:mine-now", "web:other"} {
			putIn(t, j, id, "c1", int64(100+i))
		}
		check(j.Inbox.Claim(ctx, "web:old", lease("host/bot/default", 100, 60100)))(t)       // dead incarnation
		check(j.Inbox.Claim(ctx, "web:mine-now", lease("host/bot/default", 1000, 61000)))(t) // after boot
		check(j.Inbox.Claim(ctx, "web:other", lease("replica-2", 100, 60100)))(t)
		got := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{
			Lease: lease("host/bot/default", 1000, 61000), Reclaim: &durability.Reclaim{Owner: "host/bot/default", Before: 900},
		}))(t)
		if !slices.Equal(ids(got), []string{"web:old"}) || got[0].Token != 2 {
			t.Fatalf("reclaimed %v, want [web:old] with token 2", ids(got))
		}
	})

	t.Run("list filters by state and chat", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:3", "c2", 300)
		putIn(t, j, "web:1", "c1", 100)
		putIn(t, j, "web:2", "c1", 200)
		rec := check(j.Inbox.Claim(ctx, "web:2", lease("i1", 200, 1000)))(t)
		noErr(t, j.Inbox.Complete(ctx, "web:2", rec.Token, durability.Completion{Now: 250}))
		all := check(j.Inbox.List(ctx, durability.ListFilter{}))(t)
		if !slices.Equal(ids(all), []string{"web:1", "web:2", "web:3"}) {
			t.Fatalf("list all = %v", ids(all))
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{State: "pending"}))(t); !slices.Equal(ids(got), []string{"web:1", "web:3"}) {
			t.Fatalf("list pending = %v", ids(got))
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{Chat: "c1"}))(t); !slices.Equal(ids(got), []string{"web:1", "web:2"}) {
			t.Fatalf("list c1 = %v", ids(got))
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{Limit: 1}))(t); !slices.Equal(ids(got), []string{"web:1"}) {
			t.Fatalf("list limit 1 = %v", ids(got))
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{State: "dead"}))(t); len(got) != 0 {
			t.Fatalf("list dead = %v", ids(got))
		}
		putIn(t, j, "web:4", "c1", 200)
		if got := check(j.Inbox.List(ctx, durability.ListFilter{Since: 200}))(t); !slices.Equal(ids(got), []string{"web:2", "web:4", "web:3"}) {
			t.Fatalf("list since 200 = %v, want the records created at 200 on", ids(got))
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{Since: 201, Chat: "c2"}))(t); !slices.Equal(ids(got), []string{"web:3"}) {
			t.Fatalf("list since 201 in c2 = %v", ids(got))
		}
		putOut(t, j, "web:1:1", "c1", 100, nil)
		putOut(t, j, "web:3:1", "c2", 300, nil)
		if got := check(j.Outbox.List(ctx, durability.ListFilter{Since: 101}))(t); len(got) != 1 || got[0].Key != "web:3:1" {
			t.Fatalf("outbox list since 101 = %+v", got)
		}
	})

	t.Run("replay re-queues done and dead records", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 100)
		rec := check(j.Inbox.Claim(ctx, "web:1", lease("i1", 100, 1000)))(t)
		wantErr(t, j.Inbox.Replay(ctx, "web:1", 150), durability.ErrInvalidState, "replay in flight")
		noErr(t, j.Inbox.Fail(ctx, "web:1", rec.Token, "x", durability.FailOptions{Now: 150, Dead: true}))
		noErr(t, j.Inbox.Replay(ctx, "web:1", 200))
		got := check(j.Inbox.Get(ctx, "web:1"))(t)
		if got.State != durability.InboxPending || got.Attempts != 0 || got.CompletedAt != 0 {
			t.Fatalf("after replay: %+v", got)
		}
		due := check(j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 300, 1300), PendingBefore: 300}))(t)
		if len(due) != 1 || due[0].Token != rec.Token+1 {
			t.Fatalf("replayed record not claimable: %+v", due)
		}
		wantErr(t, j.Inbox.Replay(ctx, "web:404", 200), durability.ErrNotFound, "replay missing")
	})

	t.Run("purge deletes done records completed before, never the DLQ", func(t *testing.T) {
		j, _ := open(t, nb)
		for i, id := range []string{"web:done-old", "web:dead-old", "web:done-new", "web:pending"} {
			putIn(t, j, id, "c1", int64(100+i))
		}
		settle := func(id string, at int64, dead bool) {
			rec := check(j.Inbox.Claim(ctx, id, lease("i1", at, at+1000)))(t)
			if dead {
				noErr(t, j.Inbox.Fail(ctx, id, rec.Token, "x", durability.FailOptions{Now: at, Dead: true}))
			} else {
				noErr(t, j.Inbox.Complete(ctx, id, rec.Token, durability.Completion{Now: at}))
			}
		}
		settle("web:done-old", 200, false)
		settle("web:dead-old", 210, true)
		settle("web:done-new", 900, false)
		if n := check(j.Inbox.Purge(ctx, 500))(t); n != 1 {
			t.Fatalf("purged %d, want 1 (the dead letter stays)", n)
		}
		if got := check(j.Inbox.List(ctx, durability.ListFilter{}))(t); !slices.Equal(ids(got), []string{"web:dead-old", "web:done-new", "web:pending"}) {
			t.Fatalf("left %v", ids(got))
		}
		// A purged id is new again.
		if st, _, _ := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:done-old", Chat: "c1"}, 1000, nil); st != durability.Created {
			t.Fatalf("put after purge: %v", st)
		}
	})
}

func putOut(t *testing.T, j durability.Journals, key, chat string, now int64, l *durability.Lease) durability.OutboxRecord {
	t.Helper()
	st, rec, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: key, Provider: "web", Chat: chat, Payload: []byte(`"` + key + `"`), Fingerprint: "fp-" + key}, now, l)
	if err != nil || st != durability.Created {
		t.Fatalf("Put %s: %v %v", key, st, err)
	}
	return rec
}

func runOutbox(t *testing.T, nb NewBackend) {
	t.Run("put is insert-if-absent; with a lease it is begun", func(t *testing.T) {
		j, _ := open(t, nb)
		rec := putOut(t, j, "k1", "c1", 100, nil)
		if rec.State != durability.OutboxPending || rec.Attempts != 0 || rec.Token != 0 || rec.RetryAt != 100 {
			t.Fatalf("plain put: %+v", rec)
		}
		st, again, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "k1", Chat: "other", Payload: []byte("x")}, 200, nil)
		if err != nil || st != durability.Exists || again.Chat != "c1" || string(again.Payload) != `"k1"` || again.Fingerprint != "fp-k1" {
			t.Fatalf("second put: %v %+v %v", st, again, err)
		}
		l := lease("i1", 300, 1300)
		rec = putOut(t, j, "k2", "c1", 300, &l)
		if rec.State != durability.OutboxSending || rec.Token != 1 || rec.Attempts != 1 || rec.Owner != "i1" || rec.LeaseUntil != 1300 {
			t.Fatalf("put with lease: %+v", rec)
		}
		st, _, _ = j.Outbox.Put(ctx, durability.OutboxPut{Key: "k2"}, 400, &l)
		if st != durability.Exists {
			t.Fatalf("put with lease of an existing key: %v", st)
		}
	})

	t.Run("markSentWith lands the channel's writes with the mark, or nothing", func(t *testing.T) {
		j, b := open(t, nb)
		sw, ok := j.Outbox.(durability.SentWriter)
		kvb, hasKv := b.(interface{ Kv() durability.Kv })
		if !ok || !hasKv {
			t.Skip("the backend has no SentWriter outbox or no Kv")
		}
		kv := kvb.Kv()
		// The channel's keys live in the scope, as webchat's transcript
		// does (a cluster commits one scope's keys together).
		dt := scopeA.ID() + "/dt/"
		putOut(t, j, "k1", "c1", 100, nil)
		rec := check(j.Outbox.Begin(ctx, "k1", lease("i1", 110, 1110)))(t)
		noErr(t, kv.Commit(ctx, []durability.Write{{Key: dt + "seq", Version: durability.AnyVersion, Value: []byte("1")}}))
		_, v, err := kv.Get(ctx, dt+"seq")
		noErr(t, err)
		// A stale token: deliver never runs, nothing lands.
		_, err = sw.MarkSentWith(ctx, "k1", rec.Token+1, 120, func(context.Context, bool) (string, []durability.Write, error) {
			t.Fatal("deliver ran under a stale token")
			return "", nil, nil
		})
		wantErr(t, err, durability.ErrStaleLease, "markSentWith with a stale token")
		// The first delivery conflicts (its version is stale): it runs again
		// with retry set, and only the second one lands, with the mark.
		var calls []bool
		ref, err := sw.MarkSentWith(ctx, "k1", rec.Token, 130, func(_ context.Context, retry bool) (string, []durability.Write, error) {
			calls = append(calls, retry)
			version := v + 100
			if retry {
				version = v
			}
			return fmt.Sprintf("ref-%d", len(calls)), []durability.Write{
				{Key: dt + "seq", Version: version, Value: []byte("2")},
				{Key: dt + "entry", Version: durability.AnyVersion, Value: []byte("hi")},
			}, nil
		})
		if err != nil || ref != "ref-2" || len(calls) != 2 || calls[0] || !calls[1] {
			t.Fatalf("markSentWith: ref %q, err %v, calls %v", ref, err, calls)
		}
		got := check(j.Outbox.Get(ctx, "k1"))(t)
		if got.State != durability.OutboxSent || got.Ref != "ref-2" || got.CompletedAt != 130 {
			t.Fatalf("record after markSentWith: %+v", got)
		}
		for key, want := range map[string]string{dt + "seq": "2", dt + "entry": "hi"} {
			if val, _, err := kv.Get(ctx, key); err != nil || string(val) != want {
				t.Fatalf("%s = %q, %v; want %q", key, val, err, want)
			}
		}
		// A sent record cannot be marked again: its writes never land.
		_, err = sw.MarkSentWith(ctx, "k1", rec.Token, 140, func(context.Context, bool) (string, []durability.Write, error) {
			return "ref-3", []durability.Write{{Key: dt + "again", Version: durability.AnyVersion, Value: []byte("x")}}, nil
		})
		wantErr(t, err, durability.ErrStaleLease, "markSentWith of a sent record")
		if _, ver, _ := kv.Get(ctx, dt+"again"); ver != 0 {
			t.Fatal("the writes of a refused markSentWith landed")
		}
	})

	t.Run("begin, markSent and fencing", func(t *testing.T) {
		j, _ := open(t, nb)
		putOut(t, j, "k1", "c1", 100, nil)
		rec := check(j.Outbox.Begin(ctx, "k1", lease("i1", 110, 1110)))(t)
		if rec.State != durability.OutboxSending || rec.Token != 1 || rec.Attempts != 1 {
			t.Fatalf("begin: %+v", rec)
		}
		_, err := j.Outbox.Begin(ctx, "k1", lease("i1", 120, 1120))
		wantErr(t, err, durability.ErrNotClaimable, "begin of a sending record")
		_, err = j.Outbox.Begin(ctx, "nope", lease("i1", 120, 1120))
		wantErr(t, err, durability.ErrNotFound, "begin of a missing record")
		wantErr(t, j.Outbox.MarkSent(ctx, "k1", 7, "ref", 130), durability.ErrStaleLease, "markSent with a wrong token")
		noErr(t, j.Outbox.Extend(ctx, "k1", 1, 5000))
		if got := check(j.Outbox.Get(ctx, "k1"))(t); got.LeaseUntil != 5000 {
			t.Fatalf("extend: %+v", got)
		}
		noErr(t, j.Outbox.MarkSent(ctx, "k1", 1, "msg-9", 140))
		got := check(j.Outbox.Get(ctx, "k1"))(t)
		if got.State != durability.OutboxSent || got.Ref != "msg-9" || got.CompletedAt != 140 {
			t.Fatalf("after markSent: %+v", got)
		}
		wantErr(t, j.Outbox.MarkSent(ctx, "k1", 1, "again", 150), durability.ErrStaleLease, "second markSent")
		wantErr(t, j.Outbox.Extend(ctx, "k1", 1, 9000), durability.ErrStaleLease, "extend after sent")
		_, err = j.Outbox.Begin(ctx, "k1", lease("i1", 160, 1160))
		wantErr(t, err, durability.ErrNotClaimable, "begin of a sent record")
		_, err = j.Outbox.Get(ctx, "nope")
		wantErr(t, err, durability.ErrNotFound, "get missing")
	})

	t.Run("markFailed retries, dies, and refunds", func(t *testing.T) {
		j, _ := open(t, nb)
		l := lease("i1", 100, 1100)
		putOut(t, j, "k1", "c1", 100, &l)
		noErr(t, j.Outbox.MarkFailed(ctx, "k1", 1, "503", durability.FailOptions{Now: 110, RetryAt: 600}))
		got := check(j.Outbox.Get(ctx, "k1"))(t)
		if got.State != durability.OutboxFailed || got.RetryAt != 600 || got.Error != "503" || got.Attempts != 1 {
			t.Fatalf("after markFailed: %+v", got)
		}
		if due := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 599, 1599)}))(t); len(due) != 0 {
			t.Fatalf("claimed before retry_at: %+v", due)
		}
		// Begin ignores retry_at: an inline retry may go early.
		rec := check(j.Outbox.Begin(ctx, "k1", lease("i1", 200, 1200)))(t)
		noErr(t, j.Outbox.MarkFailed(ctx, "k1", rec.Token, "waiting behind k0", durability.FailOptions{Now: 210, RetryAt: 300, Refund: true}))
		if got := check(j.Outbox.Get(ctx, "k1"))(t); got.Attempts != 1 {
			t.Fatalf("attempts after a refunded claim = %d, want 1", got.Attempts)
		}
		rec = check(j.Outbox.Begin(ctx, "k1", lease("i1", 400, 1400)))(t)
		noErr(t, j.Outbox.MarkFailed(ctx, "k1", rec.Token, "blocked", durability.FailOptions{Now: 410, Dead: true}))
		got = check(j.Outbox.Get(ctx, "k1"))(t)
		if got.State != durability.OutboxDead || got.CompletedAt != 410 || got.Attempts != 2 {
			t.Fatalf("after dead: %+v", got)
		}
	})

	t.Run("claimDue takes due records and marks expired sends ambiguous", func(t *testing.T) {
		j, _ := open(t, nb)
		putOut(t, j, "pending-late", "c1", 300, nil)
		putOut(t, j, "pending", "c1", 100, nil)
		l := lease("dead", 150, 400)
		putOut(t, j, "expired", "c2", 150, &l)
		l2 := lease("live", 160, 5000)
		putOut(t, j, "live", "c2", 160, &l2)
		l3 := lease("i1", 170, 1170)
		putOut(t, j, "failed", "c3", 170, &l3)
		noErr(t, j.Outbox.MarkFailed(ctx, "failed", 1, "x", durability.FailOptions{Now: 180, RetryAt: 450}))
		got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 500, 1500)}))(t)
		var order []string
		for _, c := range got {
			order = append(order, fmt.Sprintf("%s/%v", c.Record.Key, c.Ambiguous))
			if c.Record.State != durability.OutboxSending || c.Record.Owner != "i2" {
				t.Fatalf("claimed record not sending for i2: %+v", c.Record)
			}
		}
		if !slices.Equal(order, []string{"pending/false", "expired/true", "failed/false", "pending-late/false"}) {
			t.Fatalf("claimed %v", order)
		}
		exp := got[1].Record
		if exp.Token != 2 || exp.Attempts != 1 {
			t.Fatalf("ambiguous claim token/attempts = %d/%d, want 2/1 (it made no call)", exp.Token, exp.Attempts)
		}
		if got[0].Record.Attempts != 1 {
			t.Fatalf("a claim of a pending record charges an attempt: %+v", got[0].Record)
		}
		wantErr(t, j.Outbox.MarkSent(ctx, "expired", 1, "late", 510), durability.ErrStaleLease, "late markSent of the dead owner")
		if more := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 600, 1600), Limit: 10}))(t); len(more) != 0 {
			t.Fatalf("claimed twice: %+v", more)
		}
	})

	t.Run("claimDue limit and reclaim", func(t *testing.T) {
		j, _ := open(t, nb)
		for i := range 5 {
			putOut(t, j, fmt.Sprint("k", i), "c1", int64(100+i), nil)
		}
		if got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i1", 200, 90000), Limit: 3}))(t); len(got) != 3 || got[0].Record.Key != "k0" {
			t.Fatalf("limit 3: %+v", got)
		}
		l := lease("me", 100, 90000)
		putOut(t, j, "mine-before-boot", "c1", 100, &l)
		l2 := lease("me", 2000, 90000)
		putOut(t, j, "mine-after-boot", "c1", 2000, &l2)
		got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("me", 2100, 3100), Limit: 10, Reclaim: &durability.Reclaim{Owner: "me", Before: 1500}}))(t)
		var claimed []string
		for _, c := range got {
			claimed = append(claimed, fmt.Sprintf("%s/%v", c.Record.Key, c.Ambiguous))
		}
		if !slices.Equal(claimed, []string{"mine-before-boot/true", "k3/false", "k4/false"}) {
			t.Fatalf("reclaim claimed %v", claimed)
		}
	})

	t.Run("a reclaiming claim is not crowded out by scheduled sends", func(t *testing.T) {
		j, _ := open(t, nb)
		// 300 sends held until much later, journaled first: more than a
		// claim of 1 looks at (4 x limit + 256).
		for i := range 300 {
			st, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: fmt.Sprint("later-", i), Provider: "web", Chat: "c1",
				Payload: []byte(`"x"`), NotBefore: 1_000_000}, int64(10+i), nil)
			if err != nil || st != durability.Created {
				t.Fatalf("Put scheduled %d: %v %v", i, st, err)
			}
		}
		if got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("other", 500, 9000), Limit: 10}))(t); len(got) != 0 {
			t.Fatalf("a scheduled send was claimed before its time: %+v", got[0].Record)
		}
		l := lease("me", 400, 90000)
		putOut(t, j, "mine-in-flight", "c1", 400, &l)
		got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("me", 2100, 3100), Limit: 1, Reclaim: &durability.Reclaim{Owner: "me", Before: 1500}}))(t)
		if len(got) != 1 || got[0].Record.Key != "mine-in-flight" || !got[0].Ambiguous {
			t.Fatalf("reclaim claimed %+v, want this instance's send in flight", got)
		}
	})

	t.Run("resolveAmbiguous to unknown or pending", func(t *testing.T) {
		j, _ := open(t, nb)
		for _, k := range []string{"a", "b"} {
			l := lease("dead", 100, 200)
			putOut(t, j, k, "c1", 100, &l)
		}
		got := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 300, 1300)}))(t)
		if len(got) != 2 || !got[0].Ambiguous || !got[1].Ambiguous {
			t.Fatalf("claims: %+v", got)
		}
		noErr(t, j.Outbox.ResolveAmbiguous(ctx, "a", got[0].Record.Token, durability.OutboxUnknown, 310))
		noErr(t, j.Outbox.ResolveAmbiguous(ctx, "b", got[1].Record.Token, durability.OutboxPending, 310))
		if r := check(j.Outbox.Get(ctx, "a"))(t); r.State != durability.OutboxUnknown || r.CompletedAt != 310 {
			t.Fatalf("a: %+v", r)
		}
		if r := check(j.Outbox.Get(ctx, "b"))(t); r.State != durability.OutboxPending || r.RetryAt != 310 {
			t.Fatalf("b: %+v", r)
		}
		wantErr(t, j.Outbox.ResolveAmbiguous(ctx, "a", got[0].Record.Token, durability.OutboxPending, 320), durability.ErrStaleLease, "resolve twice")
		due := check(j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("i2", 400, 1400)}))(t)
		if len(due) != 1 || due[0].Record.Key != "b" || due[0].Ambiguous {
			t.Fatalf("after resolve: %+v", due)
		}
		if err := j.Outbox.ResolveAmbiguous(ctx, "b", due[0].Record.Token, durability.OutboxSent, 410); !errors.Is(err, durability.ErrInvalidState) {
			t.Fatalf("resolve to sent: %v", err)
		}
	})

	t.Run("retry, discard and purge", func(t *testing.T) {
		j, _ := open(t, nb)
		l := lease("i1", 100, 1100)
		putOut(t, j, "dead", "c1", 100, &l)
		noErr(t, j.Outbox.MarkFailed(ctx, "dead", 1, "unreachable", durability.FailOptions{Now: 110, Dead: true}))
		putOut(t, j, "sent", "c1", 120, &l)
		noErr(t, j.Outbox.MarkSent(ctx, "sent", 1, "r", 130))
		wantErr(t, j.Outbox.Retry(ctx, "sent", 140), durability.ErrInvalidState, "retry of a sent record")
		noErr(t, j.Outbox.Retry(ctx, "dead", 150))
		got := check(j.Outbox.Get(ctx, "dead"))(t)
		if got.State != durability.OutboxPending || got.Attempts != 0 || got.RetryAt != 150 || got.CompletedAt != 0 {
			t.Fatalf("after retry: %+v", got)
		}
		noErr(t, j.Outbox.Discard(ctx, "dead"))
		_, err := j.Outbox.Get(ctx, "dead")
		wantErr(t, err, durability.ErrNotFound, "get after discard")
		wantErr(t, j.Outbox.Discard(ctx, "dead"), durability.ErrNotFound, "discard twice")
		putOut(t, j, "dead", "c1", 160, nil) // a discarded key sends again
		putOut(t, j, "sent-late", "c1", 170, &l)
		noErr(t, j.Outbox.MarkSent(ctx, "sent-late", 1, "r2", 900))
		putOut(t, j, "dead-old", "c1", 180, &l)
		noErr(t, j.Outbox.MarkFailed(ctx, "dead-old", 1, "unreachable", durability.FailOptions{Now: 190, Dead: true}))
		if n := check(j.Outbox.Purge(ctx, 500))(t); n != 1 {
			t.Fatalf("purged %d, want 1 (only sent@130; the dead letter stays)", n)
		}
		if got := check(j.Outbox.List(ctx, durability.ListFilter{}))(t); !slices.Equal(keys(got), []string{"dead", "sent-late", "dead-old"}) {
			t.Fatalf("left %v", keys(got))
		}
		if got := check(j.Outbox.List(ctx, durability.ListFilter{State: "pending", Chat: "c1"}))(t); !slices.Equal(keys(got), []string{"dead"}) {
			t.Fatalf("list pending c1 = %v", keys(got))
		}
	})

	t.Run("list keeps previous part links", func(t *testing.T) {
		j, _ := open(t, nb)
		j.Outbox.Put(ctx, durability.OutboxPut{Key: "k", Chat: "c1", Payload: []byte("1")}, 100, nil)
		j.Outbox.Put(ctx, durability.OutboxPut{Key: "k#2", Chat: "c1", Payload: []byte("2"), PreviousPart: "k", Inbound: "web:1"}, 100, nil)
		got := check(j.Outbox.Get(ctx, "k#2"))(t)
		if got.PreviousPart != "k" || got.Inbound != "web:1" {
			t.Fatalf("part: %+v", got)
		}
	})
}

func runScope(t *testing.T, nb NewBackend) {
	b := nb(t)
	defer b.Close()
	ja := check(b.Open(ctx, scopeA))(t)
	jb := check(b.Open(ctx, scopeB))(t)
	if scopeA.ID() == scopeB.ID() || len(scopeA.ID()) == 0 {
		t.Fatalf("scope ids %q %q", scopeA.ID(), scopeB.ID())
	}
	putIn(t, ja, "web:1", "c1", 100)
	putIn(t, jb, "web:1", "c1", 100) // the same channel id in another bot is new there
	putOut(t, ja, "reminder:1", "c1", 100, nil)
	putOut(t, jb, "reminder:1", "c1", 100, nil) // explicit keys are per bot
	rec := check(ja.Inbox.Claim(ctx, "web:1", lease("a", 100, 1000)))(t)
	noErr(t, ja.Inbox.Complete(ctx, "web:1", rec.Token, durability.Completion{Effects: []durability.StateWrite{{Key: "k", Value: []byte("a")}}, Now: 110}))
	if _, ok, _ := jb.State.Get(ctx, "k"); ok {
		t.Fatal("state leaked across scopes")
	}
	if got := check(jb.Inbox.Get(ctx, "web:1"))(t); got.State != durability.InboxPending {
		t.Fatalf("scope b record changed by scope a: %+v", got)
	}
	due := check(jb.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease("b", 200, 1200)}))(t)
	if len(due) != 1 {
		t.Fatalf("scope b claimed %d sends, want its own 1", len(due))
	}
	if got := check(ja.Outbox.Get(ctx, "reminder:1"))(t); got.State != durability.OutboxPending {
		t.Fatalf("scope a send claimed by scope b: %+v", got)
	}
	if n := check(jb.Inbox.Purge(ctx, 1e12))(t); n != 0 {
		t.Fatalf("scope b purged %d", n)
	}
	if got := check(ja.Inbox.List(ctx, durability.ListFilter{}))(t); len(got) != 1 {
		t.Fatalf("scope a list: %v", ids(got))
	}
}

func runConcurrency(t *testing.T, nb NewBackend) {
	const records, workers = 200, 8
	t.Run("no record is claimed twice", func(t *testing.T) {
		j, _ := open(t, nb)
		for i := range records {
			putIn(t, j, fmt.Sprintf("web:%03d", i), fmt.Sprint("c", i%7), int64(i))
			putOut(t, j, fmt.Sprintf("k%03d", i), fmt.Sprint("c", i%7), int64(i), nil)
		}
		var mu sync.Mutex
		inbox, outbox := map[string]int{}, map[string]int{}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				owner := fmt.Sprint("w", w)
				for range 50 {
					in, err := j.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease(owner, 1000, 1e9), PendingBefore: 1000, Limit: 7})
					if err != nil {
						t.Error(err)
						return
					}
					out, err := j.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: lease(owner, 1000, 1e9), Limit: 7})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, r := range in {
						inbox[r.ID]++
					}
					for _, c := range out {
						outbox[c.Record.Key]++
					}
					mu.Unlock()
					if len(in) == 0 && len(out) == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		if len(inbox) != records || len(outbox) != records {
			t.Fatalf("claimed %d inbox and %d outbox records, want %d each", len(inbox), len(outbox), records)
		}
		for id, n := range inbox {
			if n != 1 {
				t.Fatalf("inbox %s claimed %d times", id, n)
			}
		}
		for k, n := range outbox {
			if n != 1 {
				t.Fatalf("outbox %s claimed %d times", k, n)
			}
		}
	})

	t.Run("one claim wins a race for one record", func(t *testing.T) {
		j, _ := open(t, nb)
		putIn(t, j, "web:1", "c1", 1)
		putOut(t, j, "k1", "c1", 1, nil)
		var wins, beginWins int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				_, err := j.Inbox.Claim(ctx, "web:1", lease(fmt.Sprint("w", w), 10, 1e9))
				_, berr := j.Outbox.Begin(ctx, "k1", lease(fmt.Sprint("w", w), 10, 1e9))
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					wins++
				} else if !errors.Is(err, durability.ErrNotClaimable) {
					t.Error(err)
				}
				if berr == nil {
					beginWins++
				} else if !errors.Is(berr, durability.ErrNotClaimable) {
					t.Error(berr)
				}
			})
		}
		wg.Wait()
		if wins != 1 || beginWins != 1 {
			t.Fatalf("%d claims and %d begins won, want 1 each", wins, beginWins)
		}
		if got := check(j.Inbox.Get(ctx, "web:1"))(t); got.Token != 1 || got.Attempts != 1 {
			t.Fatalf("record after the race: %+v", got)
		}
	})

	t.Run("put-if-absent: the first writer wins a race", func(t *testing.T) {
		j, b := open(t, nb)
		sc, ok := j.State.(durability.StateCreator)
		if !ok {
			t.Skip("the state store offers no PutIfAbsent")
		}
		var mu sync.Mutex
		var created int
		seen := map[string]bool{}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				v, c, err := sc.PutIfAbsent(ctx, "botrun/secret", []byte(fmt.Sprint("w", w)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
				}
				if c {
					created++
				}
				seen[string(v)] = true
			})
		}
		wg.Wait()
		if created != 1 || len(seen) != 1 {
			t.Fatalf("%d writers created the key and they saw %d values, want 1 and 1", created, len(seen))
		}
		v, ok, err := j.State.Get(ctx, "botrun/secret")
		if err != nil || !ok || !seen[string(v)] {
			t.Fatalf("Get after the race = %q %v %v, want the winner's value", v, ok, err)
		}
		other, err := b.Open(ctx, scopeB)
		noErr(t, err)
		if v, c, err := other.State.(durability.StateCreator).PutIfAbsent(ctx, "botrun/secret", []byte("b")); err != nil || !c || string(v) != "b" {
			t.Fatalf("another scope's PutIfAbsent = %q %v %v, want its own value created", v, c, err)
		}
	})

	t.Run("concurrent duplicates are all counted", func(t *testing.T) {
		j, _ := open(t, nb)
		var created int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				st, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:dup", Chat: "c1"}, 5, nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if st == durability.Created {
					created++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		if got := check(j.Inbox.Get(ctx, "web:dup"))(t); created != 1 || got.Duplicates != workers-1 {
			t.Fatalf("created %d, duplicates %d; want 1 and %d", created, got.Duplicates, workers-1)
		}
	})

	t.Run("a bad write in a shared commit fails only its own caller", func(t *testing.T) {
		// A NUL byte is refused by some stores (PostgreSQL's jsonb); the
		// host never sends one, but if one arrives, the writes committed
		// beside it must not fail with it.
		j, _ := open(t, nb)
		var wg sync.WaitGroup
		for round := range 20 {
			for i := range workers {
				wg.Go(func() {
					id := fmt.Sprintf("web:good-%d-%d", round, i)
					if i == 0 {
						id = fmt.Sprintf("web:n\x00x-%d", round)
					}
					_, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Chat: "c1"}, 5, nil)
					if err != nil && i != 0 {
						t.Errorf("put %s failed beside a bad write: %v", id, err)
					}
				})
			}
		}
		wg.Wait()
	})
}
