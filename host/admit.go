package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
)

// ErrStopping is returned by Admit while the bot shuts down; the channel should
// redeliver later.
var ErrStopping = errors.New("bot is stopping")

// ErrQueueFull is wrapped by Admit's error (a channel.RateLimitedError) when
// [bot] max_queue admitted messages already wait for a worker: nothing was
// journaled, and the channel should redeliver after the wait.
var ErrQueueFull = errors.New("admission queue full")

// admitJournalTimeout bounds the inbox journal's write of one admission:
// past it the message is refused (503 with Retry-After), and a write that
// lands after all makes the redelivery a duplicate.
const admitJournalTimeout = 5 * time.Second

// queueFullRetry is the wait a refused admission asks for.
const queueFullRetry = time.Second

// Admit implements channel.Admitter. It journals the message in the inbox
// before any handler runs (a repeated message id is a duplicate and is not
// processed again), then queues it behind its chat's earlier messages. If the
// journal cannot record it, the message is not dispatched and the error tells
// the channel to redeliver, unless durability.fail_open is set. If [bot]
// max_queue messages already wait for a worker, it journals nothing and its
// error wraps ErrQueueFull. On a channel whose session is "leader", a
// replica that does not lead it journals nothing: its error wraps
// lease.ErrNotLeader.
func (b *Bot) Admit(ctx context.Context, providerID string, msg channel.Message) (channel.Admission, error) {
	start := time.Now()
	if b.isStopping() {
		return channel.Admission{}, ErrStopping
	}
	if refused := b.leaders.Refuse(providerID); refused != nil {
		// Only the session's leader holds the transport: a message
		// reaching another replica is left for the channel to redeliver.
		b.metrics.ProviderNotLeader.Add(1)
		return channel.Admission{}, refused
	}
	if msg.ID == "" {
		msg.ID = send.RandomID()
	}
	names := []struct{ what, v string }{{"message id", msg.ID}, {"chat", msg.Chat}, {"sender", msg.From}}
	if in := msg.Interaction; in != nil {
		names = append(names, struct{ what, v string }{"interaction id", in.ID}, struct{ what, v string }{"interaction message", in.Message})
	}
	for _, f := range names {
		if err := abi.CheckName(f.what, f.v); err != nil {
			b.log.Warn("not admitted: the message can never be valid", "provider", providerID, "err", err)
			return channel.Admission{}, fmt.Errorf("%w: %w", channel.ErrInvalidMessage, err)
		}
	}
	id := providerID + ":" + msg.ID
	ctx, span := b.tr.Start(ctx, observe.SpanAdmit)
	defer span.End()
	observe.IDAttr(span, id, providerID)
	at := msg.ReceivedAt
	if at.IsZero() {
		at = b.clock.Now()
	}
	ev := abi.Event{
		ID: id, Provider: providerID, Chat: msg.Chat, From: msg.From, Text: msg.Text,
		Media: mediaToABI(msg.Media), ReceivedAt: at.UnixMilli(),
	}
	if in := msg.Interaction; in != nil {
		ev.Kind, ev.Interaction = abi.EventInteraction, in
		if ev.Text == "" {
			ev.Text = in.Title // a module that knows no interactions reads a message
		}
	}
	jr := rules.Journaled{Event: ev}
	b.serializeMedia(providerID, &jr)
	payload, err := json.Marshal(jr)
	if err != nil {
		return channel.Admission{}, fmt.Errorf("admit %s: %w", id, err)
	}
	if !b.dispatch.Reserve() {
		if b.isStopping() {
			return channel.Admission{}, ErrStopping
		}
		b.metrics.InboundRefused.Add(1)
		return channel.Admission{}, &channel.RateLimitedError{RetryAfter: queueFullRetry,
			Err: fmt.Errorf("%w: %d admitted messages wait for a worker, %s was not journaled: redeliver it later (raise [bot] max_queue or workers if this lasts)", ErrQueueFull, b.cfg.Bot.MaxQueue, id)}
	}
	reserved := true
	defer func() {
		if reserved {
			b.dispatch.Unreserve()
		}
	}()
	// The record is created already claimed: this process handles it next,
	// and a crash leaves it to be reclaimed (one write instead of two).
	l := b.leases.Lease(b.policy.inboxLease)
	jctx, jspan := b.tr.Start(ctx, observe.SpanJournal)
	// Bounded: a journal the network holds (a partition that drops
	// packets) is answered as a refusal the channel redelivers, within
	// its webhook timeout, not left hanging.
	jctx, cancel := context.WithTimeout(jctx, admitJournalTimeout)
	st, rec, err := b.inbox.Put(jctx, durability.InboxPut{ID: id, Provider: providerID, Chat: msg.Chat, Payload: payload}, l.Now, &l)
	cancel()
	observe.Fail(jspan, err)
	jspan.End()
	observe.Fail(span, err)
	if err != nil {
		if ctx.Err() != nil {
			// The client hung up (or the bot is stopping): not a failure of
			// the journal, no alert; the channel redelivers.
			b.log.Info("not admitted: the request ended before it was journaled; the channel must redeliver", "id", id, "err", err)
			return channel.Admission{}, fmt.Errorf("inbox journal: %w", err)
		}
		// A write cut off by its bound may still land (already claimed):
		// dispatching it unjournaled too would answer it twice, so
		// fail_open refuses it like fail-closed.
		if !b.policy.failOpen || errors.Is(err, context.DeadlineExceeded) {
			b.log.Error("not admitted: the inbox journal failed; the channel must redeliver", "id", id, "err", err)
			b.admissionFailed.Refused(b.alerts, providerID, id, err)
			return channel.Admission{}, fmt.Errorf("inbox journal: %w", err)
		}
		b.log.Warn("fail_open: dispatching without a journal record", "id", id, "err", err)
		ev.Attempt = 1
		reserved = false
		b.dispatch.SubmitReserved(dispatch.Job{ChatKey: dispatch.ChatKey(providerID, msg.Chat), ID: id, Event: &ev, Unjournaled: true})
		return channel.Admission{ID: id}, nil
	}
	if st == durability.Exists {
		b.metrics.InboundDuplicates.Add(1)
		return channel.Admission{ID: id, Duplicate: true}, nil
	}
	b.metrics.InboundJournaled.Add(1)
	b.obs.Admitted(time.Since(start))
	// Stopping: the lease expires and the record is reclaimed.
	reserved = false
	b.dispatch.SubmitReserved(dispatch.Job{ChatKey: dispatch.ChatKey(providerID, msg.Chat), ID: id, Claimed: &rec, Live: ev.Media, Trace: span.SpanContext()})
	return channel.Admission{ID: id}, nil
}

func mediaToABI(ms []channel.Media) []abi.Media {
	out := make([]abi.Media, len(ms))
	for i, m := range ms {
		out[i] = abi.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME, Caption: m.Caption}
	}
	return out
}
