package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/wasm"
)

// SendHooks is implemented by a Guest that runs the module's send hooks
// (botrun_before_send and botrun_after_send, abi/SPEC.md section 4.7). Each
// runs on an instance of its own, never on the handler's, which is waiting
// in the send.
type SendHooks interface {
	// Hooks reports which hooks the current code exports.
	Hooks() (before, after bool)
	// BeforeSend runs botrun_before_send: the send unchanged, rewritten or
	// cancelled. A *wasm.HandlerError is the hook's own error; any other
	// error a fault.
	BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error)
	// AfterSend runs botrun_after_send.
	AfterSend(ctx context.Context, h abi.SendHook) error
}

// afterSendProvider is the id of the internal channel whose records run
// botrun_after_send: one per send of a module that exports it, keyed
// "<send key>@after_send" and journaled with the send, so the outbox runs the
// hook at least once after the send was delivered, whatever crashes.
const afterSendProvider = "_after_send"

// InternalProvider reports whether id is one of the host's own channels
// (alerts, after_send), which no [[providers]] id can name.
func InternalProvider(id string) bool { return id != "" && id[0] == '_' }

func afterSendKey(key string) string { return key + abi.ReservedKeySuffix }

// Hooks implements SendHooks on the current module.
func (r *reloader) Hooks() (before, after bool) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.Hooks()
}

// BeforeSend implements SendHooks on the current module.
func (r *reloader) BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.BeforeSend(ctx, h)
}

// AfterSend implements SendHooks on the current module.
func (r *reloader) AfterSend(ctx context.Context, h abi.SendHook) error {
	l := r.acquire()
	defer r.release(l)
	return l.mod.AfterSend(ctx, h)
}

// hookOf is the content of s as a hook reads it.
func hookOf(s sendSpec) abi.SendHook {
	return abi.SendHook{Event: s.inbound, Provider: s.provider, Chat: s.chat, Key: s.key,
		Text: s.msg.Text, Media: s.msg.Media, Buttons: s.msg.Buttons, List: s.msg.List, At: s.at}
}

