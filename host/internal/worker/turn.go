package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/turn"
	"github.com/botrun/botrun/host/wasm"
)

// takeTurn runs an inbound job's turn: claim (unless Admit or the sweeper
// already did), run the handler with a heartbeat started with its turn, then
// complete with the buffered state writes, or fail with a retry or to the
// dead-letter queue.
func (w *Worker) takeTurn(j dispatch.Job) {
	ctx := w.c.Base
	if j.Unjournaled {
		t, _ := w.run(ctx, *j.Event, nil, nil)
		t.LandMark(ctx) // no completion to carry the last send's MarkSent
		return
	}
	rec := j.Claimed
	if rec == nil {
		r, err := w.c.Inbox.Claim(ctx, j.ID, w.c.Leases.Lease(w.c.Policy.Lease))
		switch {
		case errors.Is(err, durability.ErrNotClaimable), errors.Is(err, durability.ErrNotFound):
			return // another worker or replica has it, or it is done
		case err != nil:
			w.c.Log.Error("claim failed; the sweeper will retry it", "id", j.ID, "err", err)
			return
		}
		rec = &r
	}
	if w.c.Coord != nil {
		w.coordinatedTurn(j, rec)
		return
	}
	w.runRecord(j, rec, nil)
}

// runRecord runs a claimed record's turn: the handler with a heartbeat, then
// the completion with the buffered state writes (the conversation's
// checkpoint and the record's confirmation are one write), or a retry or the
// dead-letter queue. A completion that fails releases the record to be
// reprocessed at once.
// chatTurn, when set, is the chat turn it runs under (coordination): once it is
// lost by this process's clock the record makes no more sends and does not
// complete.
func (w *Worker) runRecord(j dispatch.Job, rec *durability.InboxRecord, chatTurn func() error) {
	ctx := w.c.Base
	start := w.c.Clock.Now()
	ctx, span := w.c.Tracer.StartUnder(ctx, j.Trace, observe.SpanTurn)
	defer span.End()
	observe.IDAttr(span, rec.ID, rec.Provider)
	hb, ok := w.turnLease(ctx, rec)
	if !ok {
		return
	}
	defer hb.Release()
	defer func() { w.c.Observer.Turned(w.c.Clock.Now().Sub(start)) }()
	if rec.Attempts > w.c.Policy.MaxAttempts {
		w.failInbound(ctx, rec, hb, fmt.Errorf("claimed %d times without finishing (durability.inbox.max_attempts = %d): the process died each time", rec.Attempts-1, w.c.Policy.MaxAttempts), true, nil)
		return
	}
	if rec.Attempts > 1 {
		w.c.Counters.InboundReplayed.Add(1)
	}
	var jr rules.Journaled
	if err := json.Unmarshal(rec.Payload, &jr); err != nil {
		w.failInbound(ctx, rec, hb, fmt.Errorf("journaled event is unreadable: %w", err), true, nil)
		return
	}
	var reasons []string
	if !useLiveMedia(&jr, j.Live) {
		reasons = w.rehydrateMedia(rec.Provider, &jr)
	}
	ev := jr.Event
	ev.Attempt = rec.Attempts
	if rec.Module != "" && rec.Module != w.c.Guest.Digest() {
		// A replay under another module than the one that ran it: its sends
		// may differ; on_diverged settles derived keys.
		w.c.Counters.ReplaysOnNewModule.Add(1)
		w.c.Log.WarnContext(ctx, "replaying under a different module", "id", rec.ID, "ran", short(rec.Module), "now", short(w.c.Guest.Digest()))
	}
	var held func() error
	if w.c.Coord != nil {
		held = func() error {
			if err := hb.Held(); err != nil || chatTurn == nil {
				return err
			}
			return chatTurn()
		}
	}
	runCtx := hb.Context()
	if span.IsRecording() {
		runCtx = trace.ContextWithSpan(runCtx, span)
	}
	t, err := w.run(runCtx, ev, reasons, held)
	hb.Stop()
	if hb.Lost() {
		t.LandMark(ctx)
		return // counted as a stale lease; the new owner finishes it
	}
	var he *wasm.HandlerError
	if held != nil && (err == nil || errors.As(err, &he)) {
		if lost := held(); lost != nil {
			t.LandMark(ctx)
			w.c.Counters.StaleLeases.Add(1)
			w.c.Log.WarnContext(ctx, "not completed: the lease or the chat's turn expired while the handler ran; the record runs again", "id", rec.ID, "err", lost)
			return
		}
	}
	if err == nil || errors.As(err, &he) {
		cctx, cspan := w.c.Tracer.Start(ctx, observe.SpanComplete)
		err := w.complete(cctx, rec, t)
		observe.Fail(cspan, err)
		cspan.End()
		if errors.Is(err, durability.ErrStaleLease) {
			w.c.Counters.StaleLeases.Add(1)
			w.c.Log.WarnContext(ctx, "completion refused: the lease was lost to another owner", "id", rec.ID)
		} else if err != nil {
			w.c.Log.ErrorContext(ctx, "completion failed; the record is released to run again, its sends answered from the outbox", "id", rec.ID, "err", err)
			w.releaseUncompleted(ctx, rec, err)
		}
		return
	}
	t.LandMark(ctx)
	w.failInbound(ctx, rec, hb, err, rec.Attempts >= w.c.Policy.MaxAttempts, t.Inputs())
}

