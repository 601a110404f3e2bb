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
	// Stale counts the leases lost to another owner (stale_leases).
	Stale *atomic.Int64
	Log   *slog.Logger
	Clock clock.Clock
}

// Lease is a lease owned by this instance, from now for d.
func (l *Leases) Lease(d time.Duration) durability.Lease {
	now := l.Clock.Now()
	return durability.Lease{Owner: l.Owner, Now: now.UnixMilli(), Until: now.Add(d).UnixMilli()}
}

// Heartbeat extends a lease of length lease through extend until stopped.
func (l *Leases) Heartbeat(lease time.Duration, extend func(ctx context.Context, until int64) error) *Heartbeat {
	return l.HeartbeatAfter(lease, lease/3, extend)
}

// HeartbeatAfter is Heartbeat whose first extension comes after first (a
// lease taken earlier has less than its whole length left).
func (l *Leases) HeartbeatAfter(lease, first time.Duration, extend func(ctx context.Context, until int64) error) *Heartbeat {
	ctx, cancel := context.WithCancel(l.Base)
	h := &Heartbeat{ctx: ctx, cancel: cancel, clock: l.Clock, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(h.exited)
		t := l.Clock.NewTimer(max(first, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-t.C():
				t.Reset(max(lease/3, time.Millisecond))
				until := l.Clock.Now().Add(lease).UnixMilli()
				err := extend(ctx, until)
				if err == nil {
					h.until.Store(until)
				}
				if errors.Is(err, durability.ErrStaleLease) {
					h.lost.Store(true)
					l.Stale.Add(1)
					l.Log.Warn("lease lost to another owner; stopping this work", "err", err)
					cancel()
					return
				}
				if err != nil && ctx.Err() == nil {
					l.Log.Warn("lease heartbeat failed", "err", err)
				}
			}
		}
	}()
	return h
}

// Heartbeat extends a lease every third of its length while work runs. If
// the journal says the lease is stale (another owner claimed the record),
// it counts it and cancels its context, so the work stops.
type Heartbeat struct {
	ctx    context.Context
	cancel context.CancelFunc
	clock  clock.Clock
	lost   atomic.Bool
	once   sync.Once
	done   chan struct{}
	exited chan struct{}
	// until is the lease's expiry as of its last extension (Unix ms).
	until atomic.Int64
}

// Context is the work's context: cancelled once the lease is lost, or
// Release is called.
func (h *Heartbeat) Context() context.Context { return h.ctx }

// Lost reports whether the journal said the lease passed to another owner.
func (h *Heartbeat) Lost() bool { return h.lost.Load() }

// Extended notes the lease's expiry (Unix ms) as extended by its taker
// before the heartbeat started.
func (h *Heartbeat) Extended(until int64) { h.until.Store(until) }

// Held reports an error once the lease has expired by this process's clock
// (its extensions stopped: the process was frozen, or the backend did not
// answer), so work that must not outlive the lease stops before acting,
// even before the heartbeat learns of the loss.
func (h *Heartbeat) Held() error {
	if u := h.until.Load(); u != 0 && h.clock.Now().UnixMilli() >= u {
		return fmt.Errorf("%w: the lease expired at %s by this process's clock", durability.ErrStaleLease, time.UnixMilli(u).Format(time.RFC3339Nano))
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