// beforeSend runs the module's botrun_before_send on s once, before it is
// journaled. It answers done (with the result to give the guest) when the
// hook cancelled the send or failed with its own error (the send is dead,
// never journaled); an error is a fault, which fails the event's attempt.
// A rewritten send keeps its key, and its parts keep the fingerprints of the
// send as the handler asked for it (section 5 compares those on a replay).
func (t *turn) beforeSend(ctx context.Context, s *sendSpec) (res abi.SendResult, done bool, err error) {
	if t.hooks == nil {
		return res, false, nil
	}
	if before, _ := t.hooks.Hooks(); !before {
		return res, false, nil
	}
	h := hookOf(*s)
	h.Time = t.event.ReceivedAt
	out, err := t.hooks.BeforeSend(wasm.WithBudget(ctx, t.hookBudget), h)
	if res, done, err := BeforeSendOutcome(s.key, out, err); done || err != nil {
		return res, done, err
	}
	if out.Rewrite != nil {
		for _, p := range t.sender.parts(*s) {
			s.prehook = append(s.prehook, fingerprint(s.chat, p.payload))
		}
		r := out.Rewrite
		s.chat, s.msg = r.Chat, outMsg{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
	}
	return res, false, nil
}

// BeforeSendOutcome settles a botrun_before_send call (out, err) on the send
// keyed key: done, with the result the guest gets, when the hook cancelled
// the send or failed with its own error (the send is dead, never
// journaled); an error is a fault, which fails the event's attempt. Neither:
// the send goes on, rewritten when out.Rewrite is set.
func BeforeSendOutcome(key string, out wasm.BeforeSend, err error) (res abi.SendResult, done bool, fault error) {
	var he *wasm.HandlerError
	switch {
	case errors.As(err, &he):
		return abi.SendResult{Status: abi.SendDead, Key: key, Error: "botrun_before_send: " + he.Error()}, true, nil
	case errors.Is(err, wasm.ErrHookBudget):
		// Fail closed: a send whose hook could not run is not made.
		return abi.SendResult{Status: abi.SendDead, Key: key, Error: "botrun_before_send: " + err.Error()}, true, nil
	case err != nil:
		return res, false, fmt.Errorf("botrun_before_send of %s: %w", key, err)
	case out.Cancel:
		return abi.SendResult{Status: abi.SendCancelled, Key: key}, true, nil
	}
	return res, false, nil
}

// hookedSend runs botrun_before_send on s, sends it with send, then journals
// its botrun_after_send. A send already journaled under its key (a replay)
// answers from the journal even when the hook now cancels or fails it: what
// was journaled goes out, and its after_send runs.
func (t *turn) hookedSend(ctx context.Context, s sendSpec, send func(sendSpec) (abi.SendResult, error)) (abi.SendResult, error) {
	res, done, err := t.beforeSend(ctx, &s)
	if err != nil {
		return res, err
	}
	if done {
		switch _, err := t.sender.outbox.Get(ctx, s.key); {
		case errors.Is(err, durability.ErrNotFound):
			return res, nil
		case err != nil:
			return res, fmt.Errorf("outbox journal: %w", err)
		}
	}
	var parts []string
	for _, p := range t.sender.parts(s) {
		parts = append(parts, p.key)
	}
	if err := t.chargeBytes(contentSize(s.msg)+t.afterBytes(s, parts), "a send"); err != nil {
		return abi.SendResult{}, err
	}
	var keys []string
	if t.hooks != nil {
		s.keys = &keys
	}
	res, err = send(s)
	if err == nil {
		err = t.afterSend(ctx, s, res, keys)
	}
	return res, err
}

// afterSend journals, for a module that exports botrun_after_send, the
// record that runs it once the parts keys of the send res answers are
// delivered. It is put after the parts and before the event completes: a
// crash in between replays the event, which puts it then.
func (t *turn) afterSend(ctx context.Context, s sendSpec, res abi.SendResult, keys []string) error {
	if t.hooks == nil || len(keys) == 0 {
		return nil
	}
	switch res.Status {
	case abi.SendSent, abi.SendDeduped, abi.SendDeferred, abi.SendScheduled:
	case abi.SendDead:
		// Journaled and dead (inline, or a part of it): the record settles
		// without running the hook, and an operator's retry re-arms it.
	default:
		return nil
	}
	if _, after := t.hooks.Hooks(); !after {
		return nil
	}
	s.key = res.Key
	return t.sender.journalAfter(ctx, s, keys)
}

// afterBytes is the size of the after_send record that the send s, in
// parts, journals (0 for a module without botrun_after_send): it copies the
// send's content, so it is charged to the event's bot.max_event_bytes with
// the send, before the send is made.
func (t *turn) afterBytes(s sendSpec, parts []string) int64 {
	if t.hooks == nil {
		return 0
	}
	if _, after := t.hooks.Hooks(); !after {
		return 0
	}
	put, _ := afterPut(s, parts)
	return int64(len(put.Payload))
}

// afterRecord is the payload of an after_send record: the hook to run and
// the keys of the send's parts, in order.
type afterRecord struct {
	Hook  abi.SendHook `json:"hook"`
	Parts []string     `json:"parts"`
}

// afterPut is the after_send record of s, whose parts are journaled under
// parts (see afterSendProvider).
func afterPut(s sendSpec, parts []string) (durability.OutboxPut, error) {
	body, err := json.Marshal(afterRecord{Hook: hookOf(s), Parts: parts})
	if err != nil {
		return durability.OutboxPut{}, fmt.Errorf("after_send of %s: %w", s.key, err)
	}
	payload, _ := json.Marshal(outMsg{Text: string(body)})
	return durability.OutboxPut{Key: afterSendKey(s.key), Provider: afterSendProvider, Chat: s.chat,
		Payload: payload, Inbound: s.inbound, NotBefore: s.at}, nil
}

// journalAfter puts the after_send record of s and wakes the sweeper.
func (o *sender) journalAfter(ctx context.Context, s sendSpec, parts []string) error {
	put, err := afterPut(s, parts)
	if err != nil {
		return err
	}
	if _, _, err = o.outbox.Put(ctx, put, nowMs(), nil); err != nil {
		return fmt.Errorf("outbox journal: after_send of %s: %w", s.key, err)
	}
	o.wake.notify()
	return nil
}

// rearmAfterSend makes the after_send record of key run again once key is
// delivered: an operator retried a send whose record was settled without
// running the hook (the send was dead or unknown). The journal has no
// single write that turns a settled record back to pending, so the record
// is deleted and put again: a crash between the two loses the after_send of
// that send (the send itself was already re-armed by Retry), never runs it
// twice.
func rearmAfterSend(ctx context.Context, outbox durability.OutboxJournal, key string) error {
	rec, err := outbox.Get(ctx, afterSendKey(key))
	switch {
	case errors.Is(err, durability.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rec.State != durability.OutboxSent:
		return nil // still waiting for the send
	}
	if err := outbox.Discard(ctx, rec.Key); err != nil {
		return err
	}
	_, _, err = outbox.Put(ctx, durability.OutboxPut{Key: rec.Key, Provider: rec.Provider, Chat: rec.Chat,
		Payload: rec.Payload, Inbound: rec.Inbound}, nowMs(), nil)
	return err
}

// runAfterSend delivers a claimed after_send record: once every part of its
// send is sent, it runs botrun_after_send with the first part's ref. It waits
// (without charging an attempt) while a part is not sent yet, and settles
// without running the hook when the send never went out (dead, discarded, or
// unknown after a crash) or the module no longer exports the hook. A fault of
// the hook is retried like a failed send, a failure of the host (the
// journal, an instance that would not start, a stop) without charging an
// attempt; the hook's own error is logged and not retried. A claim left in
// flight by a crash runs the hook again: at least once.
func (o *sender) runAfterSend(ctx context.Context, rec durability.OutboxRecord) {
	var m outMsg
	var a afterRecord
	if err := errors.Join(json.Unmarshal(rec.Payload, &m), json.Unmarshal([]byte(m.Text), &a)); err != nil || len(a.Parts) == 0 {
		o.settleFailure(ctx, rec, &permanentError{fmt.Errorf("after_send record is unreadable: %v", err)}, time.Time{})
		return
	}
	h := a.Hook
	settle := func(why string) {
		o.log.Debug("after_send not run", "key", h.Key, "why", why)
		o.markSent(ctx, rec, "")
	}
	later := func(why string, retryAt int64) {
		now := nowMs()
		err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, why, durability.FailOptions{Now: now, RetryAt: max(retryAt, now+o.policy.poll.Milliseconds()), Refund: true})
		o.noteFailWrite(rec.Key, err)
	}
	var first durability.OutboxRecord
	var sent int64
	// The parts journaled with the send, then any the sweeper split off the
	// last one (key#2, … linked to it).
	keys, prev := a.Parts, ""
	for i := 0; ; i++ {
		key := ""
		switch {
		case i < len(keys):
			key = keys[i]
		default:
			key = fmt.Sprintf("%s#%d", keys[len(keys)-1], i-len(keys)+2)
		}
		part, err := o.outbox.Get(ctx, key)
		switch {
		case i >= len(keys) && (errors.Is(err, durability.ErrNotFound) || err == nil && part.PreviousPart != prev):
		case errors.Is(err, durability.ErrNotFound):
			settle("the send was discarded")
			return
		case err != nil:
			later("reading "+key+": "+err.Error(), 0)
			return
		case part.State == durability.OutboxDead, part.State == durability.OutboxUnknown:
			settle("the send was not delivered: " + string(part.State))
			return
		case part.State != durability.OutboxSent:
			later("waiting for "+key, part.RetryAt)
			return
		default:
			if i == 0 {
				first = part
			}
			sent, prev = max(sent, part.CompletedAt), key
			continue
		}
		break
	}
	if o.hooks == nil {
		settle("the bot's guest runs no hooks")
		return
	}
	if _, after := o.hooks.Hooks(); !after {
		settle("the module does not export botrun_after_send")
		return
	}
	h.Ref, h.Time = first.Ref, sent
	// The hook may wait for an instance: the record's lease is kept
	// meanwhile, so no other owner runs it at the same time.
	hb := o.leases.heartbeat(o.policy.outboxLease, func(ctx context.Context, until int64) error {
		return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	})
	hctx := hb.ctx
	switch {
	case o.afterBudgets == nil:
	case rec.Inbound != "":
		// The after_send hooks of one event (a broadcast's chats) share
		// one budget, as its before_send hooks do.
		hctx = wasm.WithBudget(hctx, o.afterBudgets.of(rec.Inbound))
	default:
		// An operator's send: its broadcast's chats share one.
		hctx = wasm.WithBudget(hctx, o.afterBudgets.of(operatorBudgetKey("after", first)))
	}
	err := o.hooks.AfterSend(hctx, h)
	hb.stop()
	defer hb.release()
	var he *wasm.HandlerError
	var fault *wasm.FaultError
	switch {
	case errors.Is(err, wasm.ErrHookBudget):
		// Not retried: the event's budget stays spent. An operator's
		// retry of the dead record runs it again.
		o.settleFailure(ctx, rec, &permanentError{fmt.Errorf("botrun_after_send: %w", err)}, time.Time{})
		return
	case errors.As(err, &he):
		o.log.Warn("botrun_after_send returned an error; not retried", "key", h.Key, "err", he.Message)
	case errors.As(err, &fault) && (fault.Kind == wasm.FaultHost || fault.Kind == wasm.FaultCanceled):
		later("botrun_after_send could not run: "+err.Error(), 0)
		return
	case err != nil:
		o.settleFailure(ctx, rec, fmt.Errorf("botrun_after_send: %w", err), time.Time{})
		return
	}
	o.markSent(ctx, rec, "")
}

// operatorSend reports whether rec is an operator's send, made outside any
// handler (botrun send and broadcast, the admin API's, Enqueue and
// Broadcast from Go): it has no inbound event, is the first part of its send
// (the later ones are split from a hooked text) and goes to a channel, not
// to one of the host's own.
func operatorSend(rec durability.OutboxRecord) bool {
	return rec.Inbound == "" && rec.PreviousPart == "" && !InternalProvider(rec.Provider)
}

// operatorBudgetKey names the hook budget (eventBudgets) that the hook
// (before or after) of the operator's send rec shares: the sends of one
// broadcast (its key prefix, the key up to its last ':', journaled at one
// time) on every attempt, as an event's sends share the event's.
func operatorBudgetKey(hook string, rec durability.OutboxRecord) string {
	prefix := rec.Key
	if i := strings.LastIndexByte(prefix, ':'); i >= 0 {
		prefix = prefix[:i]
	}
	return fmt.Sprintf("\x00%s\x00%s\x00%d", hook, prefix, rec.CreatedAt)
}

// hookOperatorSend runs the send hooks on an operator's send (operatorSend)
// as it is delivered, on every attempt: wherever it was journaled from, even
// another process, it goes through the running module's botrun_before_send
// as a handler's send does, and gets its botrun_after_send. It answers the
// record as it is sent (a rewrite changes its chat and content in memory,
// as splitJournaled does; the journal keeps what the operator asked for),
// or ok=false when the send was settled instead: cancelled or failed by the
// hook, it is dead (fail-closed: a filter filters every send), and a fault
// of the hook is retried as a failed send.
func (o *sender) hookOperatorSend(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, bool) {
	if o.hooks == nil || !operatorSend(rec) {
		return rec, true
	}
	before, after := o.hooks.Hooks()
	if !before && !after {
		return rec, true
	}
	var m outMsg
	if json.Unmarshal(rec.Payload, &m) != nil {
		return rec, true // call reports it
	}
	s := sendSpec{provider: rec.Provider, chat: rec.Chat, msg: m, key: rec.Key}
	if before {
		h := hookOf(s)
		h.Time = rec.CreatedAt
		// The hook may wait for an instance: the send's lease is kept.
		hb := o.leases.heartbeat(o.policy.outboxLease, func(ctx context.Context, until int64) error {
			return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
		})
		hctx := hb.ctx
		if o.afterBudgets != nil {
			// The chats of one operator's broadcast, on every attempt,
			// share one budget, as an event's sends do.
			hctx = wasm.WithBudget(hctx, o.afterBudgets.of(operatorBudgetKey("before", rec)))
		}
		out, err := o.hooks.BeforeSend(hctx, h)
		hb.stop()
		hb.release()
		res, done, fault := BeforeSendOutcome(rec.Key, out, err)
		var fe *wasm.FaultError
		switch {
		case errors.As(fault, &fe) && (fe.Kind == wasm.FaultHost || fe.Kind == wasm.FaultCanceled):
			now := nowMs()
			o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, fault.Error(),
				durability.FailOptions{Now: now, RetryAt: now + o.policy.poll.Milliseconds(), Refund: true}))
			return rec, false
		case fault != nil:
			o.settleFailure(ctx, rec, fault, time.Time{})
			return rec, false
		case done && res.Status == abi.SendCancelled:
			// The filter's deliberate choice: logged, no alert.
			why := "cancelled by botrun_before_send"
			if o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, why, durability.FailOptions{Now: nowMs(), Dead: true})) {
				o.log.InfoContext(ctx, "an operator's send was not made: botrun_before_send cancelled it", "key", rec.Key)
			}
			return rec, false
		case done:
			// The hook's error, or its budget spent: a dead letter like a
			// failed send's (outbox_dead, the outbox:dead alert).
			o.settleFailure(ctx, rec, &permanentError{errors.New(res.Error)}, time.Time{})
			return rec, false
		}
		if r := out.Rewrite; r != nil {
			s.chat, s.msg = r.Chat, outMsg{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
			rec.Chat = s.chat
			rec.Payload, _ = json.Marshal(s.msg)
		}
	}
	if after {
		if err := o.journalAfter(ctx, s, []string{rec.Key}); err != nil {
			now := nowMs()
			o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, err.Error(),
				durability.FailOptions{Now: now, RetryAt: now + o.policy.poll.Milliseconds(), Refund: true}))
			return rec, false
		}
	}
	return rec, true
}

// eventBudgets holds, per event id, the budget its botrun_after_send calls
// share (wasm.Budget: one bot.handler_timeout of guest time, one event's
// output), for the most recent maxEventBudgets events this process ran
// hooks for. It lives in memory: after a restart, or once an event is
// evicted, its hooks get a fresh budget.
type eventBudgets struct {
	mu    sync.Mutex
	d     time.Duration
	m     map[string]*wasm.Budget
	order []string
}

// maxEventBudgets bounds the events eventBudgets remembers.
const maxEventBudgets = 4096

func newEventBudgets(d time.Duration) *eventBudgets {
	return &eventBudgets{d: d, m: map[string]*wasm.Budget{}}
}

// of returns event's budget, made on its first hook.
func (e *eventBudgets) of(event string) *wasm.Budget {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b, ok := e.m[event]; ok {
		return b
	}
	if len(e.order) >= maxEventBudgets {
		delete(e.m, e.order[0])
		e.order = e.order[1:]
	}
	b := wasm.NewBudget(e.d)
	e.m[event], e.order = b, append(e.order, event)
	return b
}
