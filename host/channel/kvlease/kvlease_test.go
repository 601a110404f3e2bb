package kvlease

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

func kvs(t *testing.T) map[string]durability.Kv {
	s, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "bot.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return map[string]durability.Kv{"memory": memory.NewKv(), "sqlite": s}
}

func TestOneHolderAndGrowingTokens(t *testing.T) {
	for name, kv := range kvs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a := New(kv, "bot/wa/lease", "a", time.Minute)
			b := New(kv, "bot/wa/lease", "b", time.Minute)
			if ok, _, err := a.TryAcquire(ctx); !ok || err != nil {
				t.Fatalf("a: %v %v", ok, err)
			}
			ok, holder, err := b.TryAcquire(ctx)
			if ok || err != nil || holder != "a" {
				t.Fatalf("b took a held lease: ok %v, holder %q, %v", ok, holder, err)
			}
			if ok, tok := a.Held(); !ok || tok != 1 {
				t.Fatalf("a holds %v with token %d, want token 1", ok, tok)
			}
			if err := a.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if ok, _ := a.Held(); ok {
				t.Fatal("a still holds a released lease")
			}
			if ok, _, err := b.TryAcquire(ctx); !ok || err != nil {
				t.Fatalf("b after the release: %v %v", ok, err)
			}
			if _, tok := b.Held(); tok != 2 {
				t.Fatalf("b's token %d, want 2 (greater than a's)", tok)
			}
			if err := a.Renew(ctx); !errors.Is(err, ErrLost) {
				t.Fatalf("a renewed a lease b holds: %v", err)
			}
		})
	}
}

func TestExpiredLeaseIsTakenAndTheOldHolderStops(t *testing.T) {
	kv := memory.NewKv()
	ctx := context.Background()
	a := New(kv, "k", "a", 200*time.Millisecond)
	if ok, _, _ := a.TryAcquire(ctx); !ok {
		t.Fatal("a could not take a free lease")
	}
	b := New(kv, "k", "b", 200*time.Millisecond)
	var waited atomic.Value
	if err := b.Acquire(ctx, func(h string) { waited.Store(h) }); err != nil {
		t.Fatal(err)
	}
	if waited.Load() != "a" {
		t.Fatalf("b waited for %v, want a", waited.Load())
	}
	// a stopped counting itself the holder before b could take it.
	if ok, _ := a.Held(); ok {
		t.Fatal("a and b both hold the lease")
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("a renewed an expired lease: %v", err)
	}
}

func TestHoldRenewsUntilLost(t *testing.T) {
	kv := memory.NewKv()
	ctx := context.Background()
	// A lease of 3 s renewed every second tolerates a stall of over a
	// second on a loaded machine.
	const ttl = 3 * time.Second
	a := New(kv, "k", "a", ttl)
	var lost atomic.Bool
	held, release, err := a.Hold(ctx, nil, func(error) { lost.Store(true) })
	if err != nil {
		t.Fatal(err)
	}
	// Over two lease lengths later it is still held: the renewals keep it.
	b := New(kv, "k", "b", ttl)
	for end := time.Now().Add(2*ttl + ttl/3); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if ok, holder, _ := b.TryAcquire(ctx); ok || holder != "a" {
			t.Fatalf("b took a renewed lease (holder %q)", holder)
		}
		if held.Err() != nil {
			t.Fatal("the hold ended while renewals succeeded")
		}
	}
	// Another writer overwrites the record: a notices and held ends.
	_, v, _ := kv.Get(ctx, "k")
	kv.Commit(ctx, []durability.Write{{Key: "k", Version: v, Next: v + 1, Value: []byte(`{"owner":"c","token":9,"until":99999999999999}`)}})
	fakekit.WaitFor(t, "the hold to end", func() bool { return held.Err() != nil })
	if !lost.Load() {
		t.Fatal("the hold ended without reporting the loss")
	}
	release()
	if _, holder, _ := b.TryAcquire(ctx); holder != "c" {
		t.Fatalf("release gave up c's lease: holder %q", holder)
	}
}

func TestReleaseLetsTheWaiterIn(t *testing.T) {
	kv := memory.NewKv()
	ctx := context.Background()
	a := New(kv, "k", "a", time.Hour)
	_, release, err := a.Hold(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := New(kv, "k", "b", 60*time.Millisecond)
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, nil) }()
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b never took the released lease")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Acquire(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting on a cancelled context: %v", err)
	}
}