// releaseUncompleted gives back a record whose completion failed, due now:
// its state writes did not land, so it runs again (charged: a completion
// that always fails ends in the dead-letter queue). If the release fails
// too, the record is reclaimed when its lease expires.
func (w *Worker) releaseUncompleted(ctx context.Context, rec *durability.InboxRecord, cause error) {
	now := w.nowMs()
	dead := rec.Attempts >= w.c.Policy.MaxAttempts
	err := w.c.Inbox.Fail(ctx, rec.ID, rec.Token, fmt.Sprintf("completion failed: %v", cause), durability.FailOptions{Now: now, RetryAt: now, Dead: dead})
	if err != nil && !errors.Is(err, durability.ErrStaleLease) && ctx.Err() == nil {
		w.c.Log.WarnContext(ctx, "releasing the record failed; it is reclaimed when its lease expires", "id", rec.ID, "err", err)
	}
	if err == nil && !dead {
		w.c.Wake.Notify()
	}
}

// complete lands the inbox completion with the buffered state writes, and the
// last send's deferred MarkSent in the same write where the journal can.
func (w *Worker) complete(ctx context.Context, rec *durability.InboxRecord, t *turn.Turn) error {
	c := durability.Completion{Effects: t.Effects(), Module: t.Module(), Inputs: t.Inputs(), Now: w.nowMs()}
	if m := t.Mark(); m != nil {
		if cs, ok := w.c.Inbox.(durability.CompleteSender); ok {
			m.Pause()
			err := cs.CompleteWithSent(ctx, rec.ID, rec.Token, c, []durability.SentMark{m.SentMark()})
			if err == nil {
				t.MarkLanded()
				m.Landed()
				return nil
			}
			// Settle them one by one: the errors then say which is stale.
		}
		t.LandMark(ctx)
	}
	return w.c.Inbox.Complete(ctx, rec.ID, rec.Token, c)
}

// run calls the handler for ev and reports its outcome. mediaReasons say which
// of its media are unavailable, and why.
func (w *Worker) run(ctx context.Context, ev abi.Event, mediaReasons []string, held func() error) (*turn.Turn, error) {
	t := turn.New(w.c.Turn, ev, mediaReasons, held)
	gctx, gspan := w.c.Tracer.Start(ctx, observe.SpanGuest)
	start := w.c.Clock.Now()
	ran, err := w.c.Guest.Handle(gctx, ev, t)
	w.c.Observer.Guest.Observe(w.c.Clock.Now().Sub(start).Seconds())
	observe.Fail(gspan, err)
	gspan.End()
	t.Ran(ran)
	var he *wasm.HandlerError
	var fault *wasm.FaultError
	if err == nil || errors.As(err, &he) {
		// The guest returned and its instance is free: make the sends it
		// posted. A fault drops them (nothing was journaled; the retry
		// posts them again).
		if ferr := t.FlushPosted(ctx); ferr != nil {
			err = fmt.Errorf("making the handler's posted sends: %w", ferr)
			he = nil
		}
	}
	switch {
	case err == nil:
	case errors.As(err, &he):
		w.c.Log.ErrorContext(ctx, "handler returned an error; the message is confirmed, not retried (its sends already happened)", "event", ev.ID, "err", he.Message)
		w.c.Alerts.Emit(observe.Alert{Name: observe.AlertHandlerError, ID: ev.ID, Chat: ev.Chat, Error: he.Message})
	case errors.As(err, &fault):
		w.c.Log.ErrorContext(ctx, "event failed: guest fault; the instance was discarded", "event", ev.ID, "attempt", ev.Attempt, "kind", fault.Kind, "err", fault.Err)
	default:
		w.c.Log.ErrorContext(ctx, "event failed", "event", ev.ID, "attempt", ev.Attempt, "err", err)
	}
	return t, err
}

