package send

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
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// Hooks is implemented by a Guest that runs the module's send hooks
// (botrun_before_send and botrun_after_send, abi/SPEC.md section 4.7). Each
// runs on an instance of its own, never on the handler's, which is waiting
// in the send.
type Hooks interface {
	// Hooks reports which hooks the current code exports.
	Hooks() (before, after bool)
	// BeforeSend runs botrun_before_send: the send unchanged, rewritten or
	// cancelled. A *wasm.HandlerError is the hook's own error; any other
	// error a fault.
	BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error)
	// AfterSend runs botrun_after_send.
	AfterSend(ctx context.Context, h abi.SendHook) error
}

// HookOf is the content of s as a hook reads it.
func HookOf(s Spec) abi.SendHook {
	return abi.SendHook{Event: s.Inbound, Provider: s.Provider, Chat: s.Chat, Key: s.Key,
		Text: s.Msg.Text, Media: s.Msg.Media, Buttons: s.Msg.Buttons, List: s.Msg.List, At: s.At}
}

// afterRecord is the payload of an after_send record: the hook to run and
// the keys of the send's parts, in order.
type afterRecord struct {
	Hook  abi.SendHook `json:"hook"`
	Parts []string     `json:"parts"`
}

// AfterPut is the after_send record of s, whose parts are journaled under
// parts (see rules.AfterSendChannel).
func AfterPut(s Spec, parts []string) (durability.OutboxPut, error) {
	body, err := json.Marshal(afterRecord{Hook: HookOf(s), Parts: parts})
	if err != nil {
		return durability.OutboxPut{}, fmt.Errorf("after_send of %s: %w", s.Key, err)
	}
	payload, _ := json.Marshal(rules.OutboxMessage{Text: string(body)})
	return durability.OutboxPut{Key: rules.AfterSendKey(s.Key), Provider: rules.AfterSendChannel, Chat: s.Chat,
		Payload: payload, Inbound: s.Inbound, NotBefore: s.At}, nil
}

// JournalAfter puts the after_send record of s, whose parts are journaled
// under parts, and wakes the sweeper.
func (o *Sender) JournalAfter(ctx context.Context, s Spec, parts []string) error {
	put, err := AfterPut(s, parts)
	if err != nil {
		return err
	}
	if _, _, err = o.outbox.Put(ctx, put, o.Now(), nil); err != nil {
		return fmt.Errorf("outbox journal: after_send of %s: %w", s.Key, err)
	}
	o.wake.Notify()
	return nil
}

