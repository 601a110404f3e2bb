package worker

import (
	"context"
	"errors"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
)

// waitingForTurn is the error of a record parked because its chat's turn
// was held elsewhere: the holder runs it next, without its backoff.
const waitingForTurn = "waiting for the chat's turn (coordination)"

// coordinatedTurn runs a claimed record under its chat's turn. The holder of
// a chat's turn runs the chat's unfinished records oldest first, this one
// among them. No worker ever waits for a turn: a record whose chat's turn
// another replica holds is parked (released, due again in one poll, its
// attempt refunded) for that holder, or the next sweep, to run.
func (w *Worker) coordinatedTurn(j dispatch.Job, rec *durability.InboxRecord) {
	ctx := w.c.Base
	if w.c.Stopping() {
		w.park(ctx, rec, w.nowMs())
		return
	}
	t, _, err := w.c.Coord.Turns.Acquire(ctx, rec.Provider, rec.Chat)
	if err != nil {
		w.c.Log.Warn("coordination: the chat's turn could not be taken; the record runs again shortly", "id", rec.ID, "err", err)
	}
	if t == nil {
		w.park(ctx, rec, w.nowMs()+w.c.Policy.Poll.Milliseconds())
		return
	}
	w.runChat(j, rec, t)
	if err := t.Release(ctx); err != nil && ctx.Err() == nil {
		w.c.Log.Warn("coordination: releasing the chat's turn failed; it expires by itself", "chat", rec.Chat, "err", err)
	}
}

// park releases a claimed record that cannot run now, due at due, with its
// attempt refunded.
func (w *Worker) park(ctx context.Context, rec *durability.InboxRecord, due int64) {
	err := w.c.Inbox.Fail(ctx, rec.ID, rec.Token, waitingForTurn, durability.FailOptions{Now: w.nowMs(), RetryAt: due, Refund: true})
	if err != nil && !errors.Is(err, durability.ErrStaleLease) && ctx.Err() == nil {
		w.c.Log.Warn("coordination: releasing a waiting record failed; it is reclaimed when its lease expires", "id", rec.ID, "err", err)
	}
}

// runChat runs, under the held turn t, the chat's unfinished records in
// order: the older ones, rec, and the newer ones that are free to claim
// (parked or not started), until the chat has none, or its oldest is held
// by a live replica or waits for its retry. rec, if it cannot run before
// that, is parked behind it.
func (w *Worker) runChat(j dispatch.Job, rec *durability.InboxRecord, t *lease.ChatTurn) {
	ctx := w.c.Base
	hb := w.c.Leases.Heartbeat(w.c.Coord.Turns.TTL(), t.Until(), t.Extend)
	defer hb.Release()
	pending := true // rec has not run yet
	ran := map[string]bool{}
	for hb.Context().Err() == nil {
		oldest, ok, err := w.c.Coord.Order.OldestUnfinished(ctx, rec.Provider, rec.Chat)
		if err != nil {
			w.c.Log.Warn("coordination: reading the chat's order failed", "id", rec.ID, "err", err)
			break
		}
		if !ok && pending {
			// Not in the chat's order: finished or claimed again since
			// this job was queued (nothing to do), or admitted before
			// coordination was on (it runs in its place in this queue).
			if cur, err := w.c.Inbox.Get(ctx, rec.ID); err == nil && !cur.State.Terminal() && cur.Token == rec.Token {
				w.runRecord(j, rec, t.Held)
			}
			return
		}
		if !ok || ran[oldest.ID] {
			break // done, or a record that just ran failed: its retry waits
		}
		next, blocked := w.takeNext(ctx, rec, oldest, pending)
		if blocked != 0 {
			if pending {
				w.park(ctx, rec, blocked)
				pending = false
			}
			break
		}
		if next == nil {
			break
		}
		ran[next.ID] = true
		nj := dispatch.Job{ChatKey: j.ChatKey, ID: next.ID}
		if next.ID == rec.ID {
			nj, pending = j, false
		}
		w.runRecord(nj, next, t.Held)
	}
	if pending {
		w.park(ctx, rec, w.nowMs()+w.c.Policy.Poll.Milliseconds())
	}
}

// takeNext decides what the turn's holder does with the chat's oldest
// unfinished record: run it (this job's own record, one of this process's
// claims, or one it claims now), or stop, blocked until the returned time
// (a live replica holds it, or it waits for its retry).
func (w *Worker) takeNext(ctx context.Context, rec *durability.InboxRecord, oldest durability.InboxRecord, pending bool) (*durability.InboxRecord, int64) {
	now := w.nowMs()
	poll := now + w.c.Policy.Poll.Milliseconds()
	switch {
	case oldest.ID == rec.ID && pending:
		if oldest.State != durability.InboxProcessing || oldest.Token != rec.Token {
			return nil, 0 // claimed again elsewhere: no longer this job's
		}
		return rec, 0
	case oldest.State == durability.InboxProcessing && oldest.LeaseUntil > now:
		if oldest.Owner == w.c.Policy.Instance && oldest.LeasedAt >= w.c.Boot.UnixMilli() {
			return &oldest, 0 // this process's claim, queued: run it here
		}
		return nil, poll // a live replica holds it; it parks it when it finds the turn taken
	case oldest.State == durability.InboxFailed && oldest.RetryAt > now && oldest.Error != waitingForTurn:
		return nil, oldest.RetryAt // the chat waits for its retry
	}
	c, err := w.c.Inbox.Claim(ctx, oldest.ID, w.c.Leases.Lease(w.c.Policy.Lease))
	if err != nil {
		return nil, poll
	}
	return &c, 0
}
