package host

import (
	"errors"
	"time"

	"github.com/botrun/botrun/durability"
)

// wakeSweeper asks for a sweep now (an enqueue, a replay, a stop).
func (b *Bot) wakeSweeper() { b.wake.notify() }

// sweepLoop sweeps every durability.poll: due sends, ambiguous sends, due and
// abandoned inbound records, and the retention purge. Its first sweep also
// reclaims the leases this instance id held before this start; so do the next
// ones until those leases would have expired anyway (a claim that skips a row
// locked at that moment gets it on the next sweep, not a lease later).
func (b *Bot) sweepLoop() {
	defer close(b.sweepDone)
	t := time.NewTicker(b.policy.poll)
	defer t.Stop()
	var lastPurge time.Time
	for first := true; ; first = false {
		if b.isStopping() {
			return
		}
		b.sweep(first)
		if b.policy.retention > 0 && time.Since(lastPurge) > min(b.policy.retention, time.Minute) {
			b.purge()
			lastPurge = time.Now()
		}
		select {
		case <-t.C:
		case <-b.wake:
		case <-b.baseCtx.Done():
			return
		}
	}
}

// sweepBatch is the most inbound records one sweep claims: enough that a
// restart with a backlog refills the queue in few sweeps, few enough that the
// claimed records start well within their lease.
func (b *Bot) sweepBatch() int { return max(4*b.cfg.Bot.Workers, 256) }

// reclaimBatch is the most records a reclaiming sweep claims at once.
const reclaimBatch = 20000

// sendClaim is the most due sends one sweep claims: at most half the
// workers, so sends to a slow channel leave the other half to inbound
// messages, and at most 100.
func (b *Bot) sendClaim() int { return min(max(b.cfg.Bot.Workers/2, 1), 100) }

func (b *Bot) sweep(first bool) {
	ctx := b.baseCtx
	var reclaim *durability.Reclaim
	if first || time.Since(b.boot) < max(b.policy.inboxLease, b.policy.outboxLease) {
		reclaim = &durability.Reclaim{Owner: b.policy.instanceID, Before: b.boot.UnixMilli()}
	}
	// Due sends are delivered by the workers, each behind its chat's
	// earlier jobs, so a slow channel never delays the sweep loop, which
	// goes on claiming inbound records; a claim takes at most half the
	// workers' worth of sends. A new claim waits until the last one's sends
	// are delivered, which keeps a chat's sends in order across sweeps.
	if b.sendsOut.Load() == 0 {
		limit := b.sendClaim()
		claimed, err := b.outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: b.sender.outboxLease(), Limit: limit, Reclaim: reclaim})
		if err != nil && ctx.Err() == nil {
			b.log.Error("sweep: claiming due sends failed", "err", err)
		}
		b.sendsOut.Store(int64(len(claimed)))
		b.sendsFull.Store(len(claimed) == limit)
		for i := range claimed {
			c := &claimed[i]
			// Stopping: the lease expires and the send is reclaimed.
			b.dispatch.submit(job{chatKey: chatKey(c.Record.Provider, c.Record.Chat), id: c.Record.Key, send: c})
		}
	}
	room := b.sweepBatch() - b.dispatch.queued()
	if reclaim != nil {
		// A restart's first sweeps take the whole backlog this instance
		// left, oldest first, so each chat's messages are queued in order.
		room = max(room, reclaimBatch)
	}
	if room <= 0 || b.isStopping() {
		return
	}
	now := time.Now()
	l := b.leases.lease(b.policy.inboxLease)
	recs, err := b.inbox.ClaimDue(ctx, durability.ClaimOptions{
		Lease:         l,
		Limit:         room,
		PendingBefore: max(b.boot.UnixMilli(), now.Add(-b.policy.inboxLease).UnixMilli()),
		Reclaim:       reclaim,
	})
	if err != nil && ctx.Err() == nil {
		b.log.Error("sweep: claiming due inbound records failed", "err", err)
	}
	// A full claim may leave more due: the dispatcher wakes the sweeper
	// when its queue runs low, instead of a backlog waiting a poll per
	// batch.
	b.inboxBacklog.Store(len(recs) == room)
	for i := range recs {
		rec := &recs[i]
		// Stopping: the lease expires and the record is reclaimed.
		b.dispatch.submit(job{chatKey: chatKey(rec.Provider, rec.Chat), id: rec.ID, claimed: rec})
	}
}

// queueLow is called by the dispatcher when its queue runs low.
func (b *Bot) queueLow() {
	if b.inboxBacklog.Load() {
		b.wakeSweeper()
	}
}

// purge deletes the done inbound and sent outbound records completed more
// than durability.retention ago; dead letters stay for the operator (botrun
// purge --dead, POST /admin/purge-dead).
func (b *Bot) purge() {
	before := time.Now().Add(-b.policy.retention).UnixMilli()
	ctx := b.baseCtx
	in, err1 := b.inbox.Purge(ctx, before)
	out, err2 := b.outbox.Purge(ctx, before)
	if err := errors.Join(err1, err2); err != nil && ctx.Err() == nil {
		b.log.Error("retention purge failed", "err", err)
		return
	}
	if in+out > 0 {
		b.log.Info("retention purge", "done_inbox", in, "sent_outbox", out)
	}
}
