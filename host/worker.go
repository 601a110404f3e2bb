package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/wasm"
)

// handle runs one job: claim (unless Admit or the sweeper already did), run the
// handler with a heartbeat started with its turn, then complete with the
// buffered state writes, or fail with a retry or to the dead-letter queue.
func (b *Bot) handle(_ context.Context, j job) {
	ctx := b.baseCtx
	if j.send != nil {
		b.sender.deliverClaimed(ctx, *j.send)
		if b.sendsOut.Add(-1) == 0 && b.sendsFull.Load() {
			b.wakeSweeper() // more may be due
		}
		return
	}
	if j.unjournaled {
		t, _ := b.run(ctx, *j.event, nil)
		t.flushMark(ctx) // no completion to carry the last send's MarkSent
		return
	}
	rec := j.claimed
	if rec == nil {
		r, err := b.inbox.Claim(ctx, j.id, b.inboxLease())
		switch {
		case errors.Is(err, durability.ErrNotClaimable), errors.Is(err, durability.ErrNotFound):
			return // another worker or replica has it, or it is done
		case err != nil:
			b.log.Error("claim failed; the sweeper will retry it", "id", j.id, "err", err)
			return
		}
		rec = &r
	}
	hb, ok := b.turnLease(ctx, rec)
	if !ok {
		return
	}
	defer hb.release()
	if rec.Attempts > b.policy.maxAttempts {
		b.failInbound(ctx, rec, hb, fmt.Errorf("claimed %d times without finishing (durability.inbox.max_attempts = %d): the process died each time", rec.Attempts-1, b.policy.maxAttempts), true)
		return
	}
	if rec.Attempts > 1 {
		b.metrics.inboundReplayed.Add(1)
	}
	var jr journaled
	if err := json.Unmarshal(rec.Payload, &jr); err != nil {
		b.failInbound(ctx, rec, hb, fmt.Errorf("journaled event is unreadable: %w", err), true)
		return
	}
	var reasons []string
	if !useLiveMedia(&jr, j.live) {
		reasons = b.rehydrateMedia(rec.Provider, &jr)
	}
	ev := jr.Event
	ev.Attempt = rec.Attempts
	if rec.Module != "" && rec.Module != b.guest.Digest() {
		// A replay under another module than the one that ran it: its sends
		// may differ; on_diverged settles derived keys.
		b.replaysOnNewModule.Add(1)
		b.log.Warn("replaying under a different module", "id", rec.ID, "ran", short(rec.Module), "now", short(b.guest.Digest()))
	}
	t, err := b.run(hb.ctx, ev, reasons)
	hb.stop()
	if hb.lost.Load() {
		t.flushMark(ctx)
		return // counted as a stale lease; the new owner finishes it
	}
	var he *wasm.HandlerError
	if err == nil || errors.As(err, &he) {
		err := b.complete(ctx, rec, t)
		if errors.Is(err, durability.ErrStaleLease) {
			b.metrics.staleLeases.Add(1)
			b.log.Warn("completion refused: the lease was lost to another owner", "id", rec.ID)
		} else if err != nil {
			b.log.Error("completion failed; the record will be reclaimed and its sends answered from the outbox", "id", rec.ID, "err", err)
		}
		return
	}
	t.flushMark(ctx)
	b.failInbound(ctx, rec, hb, err, rec.Attempts >= b.policy.maxAttempts)
}

// complete lands the inbox completion with the buffered state writes, and the
// last send's deferred MarkSent in the same write where the journal can.
func (b *Bot) complete(ctx context.Context, rec *durability.InboxRecord, t *turn) error {
	now := nowMs()
	digest := t.module
	if m := t.mark; m != nil {
		if cs, ok := b.inbox.(durability.CompleteSender); ok {
			m.hb.stop()
			err := cs.CompleteWithSent(ctx, rec.ID, rec.Token, t.effects(), digest, now,
				[]durability.SentMark{{Key: m.rec.Key, Token: m.rec.Token, Ref: m.ref, Now: m.at}})
			if err == nil {
				t.mark = nil
				m.hb.release()
				return nil
			}
			// Settle them one by one: the errors then say which is stale.
		}
		t.flushMark(ctx)
	}
	return b.inbox.Complete(ctx, rec.ID, rec.Token, t.effects(), digest, now)
}

// run calls the handler for ev and reports its outcome. mediaReasons say which
// of its media are unavailable, and why.
func (b *Bot) run(ctx context.Context, ev abi.Event, mediaReasons []string) (*turn, error) {
	t := b.newTurn(ev)
	t.mediaReasons = mediaReasons
	ran, err := b.guest.Handle(ctx, ev, t)
	t.module = ran
	var he *wasm.HandlerError
	var fault *wasm.FaultError
	if err == nil || errors.As(err, &he) {
		// The guest returned and its instance is free: make the sends it
		// posted. A fault drops them (nothing was journaled; the retry
		// posts them again).
		if ferr := t.flushPosted(ctx); ferr != nil {
			err = fmt.Errorf("making the handler's posted sends: %w", ferr)
			he = nil
		}
	}
	switch {
	case err == nil:
	case errors.As(err, &he):
		b.log.Error("handler returned an error; the message is confirmed, not retried (its sends already happened)", "event", ev.ID, "err", he.Message)
	case errors.As(err, &fault):
		b.log.Error("event failed: guest fault; the instance was discarded", "event", ev.ID, "attempt", ev.Attempt, "kind", fault.Kind, "err", fault.Err)
	default:
		b.log.Error("event failed", "event", ev.ID, "attempt", ev.Attempt, "err", err)
	}
	return t, err
}

// failInbound settles a failed attempt: a retry after inbox.backoff, or dead.
func (b *Bot) failInbound(ctx context.Context, rec *durability.InboxRecord, hb *heartbeat, cause error, dead bool) {
	hb.stop()
	now := time.Now()
	opts := durability.FailOptions{Now: now.UnixMilli(), Dead: dead}
	if !dead {
		opts.RetryAt = now.Add(b.policy.inboxBackoff.wait(rec.Attempts)).UnixMilli()
	}
	err := b.inbox.Fail(ctx, rec.ID, rec.Token, cause.Error(), opts)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		b.metrics.staleLeases.Add(1)
	case err != nil:
		b.log.Error("recording the failure failed; the lease will expire and the record be reclaimed", "id", rec.ID, "err", err)
	case dead:
		b.metrics.inboundDead.Add(1)
		b.alert(Alert{Name: AlertDead, Kind: "inbox", ID: rec.ID, Chat: rec.Chat, Error: cause.Error()})
	default:
		b.log.Info("event will be retried", "id", rec.ID, "attempt", rec.Attempts, "retry_at", time.UnixMilli(opts.RetryAt).Format(time.RFC3339Nano))
	}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
