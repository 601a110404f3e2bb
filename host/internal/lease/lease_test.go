package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/internal/waitfor"
)

func fakeLeases(c clock.Clock, stale *atomic.Int64) *Leases {
	return &Leases{Owner: "me", Base: context.Background(), Stale: stale, Log: slog.New(slog.DiscardHandler), Clock: c}
}

// TestHeartbeatExtendsUntilTheLeaseIsLost: a heartbeat extends its lease
// every third of its length by its clock; once the journal calls the lease
// stale it counts it, stops and cancels the work's context, and Held
// refuses once the last extension has passed.
func TestHeartbeatExtendsUntilTheLeaseIsLost(t *testing.T) {
	start := time.Unix(1000, 0)
	fake := clock.NewFake(start)
	var stale atomic.Int64
	l := fakeLeases(fake, &stale)
	if got := l.Lease(3 * time.Second); got.Owner != "me" || got.Now != start.UnixMilli() || got.Until != start.Add(3*time.Second).UnixMilli() {
		t.Fatalf("Lease = %+v", got)
	}
	extended := make(chan int64, 10)
	var refuse atomic.Bool
	hb := l.Heartbeat(3*time.Second, start.Add(3*time.Second).UnixMilli(), func(_ context.Context, until int64) error {
		if refuse.Load() {
			return durability.ErrStaleLease
		}
		extended <- until
		return nil
	})
	defer hb.Release()
	if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
		t.Fatal("the heartbeat never armed its timers")
	}
	fake.Advance(time.Second)
	if until := <-extended; until != start.Add(4*time.Second).UnixMilli() {
		t.Errorf("extended to %d, want now + the lease", until)
	}
	if err := hb.Held(); err != nil {
		t.Errorf("Held = %v within the lease", err)
	}
	refuse.Store(true)
	if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
		t.Fatal("the heartbeat never armed its next timers")
	}
	fake.Advance(time.Second)
	<-hb.Context().Done()
	if !hb.Lost() || stale.Load() != 1 {
		t.Errorf("lost %v, stale %d: want the loss noted and counted once", hb.Lost(), stale.Load())
	}
	fake.Advance(3 * time.Second)
	if err := hb.Held(); err == nil {
		t.Error("Held = nil past the last extension")
	}
}

