package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// turn is one inbound event's run, from its claim to its completion
// (takeTurn): the handler runs against it, and it answers the handler's host
// calls (wasm.Env). It numbers the event's sends, so the n-th send without an explicit key gets "<event id>:<n>",
// and buffers state writes until the inbox completion commits them.
type turn struct {
	sender    *sender
	state     durability.StateStore
	providers map[string]channel.Channel
	metrics   *counters
	// maxSends is bot.max_sends, maxBroadcast bot.max_broadcast; quota
	// bot.max_chat_state in bytes.
	maxSends, maxBroadcast int
	quota                  int64
	// maxBytes is bot.max_event_bytes; sentBytes the content the event's
	// sends and broadcasts took of it so far.
	maxBytes, sentBytes int64
	event               abi.Event
	n                   int
	// ops counts the event's edits and typing calls.
	ops int
	// down holds the providers a send of this turn was deferred on: the
	// turn's later sends to them are journaled without waiting inline again,
	// so an outage costs a handler one outbox.inline_max, not one per send.
	down   map[string]bool
	writes map[string]durability.StateWrite
	// writeBytes is the bytes of keys and values in writes.
	writeBytes int
	// stored is the size of each state key as of the claim (0: absent), for
	// the keys this turn touched.
	stored map[string]int
	// usage is the state quota account of each owner (a chat or a sender)
	// this turn wrote to.
	usage map[string]*stateUsage
	// mark is the last send's MarkSent, held to land with the completion;
	// its heartbeat keeps the send's lease until then.
	mark *pendingMark
	// mediaReasons say why event media is unavailable, per index ("" when
	// it is available).
	mediaReasons []string
	// media holds this event's media_load results by index, so a guest
	// loading the same media twice downloads it once.
	media map[int]mediaLoad
	// inputs records what the guest read from the store and the channel;
	// it lands with the completion.
	inputs inputs.Recorder
	// module is the digest of the code that ran the handler.
	module string
	// posted are the sends the guest posted, made in order when the
	// handler returns (or before its next send or enqueue); postedBytes is
	// the size of their content.
	posted      []sendSpec
	postedBytes int
	// postedContent is their content as journaled (see chargeBytes).
	postedContent int64
	// hooks run the module's send hooks (nil: a guest without them);
	// hookBudget is what the hooks of the event's sends may use together.
	hooks      SendHooks
	hookBudget *wasm.Budget
	// held, when set, refuses sends once the record's lease expired by
	// this process's clock (coordination: a replica frozen past its lease
	// and thawed must not act on what it read before).
	held func() error
}

// maxPostedBytes bounds the content of an event's posted sends held in
// memory at once; a post past it first makes the ones before it.
const maxPostedBytes = 1 << 20

// flushMark lands a held MarkSent on its own.
func (t *turn) flushMark(ctx context.Context) {
	t.sender.land(ctx, t.mark)
	t.mark = nil
}

func (b *Bot) newTurn(ev abi.Event) *turn {
	return &turn{sender: b.sender, state: b.state, providers: b.providers, metrics: &b.metrics,
		maxSends: b.cfg.Bot.MaxSends, maxBroadcast: b.cfg.Bot.MaxBroadcast, quota: int64(b.cfg.Bot.MaxChatState),
		maxBytes: int64(b.cfg.Bot.MaxEventBytes), hookBudget: wasm.NewBudget(time.Duration(b.cfg.Bot.HandlerTimeout)),
		event: ev, writes: map[string]durability.StateWrite{}, hooks: b.sender.hooks,
		stored: map[string]int{}, usage: map[string]*stateUsage{}}
}

// takeTurn runs an inbound job's turn: claim (unless Admit or the sweeper
// already did), run the handler with a heartbeat started with its turn, then
// complete with the buffered state writes, or fail with a retry or to the
// dead-letter queue.
func (b *Bot) takeTurn(j dispatch.Job) {
	ctx := b.baseCtx
	if j.Unjournaled {
		t, _ := b.run(ctx, *j.Event, nil, nil)
		t.flushMark(ctx) // no completion to carry the last send's MarkSent
		return
	}
	rec := j.Claimed
	if rec == nil {
		r, err := b.inbox.Claim(ctx, j.ID, b.leases.lease(b.policy.inboxLease))
		switch {
		case errors.Is(err, durability.ErrNotClaimable), errors.Is(err, durability.ErrNotFound):
			return // another worker or replica has it, or it is done
		case err != nil:
			b.log.Error("claim failed; the sweeper will retry it", "id", j.ID, "err", err)
			return
		}
		rec = &r
	}
	if b.coord != nil {
		b.coordinatedTurn(j, rec)
		return
	}
	b.runRecord(j, rec, nil)
}

