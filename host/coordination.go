package host

import (
	"context"
	"errors"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
)

// coordination serializes each chat's turns across the replicas that share
// the backend ([durability] coordination): a chat's turn is a lease with a
// fencing token in the backend's Kv (lease.ChatTurns), and the replica
// holding it runs the chat's unfinished records oldest first, whichever
// replica admitted them. Conversation state lives in the backend and lands
// with each completion, so the next message continues the conversation on
// whichever replica receives it.
type coordination struct {
	order durability.ChatOrder
	turns *lease.ChatTurns
}

// waitingForTurn is the error of a record parked because its chat's turn
// was held elsewhere: the holder runs it next, without its backoff.
const waitingForTurn = "waiting for the chat's turn (coordination)"

// coordinatedTurn runs a claimed record under its chat's turn. The holder of
// a chat's turn runs the chat's unfinished records oldest first, this one
// among them. No worker ever waits for a turn: a record whose chat's turn
// another replica holds is parked (released, due again in one poll, its
// attempt refunded) for that holder, or the next sweep, to run.
func (b *Bot) coordinatedTurn(j dispatch.Job, rec *durability.InboxRecord) {
	ctx := b.baseCtx
	if b.isStopping() {
		b.park(ctx, rec, nowMs())
		return
	}
	t, _, err := b.coord.turns.Acquire(ctx, rec.Provider, rec.Chat)
	if err != nil {
		b.log.Warn("coordination: the chat's turn could not be taken; the record runs again shortly", "id", rec.ID, "err", err)
	}
	if t == nil {
		b.park(ctx, rec, nowMs()+b.policy.poll.Milliseconds())
		return
	}
	b.runChat(j, rec, t)
	if err := t.Release(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("coordination: releasing the chat's turn failed; it expires by itself", "chat", rec.Chat, "err", err)
	}
}

// park releases a claimed record that cannot run now, due at due, with its
// attempt refunded.
func (b *Bot) park(ctx context.Context, rec *durability.InboxRecord, due int64) {
	err := b.inbox.Fail(ctx, rec.ID, rec.Token, waitingForTurn, durability.FailOptions{Now: nowMs(), RetryAt: due, Refund: true})
	if err != nil && !errors.Is(err, durability.ErrStaleLease) && ctx.Err() == nil {
		b.log.Warn("coordination: releasing a waiting record failed; it is reclaimed when its lease expires", "id", rec.ID, "err", err)
	}
}

// runChat runs, under the held turn t, the chat's unfinished records in
// order: the older ones, rec, and the newer ones that are free to claim
// (parked or not started), until the chat has none, or its oldest is held
// by a live replica or waits for its retry. rec, if it cannot run before
// that, is parked behind it.
func (b *Bot) runChat(j dispatch.Job, rec *durability.InboxRecord, t *lease.ChatTurn) {
	ctx := b.baseCtx
	hb := b.leases.Heartbeat(b.coord.turns.TTL(), t.Extend)
	defer hb.Release()
	pending := true // rec has not run yet
	ran := map[string]bool{}
	for hb.Context().Err() == nil {
		oldest, ok, err := b.coord.order.OldestUnfinished(ctx, rec.Provider, rec.Chat)
		if err != nil {
			b.log.Warn("coordination: reading the chat's order failed", "id", rec.ID, "err", err)
			break
		}
		if !ok && pending {
			// Not in the chat's order: finished or claimed again since
			// this job was queued (nothing to do), or admitted before
			// coordination was on (it runs in its place in this queue).
			if cur, err := b.inbox.Get(ctx, rec.ID); err == nil && !cur.State.Terminal() && cur.Token == rec.Token {
				b.runRecord(j, rec, t.Held)
			}
			return
		}
		if !ok || ran[oldest.ID] {
			break // done, or a record that just ran failed: its retry waits
		}
		next, blocked := b.takeNext(ctx, rec, oldest, pending)
		if blocked != 0 {
			if pending {
				b.park(ctx, rec, blocked)
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
		b.runRecord(nj, next, t.Held)
	}
	if pending {
		b.park(ctx, rec, nowMs()+b.policy.poll.Milliseconds())
	}
}

// takeNext decides what the turn's holder does with the chat's oldest
// unfinished record: run it (this job's own record, one of this process's
// claims, or one it claims now), or stop, blocked until the returned time
// (a live replica holds it, or it waits for its retry).
func (b *Bot) takeNext(ctx context.Context, rec *durability.InboxRecord, oldest durability.InboxRecord, pending bool) (*durability.InboxRecord, int64) {
	now := nowMs()
	poll := now + b.policy.poll.Milliseconds()
	switch {
	case oldest.ID == rec.ID && pending:
		if oldest.State != durability.InboxProcessing || oldest.Token != rec.Token {
			return nil, 0 // claimed again elsewhere: no longer this job's
		}
		return rec, 0
	case oldest.State == durability.InboxProcessing && oldest.LeaseUntil > now:
		if oldest.Owner == b.policy.instanceID && oldest.LeasedAt >= b.boot.UnixMilli() {
			return &oldest, 0 // this process's claim, queued: run it here
		}
		return nil, poll // a live replica holds it; it parks it when it finds the turn taken
	case oldest.State == durability.InboxFailed && oldest.RetryAt > now && oldest.Error != waitingForTurn:
		return nil, oldest.RetryAt // the chat waits for its retry
	}
	c, err := b.inbox.Claim(ctx, oldest.ID, b.leases.Lease(b.policy.inboxLease))
	if err != nil {
		return nil, poll
	}
	return &c, 0
}
