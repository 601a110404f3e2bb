package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// internalProvider reports whether id is one of the host's own channels
// (alerts, after_send), which no [[providers]] id can name.
func internalProvider(id string) bool { return id != "" && id[0] == '_' }

func afterSendKey(key string) string { return key + "@after_send" }

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
// A rewritten send keeps its key, and its parts keep the fingerprint of the
// content before the hook (section 5 compares that on a replay).
func (t *turn) beforeSend(ctx context.Context, s *sendSpec) (res abi.SendResult, done bool, err error) {
	if t.hooks == nil {
		return res, false, nil
	}
	if before, _ := t.hooks.Hooks(); !before {
		return res, false, nil
	}
	h := hookOf(*s)
	h.Time = t.event.ReceivedAt
	out, err := t.hooks.BeforeSend(ctx, h)
	var he *wasm.HandlerError
	switch {
	case errors.As(err, &he):
		return abi.SendResult{Status: abi.SendDead, Key: s.key, Error: "botrun_before_send: " + he.Error()}, true, nil
	case err != nil:
		return res, false, fmt.Errorf("botrun_before_send of %s: %w", s.key, err)
	case out.Cancel:
		return abi.SendResult{Status: abi.SendCancelled, Key: s.key}, true, nil
	case out.Rewrite != nil:
		before, _ := json.Marshal(s.msg)
		s.prehook = fingerprint(s.chat, before)
		r := out.Rewrite
		s.chat, s.msg = r.Chat, outMsg{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
	}
	return res, false, nil
}

// afterSend journals, for a module that exports botrun_after_send, the
// record that runs it once the send res answers is delivered. It is put
// after the send's parts and before the event completes: a crash in between
// replays the event, which puts it then.
func (t *turn) afterSend(ctx context.Context, s sendSpec, res abi.SendResult) error {
	if t.hooks == nil {
		return nil
	}
	switch res.Status {
	case abi.SendSent, abi.SendDeduped, abi.SendDeferred, abi.SendScheduled:
	default:
		return nil
	}
	if _, after := t.hooks.Hooks(); !after {
		return nil
	}
	s.key = res.Key
	return t.sender.journalAfter(ctx, s)
}

// journalAfter puts the after_send record of s (see afterSendProvider).
func (o *sender) journalAfter(ctx context.Context, s sendSpec) error {
	body, err := json.Marshal(hookOf(s))
	if err != nil {
		return fmt.Errorf("after_send of %s: %w", s.key, err)
	}
	payload, _ := json.Marshal(outMsg{Text: string(body)})
	_, _, err = o.outbox.Put(ctx, durability.OutboxPut{Key: afterSendKey(s.key), Provider: afterSendProvider, Chat: s.chat,
		Payload: payload, Inbound: s.inbound, NotBefore: s.at}, nowMs(), nil)
	if err != nil {
		return fmt.Errorf("outbox journal: after_send of %s: %w", s.key, err)
	}
	return nil
}

// runAfterSend delivers a claimed after_send record: once every part of its
// send is sent, it runs botrun_after_send with the first part's ref. It waits
// (without charging an attempt) while a part is not sent yet, and settles
// without running the hook when the send never went out (dead, discarded, or
// unknown after a crash) or the module no longer exports the hook. A fault of
// the hook is retried like a failed send; the hook's own error is logged and
// not retried. A claim left in flight by a crash runs the hook again: at
// least once.
func (o *sender) runAfterSend(ctx context.Context, rec durability.OutboxRecord) {
	var m outMsg
	var h abi.SendHook
	if err := errors.Join(json.Unmarshal(rec.Payload, &m), json.Unmarshal([]byte(m.Text), &h)); err != nil {
		o.settleFailure(ctx, rec, &permanentError{fmt.Errorf("after_send record is unreadable: %w", err)}, time.Time{})
		return
	}
	settle := func(why string) {
		if why != "" {
			o.log.Debug("after_send not run", "key", h.Key, "why", why)
		}
		o.markSent(ctx, rec, "")
	}
	first, sent := durability.OutboxRecord{}, int64(0)
	for n := 1; ; n++ {
		key := h.Key
		if n > 1 {
			key += "#" + strconv.Itoa(n)
		}
		part, err := o.outbox.Get(ctx, key)
		switch {
		case errors.Is(err, durability.ErrNotFound) && n == 1:
			settle("the send was discarded")
			return
		case errors.Is(err, durability.ErrNotFound):
		case err != nil:
			o.settleFailure(ctx, rec, err, time.Time{})
			return
		case part.State == durability.OutboxDead, part.State == durability.OutboxUnknown:
			settle("the send was not delivered: " + string(part.State))
			return
		case part.State != durability.OutboxSent:
			// Not delivered yet: wait, without charging an attempt.
			now := nowMs()
			retry := max(part.RetryAt, now+o.policy.poll.Milliseconds())
			err := o.outbox.MarkFailed(ctx, rec.Key, rec.Token, "waiting for "+key, durability.FailOptions{Now: now, RetryAt: retry, Refund: true})
			o.noteFailWrite(rec.Key, err)
			return
		default:
			if n == 1 {
				first = part
			}
			sent = max(sent, part.CompletedAt)
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
	err := o.hooks.AfterSend(ctx, h)
	var he *wasm.HandlerError
	switch {
	case errors.As(err, &he):
		o.log.Warn("botrun_after_send returned an error; not retried", "key", h.Key, "err", he.Message)
	case err != nil:
		o.log.Warn("botrun_after_send faulted; it runs again", "key", h.Key, "err", err)
		o.settleFailure(ctx, rec, err, time.Time{})
		return
	}
	o.markSent(ctx, rec, "")
}