// runRecord runs a claimed record's turn: the handler with a heartbeat, then
// the completion with the buffered state writes (the conversation's
// checkpoint and the record's confirmation are one write), or a retry or the
// dead-letter queue. A completion that fails releases the record to be
// reprocessed at once.
// turn, when set, is the chat turn it runs under (coordination): once it is
// lost by this process's clock the record makes no more sends and does not
// complete.
func (b *Bot) runRecord(j dispatch.Job, rec *durability.InboxRecord, turn func() error) {
	ctx := b.baseCtx
	start := time.Now()
	ctx, span := b.tr.startUnder(ctx, j.Trace, spanTurn)
	defer span.End()
	idAttr(span, rec.ID, rec.Provider)
	hb, ok := b.turnLease(ctx, rec)
	if !ok {
		return
	}
	defer hb.release()
	defer func() { b.obs.turned(time.Since(start)) }()
	if rec.Attempts > b.policy.maxAttempts {
		b.failInbound(ctx, rec, hb, fmt.Errorf("claimed %d times without finishing (durability.inbox.max_attempts = %d): the process died each time", rec.Attempts-1, b.policy.maxAttempts), true, nil)
		return
	}
	if rec.Attempts > 1 {
		b.metrics.inboundReplayed.Add(1)
	}
	var jr rules.Journaled
	if err := json.Unmarshal(rec.Payload, &jr); err != nil {
		b.failInbound(ctx, rec, hb, fmt.Errorf("journaled event is unreadable: %w", err), true, nil)
		return
	}
	var reasons []string
	if !useLiveMedia(&jr, j.Live) {
		reasons = b.rehydrateMedia(rec.Provider, &jr)
	}
	ev := jr.Event
	ev.Attempt = rec.Attempts
	if rec.Module != "" && rec.Module != b.guest.Digest() {
		// A replay under another module than the one that ran it: its sends
		// may differ; on_diverged settles derived keys.
		b.replaysOnNewModule.Add(1)
		b.log.WarnContext(ctx, "replaying under a different module", "id", rec.ID, "ran", short(rec.Module), "now", short(b.guest.Digest()))
	}
	var held func() error
	if b.coord != nil {
		held = func() error {
			if err := hb.held(); err != nil || turn == nil {
				return err
			}
			return turn()
		}
	}
	runCtx := hb.ctx
	if span.IsRecording() {
		runCtx = trace.ContextWithSpan(runCtx, span)
	}
	t, err := b.run(runCtx, ev, reasons, held)
	hb.stop()
	if hb.lost.Load() {
		t.flushMark(ctx)
		return // counted as a stale lease; the new owner finishes it
	}
	var he *wasm.HandlerError
	if held != nil && (err == nil || errors.As(err, &he)) {
		if lost := held(); lost != nil {
			t.flushMark(ctx)
			b.metrics.staleLeases.Add(1)
			b.log.WarnContext(ctx, "not completed: the lease or the chat's turn expired while the handler ran; the record runs again", "id", rec.ID, "err", lost)
			return
		}
	}
	if err == nil || errors.As(err, &he) {
		cctx, cspan := b.tr.start(ctx, spanComplete)
		err := b.complete(cctx, rec, t)
		fail(cspan, err)
		cspan.End()
		if errors.Is(err, durability.ErrStaleLease) {
			b.metrics.staleLeases.Add(1)
			b.log.WarnContext(ctx, "completion refused: the lease was lost to another owner", "id", rec.ID)
		} else if err != nil {
			b.log.ErrorContext(ctx, "completion failed; the record is released to run again, its sends answered from the outbox", "id", rec.ID, "err", err)
			b.releaseUncompleted(ctx, rec, err)
		}
		return
	}
	t.flushMark(ctx)
	b.failInbound(ctx, rec, hb, err, rec.Attempts >= b.policy.maxAttempts, t.inputs.Bytes())
}

