package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider"
)

// wakeSweeper asks for a sweep now (an enqueue, a replay, a stop).
func (b *Bot) wakeSweeper() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// sweepLoop sweeps every durability.poll: due sends, ambiguous sends, due and
// abandoned inbound records, and the retention purge. Its first sweep also
// reclaims the leases this instance id held before this start; so do the next
// ones until those leases would have expired anyway (a claim that skips a row
// locked at that moment gets it on the next sweep, not a lease later).
func (b *Bot) sweepLoop() {
	defer close(b.sweepDone)
	defer b.delivering.Wait()
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

// Sweeper delivery: at most deliveryChats chats' due sends are delivered at
// once, each chat's in order.
const deliveryChats = 16

func (b *Bot) sweep(first bool) {
	ctx := b.baseCtx
	var reclaim *durability.Reclaim
	if first || time.Since(b.boot) < max(b.policy.inboxLease, b.policy.outboxLease) {
		reclaim = &durability.Reclaim{Owner: b.policy.instanceID, Before: b.boot.UnixMilli()}
	}
	// Due sends are delivered beside the sweep loop, so a slow channel
	// delays neither inbound recovery nor the next sweep; a new claim waits
	// until the last one's deliveries are done, which keeps a chat's sends
	// in order across sweeps.
	if b.deliveryBusy.CompareAndSwap(false, true) {
		const limit = 100
		claimed, err := b.outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: b.outboxLease(), Limit: limit, Reclaim: reclaim})
		if err != nil && ctx.Err() == nil {
			b.log.Error("sweep: claiming due sends failed", "err", err)
		}
		if len(claimed) == 0 {
			b.deliveryBusy.Store(false)
		} else {
			b.delivering.Go(func() {
				b.deliverAll(ctx, claimed)
				b.deliveryBusy.Store(false)
				if len(claimed) == limit {
					b.wakeSweeper() // more may be due
				}
			})
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
	l := b.inboxLease()
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

// deliverAll delivers the sends one sweep claimed: each chat's in the order
// claimed, up to deliveryChats chats at once.
func (b *Bot) deliverAll(ctx context.Context, claimed []durability.ClaimedSend) {
	var order []string
	byChat := map[string][]durability.ClaimedSend{}
	for _, c := range claimed {
		k := chatKey(c.Record.Provider, c.Record.Chat)
		if _, ok := byChat[k]; !ok {
			order = append(order, k)
		}
		byChat[k] = append(byChat[k], c)
	}
	slots := make(chan struct{}, deliveryChats)
	var wg sync.WaitGroup
	for _, k := range order {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for _, c := range byChat[k] {
				if b.isStopping() {
					return // unfinished claims expire and are reclaimed
				}
				b.deliverClaimed(ctx, c)
			}
		})
	}
	wg.Wait()
}

// deliverClaimed delivers one send the sweeper claimed.
func (b *Bot) deliverClaimed(ctx context.Context, c durability.ClaimedSend) {
	rec := c.Record
	now := time.Now().UnixMilli()
	if c.Ambiguous {
		b.metrics.outboxAmbiguous.Add(1)
		b.emit(Event{Name: EventAmbiguous, Key: rec.Key, Chat: rec.Chat})
		to := durability.OutboxUnknown
		if b.policy.resend {
			to = durability.OutboxPending
		}
		if err := b.outbox.ResolveAmbiguous(ctx, rec.Key, rec.Token, to, now); !b.noteFailWrite(rec.Key, err) {
			return
		}
		if to == durability.OutboxPending {
			b.wakeSweeper()
		}
		return
	}
	if rec.PreviousPart != "" {
		prev, err := b.outbox.Get(ctx, rec.PreviousPart)
		switch {
		case errors.Is(err, durability.ErrNotFound), err == nil && (prev.State == durability.OutboxSent || prev.State == durability.OutboxUnknown):
		case err == nil && prev.State == durability.OutboxDead:
			b.settleFailure(ctx, rec, &permanentError{fmt.Errorf("previous part %s is dead", prev.Key)}, time.Time{})
			return
		default:
			// Waiting behind an earlier part is not an attempt.
			err := b.outbox.MarkFailed(ctx, rec.Key, rec.Token, "waiting for "+rec.PreviousPart,
				durability.FailOptions{Now: now, RetryAt: now + b.policy.poll.Milliseconds(), Refund: true})
			b.noteFailWrite(rec.Key, err)
			return
		}
	}
	prov, ok := b.providers[rec.Provider]
	if !ok {
		b.settleFailure(ctx, rec, &permanentError{fmt.Errorf("provider %q is not configured", rec.Provider)}, time.Time{})
		return
	}
	if rec, ok = b.splitJournaled(ctx, rec); !ok {
		return
	}
	ref, hb, err := b.call(prov, rec)
	hb.stop()
	defer hb.release()
	if err != nil {
		b.settleFailure(ctx, rec, err, time.Time{})
		return
	}
	b.markSent(ctx, rec, ref)
}

// splitJournaled splits a record whose text is over the channel's limit (it
// was journaled by an older version, or with a larger limit): the parts after
// the first are journaled as key#2, key#3, … before the first is sent under the
// record's own key, so a retry journals and sends nothing twice.
func (b *Bot) splitJournaled(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, bool) {
	var m outMsg
	if json.Unmarshal(rec.Payload, &m) != nil {
		return rec, true // call reports it
	}
	texts := provider.SplitText(m.Text, b.textLimit(rec.Provider))
	if len(texts) == 1 {
		return rec, true
	}
	s := sendSpec{provider: rec.Provider, chat: rec.Chat, msg: m, key: rec.Key, inbound: rec.Inbound}
	ps := b.parts(s)
	for _, p := range ps[1:] {
		if _, err := b.journal(ctx, s, p); err != nil {
			b.log.Error("splitting a journaled send failed", "key", rec.Key, "err", err)
			return rec, false
		}
	}
	rec.Payload = ps[0].payload
	return rec, true
}

// purge deletes done and sent records older than durability.retention.
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
		b.log.Info("retention purge", "inbox", in, "outbox", out)
	}
}
