package dryrun

import (
	"context"
	"fmt"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// env answers a replayed turn's host calls from its recorded inputs and
// records what the guest would send; it calls no channel and writes nothing.
type env struct {
	event                  abi.Event
	maxSends, maxBroadcast int
	recorded               inputs.Record
	// read indexes recorded.State by key (built at the first read).
	read map[string]inputs.StateRead
	// writes are the turn's own state writes (nil value with deleted: a
	// delete), answered to its later reads.
	writes map[string]stateValue
	n, ops int
	sends  []Send
	// unknown is the first state key or media index the guest read that
	// the original turn did not: the answer then is not known.
	unknown string
	// standIn is set when a media_load was answered with stand-in bytes
	// (the recorded length, zeros): the original bytes are not kept.
	standIn bool
	opsLog  []Op
	// hooks runs the candidate's botrun_before_send on each send, as the
	// live host does (nil: no hooks).
	hooks beforeSender
	// answers holds the original turn's API calls' answers (nil: none);
	// fetches counts the candidate's calls against maxFetches; newCall
	// names the first call the original turn did not make.
	answers             *answers.Journal
	fetches, maxFetches int
	newCall             string
}

// beforeSender runs a module's botrun_before_send (*wasm.Module).
type beforeSender interface {
	BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error)
}

type stateValue struct {
	value   []byte
	deleted bool
}

func newEnv(ev abi.Event, rec inputs.Record, maxSends, maxBroadcast int) *env {
	return &env{event: ev, recorded: rec, maxSends: maxSends, maxBroadcast: maxBroadcast}
}

// key is the key of the turn's next send: explicit, or derived from the event
// and the send's position, as the host numbers them.
func (e *env) key(req abi.SendRequest) (string, bool, error) {
	e.n++
	if err := rules.CheckSendCap(e.event.ID, e.n, e.maxSends); err != nil {
		return "", false, err
	}
	key, derived := rules.SendKey(e.event.ID, e.n, req.IdempotencyKey)
	return key, derived, nil
}

func (e *env) record(ctx context.Context, req abi.SendRequest, status abi.SendStatus) (abi.SendResult, error) {
	key, derived, err := e.key(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	s := Send{Key: key, Derived: derived, Chat: req.Chat, At: req.At,
		OutboxMessage: OutboxMessage{Text: req.Text, Media: req.Media, Buttons: req.Buttons, List: req.List}}
	if res, done, err := e.beforeSend(ctx, &s); done || err != nil {
		return res, err
	}
	e.sends = append(e.sends, s)
	res := abi.SendResult{Status: status, Key: key}
	if status == abi.SendSent {
		res.Ref = "dry-run:" + key
	}
	return res, nil
}

// beforeSend runs the candidate's botrun_before_send on s as the live host
// does (host/hooks.go): its clock at the event's received_at; a rewrite
// replaces the send's chat and content; a cancel or the hook's own error
// answers done (the send is not made); any other error is a fault, which
// fails the turn.
func (e *env) beforeSend(ctx context.Context, s *Send) (abi.SendResult, bool, error) {
	if e.hooks == nil {
		return abi.SendResult{}, false, nil
	}
	out, err := e.hooks.BeforeSend(ctx, abi.SendHook{Event: e.event.ID, Provider: e.event.Provider, Chat: s.Chat, Key: s.Key,
		Text: s.Text, Media: s.Media, Buttons: s.Buttons, List: s.List, At: s.At, Time: e.event.ReceivedAt})
	if res, done, err := rules.BeforeSendOutcome(s.Key, out, err); done || err != nil {
		return res, done, err
	}
	if out.Rewrite != nil {
		r := out.Rewrite
		s.Chat, s.OutboxMessage = r.Chat, OutboxMessage{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
	}
	return abi.SendResult{}, false, nil
}

// Send implements wasm.Env: recorded, answered as sent.
func (e *env) Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	req.At = 0
	return e.record(ctx, req, abi.SendSent)
}

// Post implements wasm.Env: recorded, answered as queued.
func (e *env) Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	req.At = 0
	return e.record(ctx, req, abi.SendQueued)
}

// Enqueue implements wasm.Env: recorded, answered as the sweeper's.
func (e *env) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	status := abi.SendDeferred
	if req.At > e.event.ReceivedAt {
		status = abi.SendScheduled
	}
	return e.record(ctx, req, status)
}

// Broadcast implements wasm.Broadcaster: one send per chat, under
// "<key_prefix>:<chat>", counted once against bot.max_sends.
func (e *env) Broadcast(ctx context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	e.n++
	if err := rules.CheckBroadcast(e.event.ID, e.n, e.maxSends, len(req.Chats), e.maxBroadcast); err != nil {
		return abi.BroadcastResult{}, err
	}
	var res abi.BroadcastResult
	seen := make(map[string]bool, len(req.Chats))
	for _, chat := range req.Chats {
		if seen[chat] {
			continue
		}
		seen[chat] = true
		s := Send{Key: req.KeyPrefix + ":" + chat, Chat: chat, At: req.At, OutboxMessage: OutboxMessage{Text: req.Text, Media: req.Media}}
		_, done, err := e.beforeSend(ctx, &s)
		if err != nil {
			return res, fmt.Errorf("broadcast: %w", err)
		}
		if done {
			res.Cancelled++
			continue
		}
		e.sends = append(e.sends, s)
		res.Journaled++
	}
	return res, nil
}

