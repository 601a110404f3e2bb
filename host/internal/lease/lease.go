// Package lease is every lease the message path holds: a record's lease in
// a journal (an inbox record's turn, an outbox send's delivery) kept alive
// by a heartbeat, and a chat's turn across replicas ([durability]
// coordination), a fenced lease in the backend's Kv, and this replica's
// elections for the channels whose session one replica leads (Election,
// over a kvlease lease).
//
// lease imports durability, host/channel, host/channel/kvlease and
// host/internal/clock; it never imports host.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/clock"
)

// Leases hands out this instance's leases and keeps them alive with
// heartbeats, for the turns and the sender alike.
type Leases struct {
	// Owner is durability.instance_id.
	Owner string
	// Base is cancelled when the bot stops or crashes: every heartbeat's
	// context derives from it.
	Base context.Context
	// Stale counts the leases lost to another owner, or expired
	// unextended (stale_leases).
	Stale *atomic.Int64
	Log   *slog.Logger
	Clock clock.Clock
}

// Lease is a lease owned by this instance, from now for d.
func (l *Leases) Lease(d time.Duration) durability.Lease {
	now := l.Clock.Now()
	return durability.Lease{Owner: l.Owner, Now: now.UnixMilli(), Until: now.Add(d).UnixMilli()}
}

// Heartbeat extends a lease of length lease, taken to expire at until
// (Unix ms; 0: not known), through extend until stopped.
func (l *Leases) Heartbeat(lease time.Duration, until int64, extend func(ctx context.Context, until int64) error) *Heartbeat {
	return l.HeartbeatAfter(lease, lease/3, until, extend)
}

// HeartbeatAfter is Heartbeat whose first extension comes after first (a
// lease taken earlier has less than its whole length left), at most a third
// of the lease, and before half the time left to until.
//
// The lease's expiry, as this process counts it, is on the monotonic clock
// (Clock.Elapsed): the time left to until when the heartbeat starts (at
// most a lease), then a lease from the moment each successful extension was
// sent, each less a tenth of the lease (a margin against other replicas'
// clocks and a send in flight). An extension is not waited on past it, and
// once it has passed with the last extension failed (the journal
// unreachable: a partition, a dead server) the work's context is cancelled,
// as for a lease lost to another owner: the work stops before another
// replica may claim the record. Passed with no failure (until was stale),
// an extension is tried at once and decides. A step of the wall clock moves
// none of this.
func (l *Leases) HeartbeatAfter(lease, first time.Duration, until int64, extend func(ctx context.Context, until int64) error) *Heartbeat {
	ctx, cancel := context.WithCancel(l.Base)
	h := &Heartbeat{ctx: ctx, cancel: cancel, clock: l.Clock, done: make(chan struct{}), exited: make(chan struct{})}
	margin := lease / 10
	first = min(first, lease/3)
	if until > 0 {
		left := min(time.Duration(until-l.Clock.Now().UnixMilli())*time.Millisecond, lease) - margin
		h.until.Store(until)
		h.deadline.Store(int64(l.Clock.Elapsed() + left))
		h.known.Store(true)
		first = min(first, left/2)
	}
	lose := func(msg string, err error) {
		h.lost.Store(true)
		l.Stale.Add(1)
		l.Log.Warn(msg, "err", err)
		cancel()
	}
	const expired = "lease expired without an extension (the journal did not answer); stopping this work, which runs again once reclaimed"
	go func() {
		defer close(h.exited)
		t := l.Clock.NewTimer(max(first, time.Millisecond))
		defer t.Stop()
		// expiry fires at the lease's expiry (while it is not known, it
		// looks again every third).
		expiry := l.Clock.NewTimer(h.untilExpiry(lease / 3))
		defer expiry.Stop()
		// failed is set while the last extension failed.
		var failed error
		// try extends the lease, waiting at most wait: it reports false
		// once the work must stop.
		try := func(wait time.Duration) bool {
			sent := l.Clock.Elapsed()
			until := l.Clock.Now().Add(lease).UnixMilli()
			ectx, done := context.WithTimeout(ctx, max(wait, time.Millisecond))
			err := extend(ectx, until)
			done()
			switch {
			case err == nil:
				failed = nil
				h.until.Store(until)
				h.deadline.Store(int64(sent + lease - margin))
				h.known.Store(true)
				expiry.Reset(h.untilExpiry(lease / 3))
			case errors.Is(err, durability.ErrStaleLease):
				lose("lease lost to another owner; stopping this work", err)
				return false
			case ctx.Err() != nil:
				return false
			default:
				failed = err
				if left, known := h.left(); known && left <= 0 {
					lose(expired, fmt.Errorf("%w: the last extension: %w", durability.ErrStaleLease, err))
					return false
				}
				l.Log.Warn("lease heartbeat failed", "err", err)
			}
			return true
		}
		for {
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-expiry.C():
				left, known := h.left()
				switch {
				case !known || left > 0:
					expiry.Reset(h.untilExpiry(lease / 3))
				case failed != nil:
					lose(expired, fmt.Errorf("%w: the last extension: %w", durability.ErrStaleLease, failed))
					return
				case !try(margin):
					return
				}
			case <-t.C():
				t.Reset(max(lease/3, time.Millisecond))
				wait, known := h.left()
				if !known {
					wait = lease / 3
				}
				if !try(wait) {
					return
				}
			}
		}
	}()
	return h
}

