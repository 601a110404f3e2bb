// Package clock is the time the host's message path reads: the wall clock
// in production (Real), a clock a test moves by hand (Fake). The packages
// under host/internal read time only through a Clock passed at
// construction, so a test can step through leases, retries and sweeps
// without sleeping.
//
// clock imports only the standard library.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and waits for it.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed.
	NewTimer(d time.Duration) Timer
	// Elapsed is a monotonic reading: how long the clock has run. A step
	// of the wall clock (NTP setting the time) moves Now, not Elapsed, so
	// the difference of two readings is the time that really passed.
	Elapsed() time.Duration
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	// C receives the time once the timer fires.
	C() <-chan time.Time
	// Reset makes the timer fire d from now (see time.Timer.Reset).
	Reset(d time.Duration)
	// Stop stops the timer; it reports whether it was still pending.
	Stop() bool
}

// Real is the wall clock.
var Real Clock = real{}

type real struct{}

func (real) Now() time.Time { return time.Now() }

func (real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// origin is Real's zero of Elapsed.
var origin = time.Now()

func (real) Elapsed() time.Duration { return time.Since(origin) }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop() bool            { return r.t.Stop() }

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// UnixMilli is c's time in Unix milliseconds, as the journals keep it.
func UnixMilli(c Clock) int64 { return c.Now().UnixMilli() }

// Fake is a clock that moves only when told: Advance is time passing (its
// timers fire as it passes their time), Step is the wall clock set (NTP
// stepping it: Now moves, Elapsed and the timers do not, as with the real
// clock, whose timers run on the monotonic clock). The zero value is not
// usable: NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	elapsed time.Duration
	timers  []*fakeTimer
}

// NewFake returns a fake clock at now. Its times carry no monotonic
// reading (as times from time.Now do), so comparing them compares wall
// clocks, the way Step moves them.
func NewFake(now time.Time) *Fake { return &Fake{now: now.Round(0)} }

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.left, t.armed = d, true
	f.timers = append(f.timers, t)
	f.fireLocked()
	return t
}

// Advance is d passing: the wall clock and Elapsed move d forward, and the
// timers d passes fire.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.elapsed += d
	for _, t := range f.timers {
		t.left -= d
	}
	f.fireLocked()
}

// Step sets the wall clock d forward (or back, d < 0) in one jump, as NTP
// does: Now moves; Elapsed and the timers do not.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Elapsed implements Clock: the sum of the Advances.
func (f *Fake) Elapsed() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.elapsed
}

// Timers reports how many timers wait to fire (a test waits for a
// goroutine to arm its timer before advancing past it).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.armed {
			n++
		}
	}
	return n
}

func (f *Fake) fireLocked() {
	for _, t := range f.timers {
		if t.armed && t.left <= 0 {
			t.armed = false
			select {
			case t.c <- f.now:
			default:
			}
		}
	}
}

type fakeTimer struct {
	f *Fake
	c chan time.Time
	// left is how much Advance remains before the timer fires.
	left  time.Duration
	armed bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Reset and Stop drop a value the timer sent and nobody received, as
// time.Timer's do since Go 1.23.
func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	t.left, t.armed = d, true
	t.f.fireLocked()
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	was := t.armed
	t.armed = false
	return was
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// Horizon is the time a purge judges age by: the earlier of c's wall clock
// and the wall clock at the horizon's start plus the monotonic time since.
// A wall clock stepped forward thus never makes a record look older than it
// is (purged early, a record a channel still needs to recognise a replayed
// request would let it in again). A wall clock that stays ahead for longer
// than hold is taken as right (it was behind at the start, or the host
// slept): the horizon catches up with it then, when whatever was written
// before the step is really older than hold.
type Horizon struct {
	c    Clock
	hold time.Duration
	mu   sync.Mutex
	// wall and elapsed are the anchor: a wall clock reading (Unix ms) and
	// the Elapsed reading at the same moment.
	wall    int64
	elapsed time.Duration
	// ahead is the Elapsed reading when the wall clock was first seen
	// ahead of the anchor's count; -1 while it is not.
	ahead time.Duration
}

// NewHorizon returns the horizon of c (nil: Real) from now, catching up
// with a wall clock ahead for longer than hold (never, when hold ≤ 0). hold
// is at least as long as the purge keeps anything. The horizon lives in
// memory: a process started after a step forward counts from its start.
func NewHorizon(c Clock, hold time.Duration) *Horizon {
	c = Or(c)
	return &Horizon{c: c, hold: hold, wall: c.Now().UnixMilli(), elapsed: c.Elapsed(), ahead: -1}
}

// Now is the horizon's time.
func (h *Horizon) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	now, el := h.c.Now().UnixMilli(), h.c.Elapsed()
	ran := h.wall + (el - h.elapsed).Milliseconds()
	if now <= ran {
		h.ahead = -1
		return time.UnixMilli(now)
	}
	if h.ahead < 0 {
		h.ahead = el
	}
	if h.hold > 0 && el-h.ahead >= h.hold {
		h.wall, h.elapsed, h.ahead = now, el, -1
		return time.UnixMilli(now)
	}
	return time.UnixMilli(ran)
}
