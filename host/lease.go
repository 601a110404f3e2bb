package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/observe"
)

// heartbeat extends a lease every third of its length while work runs. If the
// journal says the lease is stale (another owner claimed the record), it counts
// it and cancels ctx, so the work stops.
type heartbeat struct {
	ctx    context.Context
	cancel context.CancelFunc
	lost   atomic.Bool
	once   sync.Once
	done   chan struct{}
	exited chan struct{}
	// until is the lease's expiry as of its last extension (Unix ms).
	until atomic.Int64
}

// held reports an error once the lease has expired by this process's clock
// (its extensions stopped: the process was frozen, or the backend did not
// answer), so work that must not outlive the lease stops before acting,
// even before the heartbeat learns of the loss.
func (h *heartbeat) held() error {
	if u := h.until.Load(); u != 0 && time.Now().UnixMilli() >= u {
		return fmt.Errorf("%w: the lease expired at %s by this process's clock", durability.ErrStaleLease, time.UnixMilli(u).Format(time.RFC3339Nano))
	}
	return nil
}

// leases hands out this instance's leases and keeps them alive with
// heartbeats, for the turns and the sender alike.
type leases struct {
	// owner is durability.instance_id.
	owner string
	// base is cancelled when the bot stops or crashes.
	base    context.Context
	metrics *observe.Counters
	log     *slog.Logger
}

// lease is a lease owned by this instance, from now for d.
func (l *leases) lease(d time.Duration) durability.Lease {
	now := time.Now()
	return durability.Lease{Owner: l.owner, Now: now.UnixMilli(), Until: now.Add(d).UnixMilli()}
}

// heartbeat extends a lease of length lease through extend until stopped.
func (l *leases) heartbeat(lease time.Duration, extend func(ctx context.Context, until int64) error) *heartbeat {
	return l.heartbeatAfter(lease, lease/3, extend)
}

// heartbeatAfter is heartbeat whose first extension comes after first (a
// lease taken earlier has less than its whole length left).
func (l *leases) heartbeatAfter(lease, first time.Duration, extend func(ctx context.Context, until int64) error) *heartbeat {
	ctx, cancel := context.WithCancel(l.base)
	h := &heartbeat{ctx: ctx, cancel: cancel, done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(h.exited)
		t := time.NewTimer(max(first, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(max(lease/3, time.Millisecond))
				until := time.Now().Add(lease).UnixMilli()
				err := extend(ctx, until)
				if err == nil {
					h.until.Store(until)
				}
				if errors.Is(err, durability.ErrStaleLease) {
					h.lost.Store(true)
					l.metrics.StaleLeases.Add(1)
					l.log.Warn("lease lost to another owner; stopping this work", "err", err)
					cancel()
					return
				}
				if err != nil && ctx.Err() == nil {
					l.log.Warn("lease heartbeat failed", "err", err)
				}
			}
		}
	}()
	return h
}

// stop ends the heartbeat and waits for an extension in flight, so the
// caller's next write comes after it.
func (h *heartbeat) stop() {
	h.once.Do(func() { close(h.done) })
	<-h.exited
}

// release stops the heartbeat and cancels its context.
func (h *heartbeat) release() {
	h.stop()
	h.cancel()
}

// turnLease starts the heartbeat of a claimed record as its turn starts. A
// record waits in its chat's queue under the lease its claim gave it, not
// extended (a backlog costs no goroutines and no writes). If a third of the
// lease is gone, the turn first extends it; if the journal refuses, the lease
// expired while queued and another owner (a replica, or this process's
// sweeper, which queues the record again under its new token) claimed it:
// the fencing token decides, and this turn is skipped.
func (b *Bot) turnLease(ctx context.Context, rec *durability.InboxRecord) (*heartbeat, bool) {
	lease := b.policy.inboxLease
	now := time.Now()
	first := time.UnixMilli(rec.LeaseUntil).Sub(now) - 2*lease/3
	if first <= 0 {
		until := now.Add(lease).UnixMilli()
		err := b.inbox.Extend(ctx, rec.ID, rec.Token, until)
		switch {
		case errors.Is(err, durability.ErrStaleLease):
			b.metrics.StaleLeases.Add(1)
			b.log.Warn("lease lost while queued: another owner claimed the record; skipping it here", "id", rec.ID)
			return nil, false
		case err != nil:
			b.log.Error("extending the lease at the turn's start failed; the record is reclaimed when its lease expires", "id", rec.ID, "err", err)
			return nil, false
		}
		rec.LeaseUntil, first = until, lease/3
	}
	id, token := rec.ID, rec.Token
	hb := b.leases.heartbeatAfter(lease, first, func(ctx context.Context, until int64) error {
		return b.inbox.Extend(ctx, id, token, until)
	})
	hb.until.Store(rec.LeaseUntil)
	return hb, true
}