// Edit implements wasm.Editor: recorded, not compared (edits are not
// journaled).
func (e *env) Edit(_ context.Context, req abi.EditRequest) error {
	return e.op(Op{Kind: "edit", Chat: req.Chat, Message: req.Message, Text: req.Text})
}

// Typing implements wasm.Editor: recorded, not compared.
func (e *env) Typing(_ context.Context, req abi.TypingRequest) error {
	return e.op(Op{Kind: "typing", Chat: req.Chat})
}

func (e *env) op(o Op) error {
	if e.ops++; e.ops > e.maxSends {
		return fmt.Errorf("event %s: more than bot.max_sends (%d) edits and typing calls", e.event.ID, e.maxSends)
	}
	e.opsLog = append(e.opsLog, o)
	return nil
}

// StateGet implements wasm.Env: the turn's own writes, else the value the
// original turn read. A key it did not read has no known answer: the guest
// gets "absent" and the record is reported as not replayable.
func (e *env) StateGet(_ context.Context, key string) ([]byte, bool, error) {
	if w, ok := e.writes[key]; ok {
		return w.value, !w.deleted, nil
	}
	if e.read == nil {
		e.read = make(map[string]inputs.StateRead, len(e.recorded.State))
		for _, r := range e.recorded.State {
			e.read[r.Key] = r
		}
	}
	if r, ok := e.read[key]; ok {
		return r.Value, r.Found, nil
	}
	if e.unknown == "" {
		e.unknown = fmt.Sprintf("state key %q", key)
	}
	return nil, false, nil
}

// StateSet implements wasm.Env: kept for the turn's later reads.
func (e *env) StateSet(_ context.Context, key string, value []byte) error {
	e.write(key, stateValue{value: append([]byte(nil), value...)})
	return nil
}

// StateDelete implements wasm.Env.
func (e *env) StateDelete(_ context.Context, key string) error {
	e.write(key, stateValue{deleted: true})
	return nil
}

func (e *env) write(key string, v stateValue) {
	if e.writes == nil {
		e.writes = map[string]stateValue{}
	}
	e.writes[key] = v
}

// LoadMedia implements wasm.Env: the recorded outcome. Bytes are not
// recorded: a load that had them gets as many zero bytes (a stand-in).
func (e *env) LoadMedia(_ context.Context, index int) ([]byte, error) {
	if index < 0 || index >= len(e.event.Media) {
		return nil, wasm.ErrNoMedia
	}
	for _, m := range e.recorded.Media {
		if m.Index != index {
			continue
		}
		switch {
		case m.Reason != "":
			return nil, &abi.MediaUnavailableError{Reason: m.Reason, Message: m.Message}
		case m.Err == inputs.ErrTooLarge:
			return nil, fmt.Errorf("media %d of %s: %w", index, e.event.ID, wasm.ErrMediaTooLarge)
		case m.Err == inputs.ErrUnsupported:
			return nil, fmt.Errorf("provider %q cannot download media: %w", e.event.Provider, wasm.ErrUnsupported)
		}
		e.standIn = true
		return make([]byte, m.Len), nil
	}
	if e.unknown == "" {
		e.unknown = fmt.Sprintf("media %d", index)
	}
	return nil, &abi.MediaUnavailableError{Reason: abi.MediaRehydrateFailed, Message: "dry run: the original turn did not load this media"}
}

// Fetch implements wasm.Fetcher: the candidate's n-th call is answered
// with what the original turn's n-th call got, when it asked the same
// (its fingerprint); any other call is never made: the guest gets a
// refusal and the record cannot be replayed.
func (e *env) Fetch(ctx context.Context, req abi.FetchRequest) (abi.FetchResponse, error) {
	if e.fetches >= e.maxFetches {
		return abi.FetchResponse{}, fmt.Errorf("more than bot.max_fetches = %d API calls in one event: %w", e.maxFetches, wasm.ErrTooLarge)
	}
	e.fetches++
	_, fp := answers.Call(e.event.ID, e.fetches, req)
	if e.answers != nil {
		a, ok, err := e.answers.Get(ctx, e.event.ID, e.fetches)
		if err != nil {
			return abi.FetchResponse{}, err
		}
		if res, replayed, err := a.Replay(fp); ok && replayed {
			return res, err
		}
	}
	if e.newCall == "" {
		method := req.Method
		if method == "" {
			method = "GET"
		}
		e.newCall = fmt.Sprintf("call %d (%s %s %s)", e.fetches, method, req.API, req.Path)
	}
	return abi.FetchResponse{}, &abi.FetchError{Reason: abi.FetchRefused, Message: "a dry run makes no new API call"}
}