// Heartbeat extends a lease every third of its length while work runs. If
// the journal says the lease is stale (another owner claimed the record),
// or the lease expires unextended, it counts it and cancels its context, so
// the work stops.
type Heartbeat struct {
	ctx    context.Context
	cancel context.CancelFunc
	clock  clock.Clock
	lost   atomic.Bool
	once   sync.Once
	done   chan struct{}
	exited chan struct{}
	// until is the lease's expiry as of its last extension (Unix ms);
	// deadline is this process's count of it on the monotonic clock (a
	// Clock.Elapsed reading, less the margin), known once set.
	until    atomic.Int64
	deadline atomic.Int64
	known    atomic.Bool
}

// Context is the work's context: cancelled once the lease is lost, or
// Release is called.
func (h *Heartbeat) Context() context.Context { return h.ctx }

// Lost reports whether the journal said the lease passed to another owner,
// or it expired unextended.
func (h *Heartbeat) Lost() bool { return h.lost.Load() }

// left is the time to the lease's expiry on the monotonic clock; known is
// false until the taker's until or an extension set it.
func (h *Heartbeat) left() (left time.Duration, known bool) {
	if !h.known.Load() {
		return 0, false
	}
	return time.Duration(h.deadline.Load()) - h.clock.Elapsed(), true
}

// untilExpiry is the time left to the expiry, at least a millisecond, or
// unknown while it is not known.
func (h *Heartbeat) untilExpiry(unknown time.Duration) time.Duration {
	left, known := h.left()
	if !known {
		left = unknown
	}
	return max(left, time.Millisecond)
}

// Held reports an error once the lease has expired by this process's count
// (its extensions stopped: the process was frozen, or the backend did not
// answer), so work that must not outlive the lease stops before acting,
// even before the heartbeat learns of the loss.
func (h *Heartbeat) Held() error {
	if left, known := h.left(); known && left <= 0 {
		return fmt.Errorf("%w: the lease (until %s) expired by this process's count", durability.ErrStaleLease, time.UnixMilli(h.until.Load()).Format(time.RFC3339Nano))
	}
	return nil
}

// Stop ends the heartbeat and waits for an extension in flight, so the
// caller's next write comes after it.
func (h *Heartbeat) Stop() {
	h.once.Do(func() { close(h.done) })
	<-h.exited
}

// Release stops the heartbeat and cancels its context.
func (h *Heartbeat) Release() {
	h.Stop()
	h.cancel()
}