// failInbound settles a failed attempt: a retry after inbox.backoff, or dead.
// recorded are the attempt's recorded inputs (nil: its handler did not run).
func (w *Worker) failInbound(ctx context.Context, rec *durability.InboxRecord, hb *lease.Heartbeat, cause error, dead bool, recorded []byte) {
	hb.Stop()
	now := w.c.Clock.Now()
	opts := durability.FailOptions{Now: now.UnixMilli(), Dead: dead, Inputs: recorded}
	if !dead {
		opts.RetryAt = now.Add(w.c.Policy.Backoff.Wait(rec.Attempts)).UnixMilli()
	}
	err := w.c.Inbox.Fail(ctx, rec.ID, rec.Token, cause.Error(), opts)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		w.c.Counters.StaleLeases.Add(1)
	case err != nil:
		w.c.Log.ErrorContext(ctx, "recording the failure failed; the lease will expire and the record be reclaimed", "id", rec.ID, "err", err)
	case dead:
		w.c.Counters.InboundDead.Add(1)
		w.c.Alerts.Emit(observe.Alert{Name: observe.AlertDead, Kind: "inbox", ID: rec.ID, Chat: rec.Chat, Error: cause.Error()})
	default:
		w.c.Log.InfoContext(ctx, "event will be retried", "id", rec.ID, "attempt", rec.Attempts, "retry_at", time.UnixMilli(opts.RetryAt).Format(time.RFC3339Nano))
	}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// turnLease starts the heartbeat of a claimed record as its turn starts. A
// record waits in its chat's queue under the lease its claim gave it, not
// extended (a backlog costs no goroutines and no writes). If a third of the
// lease is gone, the turn first extends it; if the journal refuses, the lease
// expired while queued and another owner (a replica, or this process's
// sweeper, which queues the record again under its new token) claimed it:
// the fencing token decides, and this turn is skipped.
func (w *Worker) turnLease(ctx context.Context, rec *durability.InboxRecord) (*lease.Heartbeat, bool) {
	length := w.c.Policy.Lease
	now := w.c.Clock.Now()
	first := time.UnixMilli(rec.LeaseUntil).Sub(now) - 2*length/3
	if first <= 0 {
		until := now.Add(length).UnixMilli()
		err := w.c.Inbox.Extend(ctx, rec.ID, rec.Token, until)
		switch {
		case errors.Is(err, durability.ErrStaleLease):
			w.c.Counters.StaleLeases.Add(1)
			w.c.Log.Warn("lease lost while queued: another owner claimed the record; skipping it here", "id", rec.ID)
			return nil, false
		case err != nil:
			w.c.Log.Error("extending the lease at the turn's start failed; the record is reclaimed when its lease expires", "id", rec.ID, "err", err)
			return nil, false
		}
		rec.LeaseUntil, first = until, length/3
	}
	id, token := rec.ID, rec.Token
	hb := w.c.Leases.HeartbeatAfter(length, first, rec.LeaseUntil, func(ctx context.Context, until int64) error {
		return w.c.Inbox.Extend(ctx, id, token, until)
	})
	return hb, true
}

// useLiveMedia gives the first run, in the process that admitted the message,
// the channel's own references: media that could not be made durable still
// download live. Codecs rebuild the same references, so replays see the same
// event.
func useLiveMedia(j *rules.Journaled, live []abi.Media) bool {
	if len(live) == 0 || len(live) != len(j.Media) {
		return false
	}
	for i := range j.Media {
		j.Media[i].Ref, j.Media[i].URL = live[i].Ref, live[i].URL
	}
	return true
}

// rehydrateMedia rebuilds the references of a journaled event before its
// handler runs, and returns for each media why it is unavailable ("" when it
// is not). A reference that cannot be rebuilt leaves that media without a ref
// (media_load fails with the reason); the message is processed all the same.
func (w *Worker) rehydrateMedia(recProvider string, j *rules.Journaled) []string {
	if len(j.DurableMedia) == 0 {
		return nil
	}
	reasons := make([]string, len(j.Media))
	for i, d := range j.DurableMedia {
		if d == nil || i >= len(j.Media) {
			continue
		}
		if d.Stored == nil {
			reasons[i] = abi.MediaNotDurable
			continue
		}
		codec, ok := w.c.Channels[d.Provider].(channel.MediaRefCodec)
		if !ok || d.Provider != recProvider {
			reasons[i] = abi.MediaProviderMismatch
			w.c.Log.Warn("media reference unavailable", "event", j.ID, "reason", reasons[i], "stored_by", d.Provider)
			continue
		}
		m, err := codec.RehydrateMediaRef(*d.Stored)
		if err != nil {
			reasons[i] = abi.MediaRehydrateFailed
			w.c.Log.Warn("media reference unavailable", "event", j.ID, "reason", reasons[i], "err", err)
			continue
		}
		j.Media[i].Ref, j.Media[i].URL = m.Ref, m.URL
	}
	return reasons
}