// RearmAfterSend makes the after_send record of key run again once key is
// delivered: an operator retried a send whose record was settled without
// running the hook (the send was dead or unknown). The journal has no
// single write that turns a settled record back to pending, so the record
// is deleted and put again: a crash between the two loses the after_send of
// that send (the send itself was already re-armed by Retry), never runs it
// twice.
func RearmAfterSend(ctx context.Context, outbox durability.OutboxJournal, key string, now int64) error {
	rec, err := outbox.Get(ctx, rules.AfterSendKey(key))
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
		Payload: rec.Payload, Inbound: rec.Inbound}, now, nil)
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
func (o *Sender) runAfterSend(ctx context.Context, rec durability.OutboxRecord) {
	var m rules.OutboxMessage
	var a afterRecord
	if err := errors.Join(json.Unmarshal(rec.Payload, &m), json.Unmarshal([]byte(m.Text), &a)); err != nil || len(a.Parts) == 0 {
		o.settleFailure(ctx, rec, &channel.PermanentError{Err: fmt.Errorf("after_send record is unreadable: %v", err)}, time.Time{})
		return
	}
	h := a.Hook
	settle := func(why string) {
		o.log.Debug("after_send not run", "key", h.Key, "why", why)
		o.markSent(ctx, rec, "")
	}
	later := func(why string, retryAt int64) {
		now := o.Now()
		err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, why, durability.FailOptions{Now: now, RetryAt: max(retryAt, now+o.policy.Poll.Milliseconds()), Refund: true})
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
	hb := o.leases.Heartbeat(o.policy.Lease, rec.LeaseUntil, func(ctx context.Context, until int64) error {
		return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
	})
	hctx := hb.Context()
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
	hb.Stop()
	defer hb.Release()
	var he *wasm.HandlerError
	var fault *wasm.FaultError
	switch {
	case errors.Is(err, wasm.ErrHookBudget):
		// Not retried: the event's budget stays spent. An operator's
		// retry of the dead record runs it again.
		o.settleFailure(ctx, rec, &channel.PermanentError{Err: fmt.Errorf("botrun_after_send: %w", err)}, time.Time{})
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
	return rec.Inbound == "" && rec.PreviousPart == "" && rules.KindOf(rec.Provider) == rules.KindSend
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
func (o *Sender) hookOperatorSend(ctx context.Context, rec durability.OutboxRecord) (durability.OutboxRecord, bool) {
	if o.hooks == nil || !operatorSend(rec) {
		return rec, true
	}
	before, after := o.hooks.Hooks()
	if !before && !after {
		return rec, true
	}
	var m rules.OutboxMessage
	if json.Unmarshal(rec.Payload, &m) != nil {
		return rec, true // call reports it
	}
	s := Spec{Provider: rec.Provider, Chat: rec.Chat, Msg: m, Key: rec.Key}
	if before {
		h := HookOf(s)
		h.Time = rec.CreatedAt
		// The hook may wait for an instance: the send's lease is kept.
		hb := o.leases.Heartbeat(o.policy.Lease, rec.LeaseUntil, func(ctx context.Context, until int64) error {
			return o.outbox.Extend(ctx, rec.Key, rec.Token, until)
		})
		hctx := hb.Context()
		if o.afterBudgets != nil {
			// The chats of one operator's broadcast, on every attempt,
			// share one budget, as an event's sends do.
			hctx = wasm.WithBudget(hctx, o.afterBudgets.of(operatorBudgetKey("before", rec)))
		}
		out, err := o.hooks.BeforeSend(hctx, h)
		hb.Stop()
		hb.Release()
		res, done, fault := rules.BeforeSendOutcome(rec.Key, out, err)
		var fe *wasm.FaultError
		switch {
		case errors.As(fault, &fe) && (fe.Kind == wasm.FaultHost || fe.Kind == wasm.FaultCanceled):
			now := o.Now()
			o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, fault.Error(),
				durability.FailOptions{Now: now, RetryAt: now + o.policy.Poll.Milliseconds(), Refund: true}))
			return rec, false
		case fault != nil:
			o.settleFailure(ctx, rec, fault, time.Time{})
			return rec, false
		case done && res.Status == abi.SendCancelled:
			// The filter's deliberate choice: logged, no alert.
			why := "cancelled by botrun_before_send"
			if o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, why, durability.FailOptions{Now: o.Now(), Dead: true})) {
				o.log.InfoContext(ctx, "an operator's send was not made: botrun_before_send cancelled it", "key", rec.Key)
			}
			return rec, false
		case done:
			// The hook's error, or its budget spent: a dead letter like a
			// failed send's (outbox_dead, the outbox:dead alert).
			o.settleFailure(ctx, rec, &channel.PermanentError{Err: errors.New(res.Error)}, time.Time{})
			return rec, false
		}
		if r := out.Rewrite; r != nil {
			s.Chat, s.Msg = r.Chat, rules.OutboxMessage{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
			rec.Chat = s.Chat
			rec.Payload, _ = json.Marshal(s.Msg)
		}
	}
	if after {
		if err := o.JournalAfter(ctx, s, []string{rec.Key}); err != nil {
			now := o.Now()
			o.noteFailWrite(rec.Key, o.outbox.MarkFailed(ctx, rec.Key, rec.Token, err.Error(),
				durability.FailOptions{Now: now, RetryAt: now + o.policy.Poll.Milliseconds(), Refund: true}))
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