// releaseUncompleted gives back a record whose completion failed, due now:
// its state writes did not land, so it runs again (charged: a completion
// that always fails ends in the dead-letter queue). If the release fails
// too, the record is reclaimed when its lease expires.
func (b *Bot) releaseUncompleted(ctx context.Context, rec *durability.InboxRecord, cause error) {
	now := nowMs()
	dead := rec.Attempts >= b.policy.maxAttempts
	err := b.inbox.Fail(ctx, rec.ID, rec.Token, fmt.Sprintf("completion failed: %v", cause), durability.FailOptions{Now: now, RetryAt: now, Dead: dead})
	if err != nil && !errors.Is(err, durability.ErrStaleLease) && ctx.Err() == nil {
		b.log.WarnContext(ctx, "releasing the record failed; it is reclaimed when its lease expires", "id", rec.ID, "err", err)
	}
	if err == nil && !dead {
		b.wakeSweeper()
	}
}

// complete lands the inbox completion with the buffered state writes, and the
// last send's deferred MarkSent in the same write where the journal can.
func (b *Bot) complete(ctx context.Context, rec *durability.InboxRecord, t *turn) error {
	c := durability.Completion{Effects: t.effects(), Module: t.module, Inputs: t.inputs.Bytes(), Now: nowMs()}
	if m := t.mark; m != nil {
		if cs, ok := b.inbox.(durability.CompleteSender); ok {
			m.hb.stop()
			err := cs.CompleteWithSent(ctx, rec.ID, rec.Token, c,
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
	return b.inbox.Complete(ctx, rec.ID, rec.Token, c)
}

// run calls the handler for ev and reports its outcome. mediaReasons say which
// of its media are unavailable, and why.
func (b *Bot) run(ctx context.Context, ev abi.Event, mediaReasons []string, held func() error) (*turn, error) {
	t := b.newTurn(ev)
	t.held = held
	t.mediaReasons = mediaReasons
	gctx, gspan := b.tr.start(ctx, spanGuest)
	start := time.Now()
	ran, err := b.guest.Handle(gctx, ev, t)
	b.obs.guest.Observe(time.Since(start).Seconds())
	fail(gspan, err)
	gspan.End()
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
		b.log.ErrorContext(ctx, "handler returned an error; the message is confirmed, not retried (its sends already happened)", "event", ev.ID, "err", he.Message)
		b.alerts.emit(Alert{Name: AlertHandlerError, ID: ev.ID, Chat: ev.Chat, Error: he.Message})
	case errors.As(err, &fault):
		b.log.ErrorContext(ctx, "event failed: guest fault; the instance was discarded", "event", ev.ID, "attempt", ev.Attempt, "kind", fault.Kind, "err", fault.Err)
	default:
		b.log.ErrorContext(ctx, "event failed", "event", ev.ID, "attempt", ev.Attempt, "err", err)
	}
	return t, err
}

// failInbound settles a failed attempt: a retry after inbox.backoff, or dead.
// recorded are the attempt's recorded inputs (nil: its handler did not run).
func (b *Bot) failInbound(ctx context.Context, rec *durability.InboxRecord, hb *heartbeat, cause error, dead bool, recorded []byte) {
	hb.stop()
	now := time.Now()
	opts := durability.FailOptions{Now: now.UnixMilli(), Dead: dead, Inputs: recorded}
	if !dead {
		opts.RetryAt = now.Add(b.policy.inboxBackoff.wait(rec.Attempts)).UnixMilli()
	}
	err := b.inbox.Fail(ctx, rec.ID, rec.Token, cause.Error(), opts)
	switch {
	case errors.Is(err, durability.ErrStaleLease):
		b.metrics.staleLeases.Add(1)
	case err != nil:
		b.log.ErrorContext(ctx, "recording the failure failed; the lease will expire and the record be reclaimed", "id", rec.ID, "err", err)
	case dead:
		b.metrics.inboundDead.Add(1)
		b.alerts.emit(Alert{Name: AlertDead, Kind: "inbox", ID: rec.ID, Chat: rec.Chat, Error: cause.Error()})
	default:
		b.log.InfoContext(ctx, "event will be retried", "id", rec.ID, "attempt", rec.Attempts, "retry_at", time.UnixMilli(opts.RetryAt).Format(time.RFC3339Nano))
	}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// spec builds the send of req by the idempotency key rules: explicit, else
// derived from the event and the send's position.
func (t *turn) spec(req abi.SendRequest) (sendSpec, error) {
	if err := t.fence(); err != nil {
		return sendSpec{}, err
	}
	t.n++
	if err := rules.CheckSendCap(t.event.ID, t.n, t.maxSends); err != nil {
		return sendSpec{}, err
	}
	s := sendSpec{provider: t.event.Provider, chat: req.Chat, msg: outMsg{Text: req.Text, Media: req.Media, Buttons: req.Buttons, List: req.List}, inbound: t.event.ID}
	s.key, s.derived = rules.SendKey(t.event.ID, t.n, req.IdempotencyKey)
	return s, nil
}

// Send implements wasm.Env.
func (t *turn) Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	if err := t.flushPosted(ctx); err != nil {
		return abi.SendResult{}, err
	}
	t.flushMark(ctx)
	s, err := t.spec(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	return t.send(ctx, s)
}

// Post implements wasm.Env: the send is numbered and keyed now, and made when
// the handler returns.
func (t *turn) Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	size := len(req.Text)
	if req.Media != nil {
		size += len(req.Media.Ref) + len(req.Media.URL) + len(req.Media.Caption)
	}
	if t.postedBytes+size > maxPostedBytes {
		if err := t.flushPosted(ctx); err != nil {
			return abi.SendResult{}, err
		}
	}
	s, err := t.spec(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	// Charged when made; refused now if the event's sends so far and the
	// posts held already leave no room for it.
	cs := rules.ContentSize(s.msg)
	if held := t.sentBytes + t.postedContent + cs; held > t.maxBytes {
		return abi.SendResult{}, fmt.Errorf("event %s: a post of %d bytes would bring the content the event sends to %d bytes, over bot.max_event_bytes (%d): %w", t.event.ID, cs, held, t.maxBytes, wasm.ErrTooLarge)
	}
	t.posted = append(t.posted, s)
	t.postedBytes += size
	t.postedContent += cs
	return abi.SendResult{Status: abi.SendQueued, Key: s.key}, nil
}

// flushPosted makes the posted sends, in order. A send refused for the
// event's bot.max_event_bytes (botrun_before_send grew it) is dead, never
// journaled: not a fault, the others are made. Another error is the
// journal's: the event's attempt fails, and its retry answers the sends
// already made from the outbox.
func (t *turn) flushPosted(ctx context.Context) error {
	for len(t.posted) > 0 {
		s := t.posted[0]
		t.posted = t.posted[1:]
		t.flushMark(ctx)
		_, err := t.send(ctx, s)
		if errors.Is(err, wasm.ErrTooLarge) {
			t.sender.log.WarnContext(ctx, "send refused", "key", s.key, "err", err)
			continue
		}
		if err != nil {
			t.posted = nil
			return err
		}
	}
	t.posted, t.postedBytes, t.postedContent = nil, 0, 0
	return nil
}

// send makes one send of the turn (through the send hooks): inline, unless
// an earlier send of the turn to its provider was deferred.
func (t *turn) send(ctx context.Context, s sendSpec) (abi.SendResult, error) {
	if err := t.fence(); err != nil {
		return abi.SendResult{}, err
	}
	return t.hookedSend(ctx, s, func(s sendSpec) (abi.SendResult, error) { return t.sendNow(ctx, s) })
}

func (t *turn) sendNow(ctx context.Context, s sendSpec) (abi.SendResult, error) {
	if t.down[s.provider] {
		res, err := t.sender.enqueue(ctx, s)
		if err == nil && res.Status == abi.SendDeferred {
			t.metrics.outboxDeferred.Add(1)
			res.Error = "not tried: an earlier send of this event to the channel was deferred"
		}
		return res, err
	}
	t.flushMark(ctx)
	res, mark, err := t.sender.sendNow(ctx, s, true)
	t.mark = mark
	if err == nil && res.Status == abi.SendDeferred {
		if t.down == nil {
			t.down = map[string]bool{}
		}
		t.down[s.provider] = true
	}
	return res, err
}

// Enqueue implements wasm.Env.
func (t *turn) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	if err := t.flushPosted(ctx); err != nil {
		return abi.SendResult{}, err
	}
	t.flushMark(ctx)
	s, err := t.spec(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	s.at = req.At
	return t.hookedSend(ctx, s, func(s sendSpec) (abi.SendResult, error) { return t.sender.enqueue(ctx, s) })
}

// Broadcast implements wasm.Broadcaster: one send per chat, journaled under
// "<key_prefix>:<chat>" for the sweeper; it counts once against
// bot.max_sends, and bot.max_broadcast bounds its chats.
func (t *turn) Broadcast(ctx context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	if err := t.flushPosted(ctx); err != nil {
		return abi.BroadcastResult{}, err
	}
	t.flushMark(ctx)
	if err := t.fence(); err != nil {
		return abi.BroadcastResult{}, err
	}
	t.n++
	if err := rules.CheckBroadcast(t.event.ID, t.n, t.maxSends, len(req.Chats), t.maxBroadcast); err != nil {
		return abi.BroadcastResult{}, err
	}
	// The copies as listed are checked before any is journaled; each is
	// then charged as journaled (a hook's rewrite may make it larger).
	size := rules.ContentSize(outMsg{Text: req.Text, Media: req.Media})
	// With botrun_after_send, each chat's after_send record copies it too.
	first := sendSpec{provider: t.event.Provider, msg: outMsg{Text: req.Text, Media: req.Media}, key: req.KeyPrefix + ":", inbound: t.event.ID, at: req.At}
	size += t.afterBytes(first, []string{first.key})
	if t.sentBytes+size*int64(uniqueChats(req.Chats)) > t.maxBytes {
		return abi.BroadcastResult{}, fmt.Errorf("event %s: a broadcast of %d bytes to %d chats is over bot.max_event_bytes (%d, %d taken): %w", t.event.ID, size, uniqueChats(req.Chats), t.maxBytes, t.sentBytes, wasm.ErrTooLarge)
	}
	hook := &chatHook{charge: func(s sendSpec, n int) error {
		return t.chargeBytes(int64(n)+t.afterBytes(s, []string{s.key}), "a broadcast's copy")
	}}
	hookFailed := false
	if t.hooks != nil {
		if before, after := t.hooks.Hooks(); before || after {
			*hook = chatHook{
				charge: hook.charge,
				before: func(s *sendSpec) (bool, error) {
					res, done, err := t.beforeSend(ctx, s)
					if done {
						// A chat journaled before (a replay) is answered
						// from the journal whatever the hook says now.
						if _, gerr := t.sender.outbox.Get(ctx, s.key); gerr == nil {
							return true, nil
						} else if !errors.Is(gerr, durability.ErrNotFound) {
							return false, fmt.Errorf("outbox journal: %w", gerr)
						}
					}
					if done && res.Status == abi.SendDead && !hookFailed {
						hookFailed = true // once per broadcast: a hook cannot flood the log
						t.sender.log.Warn("broadcast: botrun_before_send failed; that chat's send is cancelled (further failures of this broadcast are not logged)", "key", s.key, "err", res.Error)
					}
					return !done, err
				},
				after: func(s sendSpec) error {
					return t.afterSend(ctx, s, abi.SendResult{Status: abi.SendDeferred, Key: s.key}, []string{s.key})
				},
			}
		}
	}
	res, err := broadcast(ctx, t.sender.outbox, t.event.Provider, t.event.ID, req, hook)
	if err == nil {
		t.metrics.outboxJournaled.Add(int64(res.Journaled))
		t.sender.wake.notify()
	}
	return res, err
}

// chargeBytes takes n bytes of content (copies times size) of the event's
// bot.max_event_bytes for what (a send, a broadcast, a chat's copy of
// one); past it the send is refused (wasm.ErrTooLarge), and nothing taken.
func (t *turn) chargeBytes(n int64, what string) error {
	if t.sentBytes+n > t.maxBytes {
		return fmt.Errorf("event %s: %s of %d bytes would bring the content the event sends to %d bytes, over bot.max_event_bytes (%d): %w", t.event.ID, what, n, t.sentBytes+n, t.maxBytes, wasm.ErrTooLarge)
	}
	t.sentBytes += n
	return nil
}

// uniqueChats counts the distinct chats of a broadcast.
func uniqueChats(chats []string) int {
	seen := make(map[string]bool, len(chats))
	for _, c := range chats {
		seen[c] = true
	}
	return len(seen)
}

// fence refuses the turn's next action once its lease is gone (see held).
func (t *turn) fence() error {
	if t.held == nil {
		return nil
	}
	return t.held()
}

// channelOp counts an edit or a typing call: an event makes at most
// bot.max_sends of them (they wait on the channel, so a loop of them would
// hold the worker and flood the channel); past it they are refused.
func (t *turn) channelOp() error {
	if err := t.fence(); err != nil {
		return err
	}
	if t.ops++; t.ops > t.maxSends {
		return fmt.Errorf("event %s: more than bot.max_sends (%d) edits and typing calls", t.event.ID, t.maxSends)
	}
	return nil
}

// Edit implements wasm.Editor: the event's channel changes a message it
// sent, within outbox.inline_max (the handler's deadline when it is 0); not
// journaled, not counted as a send.
func (t *turn) Edit(ctx context.Context, req abi.EditRequest) error {
	if err := t.channelOp(); err != nil {
		return err
	}
	e, ok := t.providers[t.event.Provider].(channel.Editor)
	if !ok {
		return fmt.Errorf("provider %q cannot edit a message: %w", t.event.Provider, wasm.ErrUnsupported)
	}
	ctx, cancel := t.sender.policy.inlineCall(ctx)
	defer cancel()
	return e.Edit(ctx, req.Chat, req.Message, req.Text)
}

// Typing implements wasm.Editor: the event's channel shows "typing…".
func (t *turn) Typing(ctx context.Context, req abi.TypingRequest) error {
	if err := t.channelOp(); err != nil {
		return err
	}
	ty, ok := t.providers[t.event.Provider].(channel.Typist)
	if !ok {
		return fmt.Errorf("provider %q has no typing indicator: %w", t.event.Provider, wasm.ErrUnsupported)
	}
	replyTo := "" // the message being answered, in the event's own chat only
	if req.Chat == t.event.Chat {
		replyTo = strings.TrimPrefix(t.event.ID, t.event.Provider+":")
	}
	ctx, cancel := t.sender.policy.inlineCall(ctx)
	defer cancel()
	return ty.Typing(ctx, req.Chat, replyTo)
}

// stateScope splits a guest's state key into its owner and the key within it:
// keys starting with "user/" belong to the sender (across chats), the others
// to the event's chat. The chat and sender are escaped ('%' and '/'), so the
// encoding is unambiguous: chat "v/x" with key "a" is never chat "v" with key
// "x/a".
func (t *turn) stateScope(key string) (owner, rest string) {
	if rest, ok := strings.CutPrefix(key, "user/"); ok {
		return "user/" + t.event.Provider + "/" + stateSegment.Replace(t.event.From) + "/", rest
	}
	return "chat/" + t.event.Provider + "/" + stateSegment.Replace(t.event.Chat) + "/", key
}

// stateKey scopes a guest's state key (see stateScope).
func (t *turn) stateKey(key string) string {
	owner, rest := t.stateScope(key)
	return owner + rest
}

// stateSegment escapes one path segment of a state key. Names without '%'
// or '/' (nearly every channel's chat ids) keep the key they always had.
var stateSegment = strings.NewReplacer("%", "%25", "/", "%2F")

// StateGet implements wasm.Env: the handler reads its own buffered writes, then
// the store as of the claim.
func (t *turn) StateGet(ctx context.Context, key string) ([]byte, bool, error) {
	owner, rest := t.stateScope(key)
	k := owner + rest
	if w, ok := t.writes[k]; ok {
		return w.Value, !w.Delete, nil
	}
	_, again := t.stored[k]
	v, ok, err := t.state.Get(ctx, k)
	if err == nil {
		t.stored[k] = 0
		if ok {
			t.stored[k] = len(rest) + len(v)
		}
		if !again {
			t.inputs.State(key, v, ok) // a key's first store read only
		}
	}
	return v, ok, err
}

// StateSet implements wasm.Env; the write lands with the inbox completion.
func (t *turn) StateSet(ctx context.Context, key string, value []byte) error {
	return t.stateWrite(ctx, key, value, false)
}

// StateDelete implements wasm.Env; the delete lands with the inbox completion.
func (t *turn) StateDelete(ctx context.Context, key string) error {
	return t.stateWrite(ctx, key, nil, true)
}

// State limits (abi/SPEC.md section 4.2): an event writes at most
// abi.MaxStateKeys keys and abi.MaxStateBytes bytes, and a write that would
// grow its owner's state (a chat's, or a sender's "user/" keys) past
// bot.max_chat_state is refused. The size of a key is the bytes of the key,
// as the guest names it within its owner, and of its value.

// stateUsage is an owner's quota account: its bytes as of the claim (the
// usage record) and the change this turn's writes make.
type stateUsage struct {
	stored, delta int64
}

// stateWrite buffers a set or a delete within the state limits.
func (t *turn) stateWrite(ctx context.Context, key string, value []byte, del bool) error {
	owner, rest := t.stateScope(key)
	k := owner + rest
	prev, buffered := t.writes[k]
	if !buffered && len(t.writes) >= abi.MaxStateKeys {
		return fmt.Errorf("event %s: state key %q would be key %d of the event's writes, over the %d an event may write: %w", t.event.ID, key, len(t.writes)+1, abi.MaxStateKeys, wasm.ErrStateTooLarge)
	}
	// The event's writes hold a key once, at its last value.
	held := 0
	if buffered {
		held = len(rest) + len(prev.Value)
	}
	if bytes := t.writeBytes - held + len(rest) + len(value); bytes > abi.MaxStateBytes {
		return fmt.Errorf("event %s: state key %q would bring the event's state writes to %d bytes, over the %d an event may write: %w", t.event.ID, key, bytes, abi.MaxStateBytes, wasm.ErrStateTooLarge)
	}
	// The owner's quota counts each key at its size after this write.
	u, err := t.account(ctx, owner)
	if err != nil {
		return err
	}
	var before int
	switch {
	case buffered && prev.Delete:
	case buffered:
		before = held
	default:
		if before, err = t.storedSize(ctx, k, len(rest)); err != nil {
			return err
		}
	}
	after := len(rest) + len(value)
	if del {
		after = 0
	}
	grow := int64(after - before)
	if quota := t.quota; grow > 0 && u.stored+u.delta+grow > quota {
		return fmt.Errorf("event %s: state key %q would bring the state of %s to %d bytes, over bot.max_chat_state (%d): %w", t.event.ID, key, strings.TrimSuffix(owner, "/"), u.stored+u.delta+grow, quota, wasm.ErrStateTooLarge)
	}
	u.delta += grow
	t.writeBytes += len(rest) + len(value) - held
	if del {
		t.writes[k] = durability.StateWrite{Key: k, Delete: true}
	} else {
		t.writes[k] = durability.StateWrite{Key: k, Value: append([]byte(nil), value...)}
	}
	return nil
}

// account returns owner's quota account, reading its usage record once.
func (t *turn) account(ctx context.Context, owner string) (*stateUsage, error) {
	if u, ok := t.usage[owner]; ok {
		return u, nil
	}
	v, ok, err := t.state.Get(ctx, rules.UsageKey(owner))
	if err != nil {
		return nil, err
	}
	u := &stateUsage{}
	if ok {
		u.stored, _ = strconv.ParseInt(string(v), 10, 64)
	}
	t.usage[owner] = u
	return u, nil
}

// storedSize is the size of key k (rest bytes of it the guest's) as of the
// claim, read once.
func (t *turn) storedSize(ctx context.Context, k string, rest int) (int, error) {
	if n, ok := t.stored[k]; ok {
		return n, nil
	}
	v, ok, err := t.state.Get(ctx, k)
	if err != nil {
		return 0, err
	}
	n := 0
	if ok {
		n = rest + len(v)
	}
	t.stored[k] = n
	return n, nil
}

// effects returns the buffered writes, and the usage records they change, in
// key order.
func (t *turn) effects() []durability.StateWrite {
	out := make([]durability.StateWrite, 0, len(t.writes)+len(t.usage))
	for _, w := range t.writes {
		out = append(out, w)
	}
	for owner, u := range t.usage {
		if u.delta != 0 {
			out = append(out, durability.StateWrite{Key: rules.UsageKey(owner), Value: []byte(strconv.FormatInt(max(u.stored+u.delta, 0), 10))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