// stuckKv is a Kv whose commits fail (fail set) or hang until their
// context ends (hang set), once armed.
type stuckKv struct {
	durability.Kv
	fail, hang atomic.Bool
}

func (k *stuckKv) Commit(ctx context.Context, w []durability.Write) error {
	switch {
	case k.hang.Load():
		<-ctx.Done()
		return ctx.Err()
	case k.fail.Load():
		return errors.New("database unreachable")
	}
	return k.Kv.Commit(ctx, w)
}

// TestHoldEndsBeforeTheRecordExpires: a holder whose renewals fail, or
// whose renewal's write hangs, stops counting itself the holder three
// quarters of the lease after its last write, before another process can
// take the lease.
func TestHoldEndsBeforeTheRecordExpires(t *testing.T) {
	for _, mode := range []string{"failing", "hanging"} {
		t.Run(mode, func(t *testing.T) {
			kv := &stuckKv{Kv: memory.NewKv()}
			ctx := context.Background()
			const ttl = 8 * time.Second // the hold ends at 6 s: a 2 s margin for a loaded machine
			a := New(kv, "k", "a", ttl)
			ended := make(chan time.Time, 1)
			held, release, err := a.Hold(ctx, nil, func(err error) {
				if !errors.Is(err, ErrLost) {
					t.Errorf("lost with %v, want ErrLost", err)
				}
				ended <- time.Now()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				kv.fail.Store(false)
				kv.hang.Store(false)
				release()
			}()
			if mode == "failing" {
				kv.fail.Store(true)
			} else {
				kv.hang.Store(true)
			}
			select {
			case at := <-ended:
				r, _, err := Read(ctx, kv, "k") // the last successful write
				if err != nil {
					t.Fatal(err)
				}
				if at.UnixMilli() >= r.Until {
					t.Fatalf("the hold ended %s after the record expired", at.Sub(time.UnixMilli(r.Until)))
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the hold never ended")
			}
			fakekit.WaitFor(t, "held to end", func() bool { return held.Err() != nil })
			if ok, _ := a.Held(); ok {
				t.Fatal("a still counts itself the holder")
			}
		})
	}
}

// TestLeadRunsOneSessionAtATime: two processes lead in turn; a session
// runs only while its process holds the lease, one at a time, with a
// greater token each time, and a session that returns early gives the
// lease up to the other.
func TestLeadRunsOneSessionAtATime(t *testing.T) {
	kv := memory.NewKv()
	const ttl = 3 * time.Second
	var running atomic.Int32
	var overlaps atomic.Int32
	type run struct {
		who   string
		token int64
	}
	runs := make(chan run, 16)
	lead := func(ctx context.Context, l *Lease, stopEarly *atomic.Bool) {
		l.Lead(ctx, nil, nil, func(held context.Context) {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			_, token := l.Held()
			runs <- run{l.Name(), token}
			for held.Err() == nil && !stopEarly.Load() {
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	a, b := New(kv, "k", "a", ttl), New(kv, "k", "b", ttl)
	var earlyA, earlyB atomic.Bool
	doneA := make(chan struct{})
	go func() { defer close(doneA); lead(ctxA, a, &earlyA) }()
	first := <-runs
	if first.who != "a" || first.token != 1 {
		t.Fatalf("first session %+v, want a with token 1", first)
	}
	doneB := make(chan struct{})
	go func() { defer close(doneB); lead(ctxB, b, &earlyB) }()
	// a's sessions end by themselves: a gives the lease up each time, and
	// b takes it.
	earlyA.Store(true)
	for last, ledByB := first.token, false; !ledByB; {
		select {
		case r := <-runs:
			if r.token <= last {
				t.Fatalf("session %+v after token %d", r, last)
			}
			last, ledByB = r.token, r.who == "b"
		case <-time.After(30 * time.Second):
			t.Fatal("b never led after a gave the lease up")
		}
	}
	// a's process stops; b's session runs until b's does.
	stopA()
	<-doneA
	stopB()
	<-doneB
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d sessions ran beside another", n)
	}
	if r, _, _ := Read(context.Background(), kv, "k"); r.Owner != "" {
		t.Fatalf("the lease is still held by %q after both stopped", r.Owner)
	}
}