// TestHeartbeatStopsTheWorkWhenTheLeaseExpiresUnextended: extensions that
// fail (the journal unreachable) or hang (a blackholed connection) do not
// keep the work running past its lease: its context is cancelled once the
// lease has expired by this process's count (on the monotonic clock, less
// a tenth), before the journal's expiry; a step of the wall clock, or a
// stale expiry from the taker, stops nothing while the journal answers.
func TestHeartbeatStopsTheWorkWhenTheLeaseExpiresUnextended(t *testing.T) {
	t.Run("failing", func(t *testing.T) {
		start := time.Unix(1000, 0)
		fake := clock.NewFake(start)
		var stale, calls atomic.Int64
		l := fakeLeases(fake, &stale)
		hb := l.Heartbeat(3*time.Second, start.Add(3*time.Second).UnixMilli(), func(context.Context, int64) error {
			defer calls.Add(1)
			return errors.New("connection refused")
		})
		defer hb.Release()
		// Two extensions (at 1 s and 2 s) fail: the work goes on.
		for k := range int64(2) {
			if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
				t.Fatal("the heartbeat never armed its timers")
			}
			fake.Advance(time.Second)
			if !waitfor.True(time.Minute, func() bool { return calls.Load() == k+1 }) {
				t.Fatalf("extension %d was never tried", k+1)
			}
			if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
				t.Fatal("the heartbeat did not go on after a failed extension")
			}
			if hb.Context().Err() != nil {
				t.Fatalf("the work was stopped at %s, within its lease", fake.Now().Sub(start))
			}
		}
		// At 2.7 s (the lease less a tenth) it has expired unextended.
		fake.Advance(800 * time.Millisecond)
		select {
		case <-hb.Context().Done():
		case <-time.After(time.Minute):
			t.Fatal("the work still runs past its lease, every extension failed")
		}
		if !hb.Lost() || stale.Load() != 1 || hb.Held() == nil {
			t.Errorf("lost %v, stale %d, held %v: want the loss noted, counted once, and Held refusing", hb.Lost(), stale.Load(), hb.Held())
		}
	})
	t.Run("wall clock stepped", func(t *testing.T) {
		start := time.Unix(1000, 0)
		fake := clock.NewFake(start)
		var stale, calls atomic.Int64
		l := fakeLeases(fake, &stale)
		hb := l.Heartbeat(3*time.Second, start.Add(3*time.Second).UnixMilli(), func(context.Context, int64) error {
			calls.Add(1)
			return nil
		})
		defer hb.Release()
		// An hour forward on the wall clock, no time passing: the lease,
		// counted on the monotonic clock, holds.
		fake.Step(time.Hour)
		if err := hb.Held(); err != nil {
			t.Errorf("Held = %v after a step of the wall clock, no time passed", err)
		}
		if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
			t.Fatal("the heartbeat never armed its timers")
		}
		fake.Advance(time.Second)
		if !waitfor.True(time.Minute, func() bool { return calls.Load() == 1 && fake.Timers() == 2 }) {
			t.Fatal("the heartbeat did not extend and go on")
		}
		if hb.Context().Err() != nil || hb.Lost() || hb.Held() != nil {
			t.Error("a step of the wall clock stopped work whose journal answers")
		}
	})
	t.Run("stale expiry", func(t *testing.T) {
		start := time.Unix(1000, 0)
		fake := clock.NewFake(start)
		var stale, calls atomic.Int64
		l := fakeLeases(fake, &stale)
		// The taker's expiry is already (nearly) past: the heartbeat
		// extends at once instead of giving up.
		hb := l.Heartbeat(3*time.Second, start.Add(100*time.Millisecond).UnixMilli(), func(context.Context, int64) error {
			calls.Add(1)
			return nil
		})
		defer hb.Release()
		if !waitfor.True(time.Minute, func() bool { return fake.Timers() == 2 }) {
			t.Fatal("the heartbeat never armed its timers")
		}
		fake.Advance(time.Millisecond)
		if !waitfor.True(time.Minute, func() bool { return calls.Load() >= 1 && fake.Timers() == 2 }) {
			t.Fatal("no extension was tried at once")
		}
		fake.Advance(2 * time.Second)
		if !waitfor.True(time.Minute, func() bool { return calls.Load() >= 2 && fake.Timers() == 2 }) {
			t.Fatal("the heartbeat did not go on")
		}
		if hb.Context().Err() != nil || hb.Lost() {
			t.Error("a stale expiry from the taker stopped work whose journal answers")
		}
	})
	t.Run("hanging", func(t *testing.T) {
		var stale atomic.Int64
		l := fakeLeases(clock.Real, &stale)
		lease := 3 * time.Second
		start := time.Now()
		until := start.Add(lease).UnixMilli()
		hb := l.Heartbeat(lease, until, func(ctx context.Context, _ int64) error {
			<-ctx.Done() // a blackholed connection: no answer, no error
			return ctx.Err()
		})
		defer hb.Release()
		select {
		case <-hb.Context().Done():
		case <-time.After(time.Minute):
			t.Fatal("the work still runs a minute after its lease, its extension hanging")
		}
		took := time.Since(start)
		t.Logf("stopped after %s (lease %s)", took.Round(time.Millisecond), lease)
		if took < lease*9/10-10*time.Millisecond {
			t.Errorf("stopped after %s, before the lease less its margin (%s)", took, lease*9/10)
		}
		if !hb.Lost() {
			t.Error("the loss was not noted")
		}
	})
}

// TestChatTurnsFenceAndRelease: a chat's turn is taken once; another
// replica sees its holder until it expires by the clock, then takes it
// with a greater token, and the first holder's extension is refused.
func TestChatTurnsFenceAndRelease(t *testing.T) {
	ctx := context.Background()
	kv := memory.NewKv()
	fake := clock.NewFake(time.Unix(1000, 0))
	a := NewChatTurns(kv, "s", "a", time.Unix(1, 0), time.Second, fake)
	b := NewChatTurns(kv, "s", "b", time.Unix(2, 0), time.Second, fake)
	ta, _, err := a.Acquire(ctx, "web", "c/1")
	if err != nil || ta == nil {
		t.Fatalf("acquire: %v", err)
	}
	if tb, holder, err := b.Acquire(ctx, "web", "c/1"); tb != nil || err != nil || holder != "a#1000000000" {
		t.Fatalf("a held turn: got %v, holder %q, %v", tb, holder, err)
	}
	held, err := HeldTurns(ctx, kv, "s/turn/")
	if err != nil || len(held) != 1 || held[0].Owner != "a" {
		t.Fatalf("HeldTurns = %+v, %v", held, err)
	}
	fake.Advance(time.Second)
	if ta.Held() == nil {
		t.Error("Held = nil once the turn expired by the clock")
	}
	tb, _, err := b.Acquire(ctx, "web", "c/1")
	if err != nil || tb == nil || tb.rec.Token != ta.rec.Token+1 {
		t.Fatalf("expired turn: got %+v, %v; want it taken with the next token", tb, err)
	}
	if err := ta.Extend(ctx, 0); err == nil {
		t.Error("the first holder extended a turn another replica took")
	}
	if err := tb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _ := HeldTurns(ctx, kv, "s/turn/"); len(held) != 0 {
		t.Errorf("turns held after release: %+v", held)
	}
}
