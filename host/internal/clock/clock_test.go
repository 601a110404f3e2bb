package clock

import (
	"testing"
	"time"
)

func TestFakeFiresTimersAsItPassesThem(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	a, b := f.NewTimer(time.Second), f.NewTimer(3*time.Second)
	if f.Timers() != 2 {
		t.Fatalf("armed timers = %d, want 2", f.Timers())
	}
	f.Advance(time.Second)
	select {
	case at := <-a.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Errorf("fired at %v", at)
		}
	default:
		t.Fatal("the 1s timer did not fire at 1s")
	}
	select {
	case <-b.C():
		t.Fatal("the 3s timer fired at 1s")
	default:
	}
	if !b.Stop() || b.Stop() {
		t.Error("Stop: want true for a pending timer, then false")
	}
	b.Reset(time.Second)
	f.Advance(2 * time.Second)
	select {
	case <-b.C():
	default:
		t.Fatal("a reset timer did not fire")
	}
	if got := UnixMilli(f); got != start.Add(3*time.Second).UnixMilli() {
		t.Errorf("UnixMilli = %d", got)
	}
	if Or(nil) != Real || Or(f) != f {
		t.Error("Or: want Real for nil, else the clock given")
	}
}

func TestFakeStepMovesTheWallClockOnly(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	timer := f.NewTimer(time.Minute)
	f.Step(time.Hour)
	if !f.Now().Equal(start.Add(time.Hour)) || f.Elapsed() != 0 {
		t.Fatalf("after Step(1h): Now %v, Elapsed %v; want 1h on, 0", f.Now(), f.Elapsed())
	}
	select {
	case <-timer.C():
		t.Fatal("a step of the wall clock fired a timer")
	default:
	}
	f.Step(-2 * time.Hour)
	f.Advance(time.Minute)
	if !f.Now().Equal(start.Add(-time.Hour+time.Minute)) || f.Elapsed() != time.Minute {
		t.Fatalf("Now %v, Elapsed %v", f.Now(), f.Elapsed())
	}
	select {
	case <-timer.C():
	default:
		t.Fatal("the timer did not fire after a minute passed")
	}
	if e := Real.Elapsed(); e <= 0 {
		t.Errorf("Real.Elapsed = %v", e)
	}
}

func TestHorizonLagsAStepForwardThenCatchesUp(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	h := NewHorizon(f, time.Hour)
	f.Advance(time.Minute)
	if got := h.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("a minute on: %v, want the clock", got)
	}
	f.Step(3 * time.Hour)
	if got := h.Now(); !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("after a step of 3 h: %v, want a minute on (the monotonic count)", got)
	}
	f.Advance(59 * time.Minute)
	if got := h.Now(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("59 min later: %v, want an hour on", got)
	}
	f.Advance(time.Minute)
	if got := h.Now(); !got.Equal(f.Now()) {
		t.Fatalf("ahead for an hour (hold): %v, want the wall clock %v", got, f.Now())
	}
	f.Step(-30 * time.Minute)
	if got := h.Now(); !got.Equal(f.Now()) {
		t.Fatalf("stepped back: %v, want the wall clock %v", got, f.Now())
	}
}

func TestHorizonWithoutHoldNeverCatchesUp(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	h := NewHorizon(f, 0)
	f.Step(3 * time.Hour)
	h.Now()
	f.Advance(24 * time.Hour)
	if got := h.Now(); !got.Equal(start.Add(24 * time.Hour)) {
		t.Fatalf("a day after a step of 3 h, hold 0: %v, want the monotonic count %v", got, start.Add(24*time.Hour))
	}
	// An offset that ends before the hold resets the count.
	g := NewFake(start)
	hg := NewHorizon(g, time.Hour)
	g.Step(time.Minute)
	hg.Now()
	g.Advance(50 * time.Minute)
	g.Step(-time.Minute)
	hg.Now() // back in line: the count restarts
	g.Step(time.Minute)
	hg.Now()
	g.Advance(50 * time.Minute)
	if got := hg.Now(); got.Equal(g.Now()) {
		t.Fatalf("ahead 50 min twice (the hold is 1 h): caught up at %v", got)
	}
}
