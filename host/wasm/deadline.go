package wasm

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errGuestDeadline is the cause of a call's cancellation when the guest ran
// past bot.handler_timeout.
var errGuestDeadline = errors.New("the guest ran past its deadline")

// guestDeadline cancels a call once the guest has run for the handler timeout.
// Time the guest spends blocked in a host call that waits on the world (a send
// retried inline while the channel is down, a media download, a journal read)
// is not counted: the host bounds those waits itself (outbox.inline_max ends a
// send in "deferred"), so waiting on a channel never turns into a guest fault.
type guestDeadline struct {
	mu sync.Mutex
	// d is the guest time the call was given; left what is left of it.
	d       time.Duration
	left    time.Duration
	started time.Time
	paused  bool
	fired   bool
	timer   *time.Timer
	cancel  context.CancelCauseFunc
}

// startDeadline returns ctx's child that is canceled with errGuestDeadline
// after d of guest time.
func startDeadline(ctx context.Context, d time.Duration) (context.Context, *guestDeadline) {
	ctx, cancel := context.WithCancelCause(ctx)
	g := &guestDeadline{d: d, left: d, started: time.Now(), cancel: cancel}
	g.timer = time.AfterFunc(d, g.expire)
	return ctx, g
}

func (g *guestDeadline) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused || g.fired {
		return // paused meanwhile: Resume re-arms with what was left
	}
	g.fired = true
	g.cancel(errGuestDeadline)
}

// Pause stops the clock while the guest waits in a host call.
func (g *guestDeadline) Pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused || g.fired {
		return
	}
	g.paused = true
	g.timer.Stop()
	g.left -= time.Since(g.started)
}

// Resume restarts the clock with the time the guest has left.
func (g *guestDeadline) Resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused || g.fired {
		return
	}
	g.paused = false
	g.started = time.Now()
	g.timer.Reset(max(g.left, 0))
}

// used is the guest time the call has run so far.
func (g *guestDeadline) used() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	left := g.left
	if !g.paused && !g.fired {
		left -= time.Since(g.started)
	}
	if g.fired {
		left = 0
	}
	return min(max(g.d-left, 0), g.d)
}

// stop ends the deadline and releases the context.
func (g *guestDeadline) stop() {
	g.timer.Stop()
	g.cancel(context.Canceled)
}
