// Package turn is one inbound event's turn as its handler sees it: the
// wasm.Env that answers the guest's host calls (sends, posts, enqueues,
// broadcasts, edits, state, media) under the turn's rules (send keys, caps,
// hook outcomes, state quotas), and the state writes and held MarkSent that
// land with the inbox completion. The host claims the record, runs the
// guest against a Turn and completes it.
//
// turn imports abi, durability, host/channel, host/inputs, host/wasm and
// host/internal/{observe,rules,send,sweep}; it never imports host.
package turn

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/internal/sweep"
	"github.com/botrun/botrun/host/wasm"
)

// Caps are the [bot] limits on one event.
type Caps struct {
	// MaxSends is bot.max_sends, MaxBroadcast bot.max_broadcast,
	// MaxChatState bot.max_chat_state and MaxEventBytes
	// bot.max_event_bytes (bytes); HandlerTimeout bounds the event's
	// botrun_before_send hooks together.
	MaxSends, MaxBroadcast      int
	MaxChatState, MaxEventBytes int64
	HandlerTimeout              time.Duration
	// MaxFetches is bot.max_fetches, MaxFetchWait bot.max_fetch_wait.
	MaxFetches   int
	MaxFetchWait time.Duration
}

// Config is what the turns of a bot share.
type Config struct {
	Sender   *send.Sender
	Outbox   durability.OutboxJournal
	State    durability.StateStore
	Channels map[string]channel.Channel
	// Counters are the bot's counters; a turn moves outbox_deferred and
	// outbox_journaled (a broadcast's copies).
	Counters *observe.Counters
	Caps     Caps
	// Wake asks the sweeper for a sweep now.
	Wake sweep.Wake
	// APIs are the [[apis]] entries by name; Answers journals their
	// answers (nil: no journal, as on a backend without a Kv).
	APIs    map[string]API
	Answers *answers.Journal
	// FetchTime observes each API call made: its API, its outcome (a
	// status class or the reason it got no response) and how long it took
	// (nil: not observed). Tracer traces each call (nil: tracing off).
	FetchTime func(api, outcome string, took time.Duration)
	Tracer    trace.Tracer
	Log       *slog.Logger
}

// New returns the turn of ev. mediaReasons say which of its media are
// unavailable, and why; held, when set, refuses the turn's sends once its
// lease (or its chat's turn) expired by this process's clock.
func New(c Config, ev abi.Event, mediaReasons []string, held func() error) *Turn {
	return &Turn{sender: c.Sender, outbox: c.Outbox, log: c.Log, wake: c.Wake, state: c.State, providers: c.Channels,
		metrics: c.Counters, maxSends: c.Caps.MaxSends, maxBroadcast: c.Caps.MaxBroadcast, quota: c.Caps.MaxChatState,
		maxBytes: c.Caps.MaxEventBytes, hookBudget: wasm.NewBudget(c.Caps.HandlerTimeout),
		event: ev, writes: map[string]durability.StateWrite{}, hooks: c.Sender.Hooks(),
		stored: map[string]int{}, usage: map[string]*stateUsage{}, held: held, mediaReasons: mediaReasons,
		apis: c.APIs, answers: c.Answers, maxFetches: c.Caps.MaxFetches, fetchWait: c.Caps.MaxFetchWait,
		fetchTime: c.FetchTime, tracer: c.Tracer}
}

// FlushPosted makes the sends the guest posted, in order (see flushPosted).
func (t *Turn) FlushPosted(ctx context.Context) error { return t.flushPosted(ctx) }

// LandMark lands the last send's held MarkSent on its own (no completion
// carries it).
func (t *Turn) LandMark(ctx context.Context) { t.flushMark(ctx) }

// Mark is the last send's MarkSent, held to land with the completion (nil:
// none).
func (t *Turn) Mark() *send.PendingMark { return t.mark }

// MarkLanded notes that the completion landed the held MarkSent.
func (t *Turn) MarkLanded() { t.mark = nil }

// Effects are the buffered state writes, and the usage records they
// change, in key order.
func (t *Turn) Effects() []durability.StateWrite { return t.effects() }

// Inputs are what the guest read from the store and the channel, as the
// completion records them.
func (t *Turn) Inputs() []byte { return t.inputs.Bytes() }

// Ran notes the digest of the code that ran the handler.
func (t *Turn) Ran(module string) { t.module = module }

// Module is the digest of the code that ran the handler.
func (t *Turn) Module() string { return t.module }

// Turn is one inbound event's run as its handler sees it: it answers the
// handler's host calls (wasm.Env). It numbers the event's sends, so the
// n-th send without an explicit key gets "<event id>:<n>", and buffers
// state writes until the inbox completion commits them.
type Turn struct {
	sender    *send.Sender
	outbox    durability.OutboxJournal
	log       *slog.Logger
	wake      sweep.Wake
	state     durability.StateStore
	providers map[string]channel.Channel
	metrics   *observe.Counters
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
	mark *send.PendingMark
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
	posted      []send.Spec
	postedBytes int
	// postedContent is their content as journaled (see chargeBytes).
	postedContent int64
	// hooks run the module's send hooks (nil: a guest without them);
	// hookBudget is what the hooks of the event's sends may use together.
	hooks      send.Hooks
	hookBudget *wasm.Budget
	// apis are the APIs the guest may call, answers their journal;
	// fetches counts the event's calls, waited their time, against
	// maxFetches and fetchWait.
	apis                map[string]API
	answers             *answers.Journal
	fetches, maxFetches int
	waited, fetchWait   time.Duration
	fetchTime           func(api, outcome string, took time.Duration)
	tracer              trace.Tracer
	// held, when set, refuses sends once the record's lease expired by
	// this process's clock (coordination: a replica frozen past its lease
	// and thawed must not act on what it read before).
	held func() error
}

// maxPostedBytes bounds the content of an event's posted sends held in
// memory at once; a post past it first makes the ones before it.
const maxPostedBytes = 1 << 20

// flushMark lands a held MarkSent on its own.
func (t *Turn) flushMark(ctx context.Context) {
	t.sender.Land(ctx, t.mark)
	t.mark = nil
}

// spec builds the send of req by the idempotency key rules: explicit, else
// derived from the event and the send's position.
func (t *Turn) spec(req abi.SendRequest) (send.Spec, error) {
	if err := t.fence(); err != nil {
		return send.Spec{}, err
	}
	t.n++
	if err := rules.CheckSendCap(t.event.ID, t.n, t.maxSends); err != nil {
		return send.Spec{}, err
	}
	s := send.Spec{Provider: t.event.Provider, Chat: req.Chat, Msg: rules.OutboxMessage{Text: req.Text, Media: req.Media, Buttons: req.Buttons, List: req.List}, Inbound: t.event.ID}
	s.Key, s.Derived = rules.SendKey(t.event.ID, t.n, req.IdempotencyKey)
	return s, nil
}

// next makes the sends posted before req and lands the last one's held
// MarkSent, then builds the send of req (spec): the start of a send or an
// enqueue, which go out after what the handler did before.
func (t *Turn) next(ctx context.Context, req abi.SendRequest) (send.Spec, error) {
	if err := t.flushPosted(ctx); err != nil {
		return send.Spec{}, err
	}
	t.flushMark(ctx)
	return t.spec(req)
}

// Send implements wasm.Env.
func (t *Turn) Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	s, err := t.next(ctx, req)
	if err != nil {
		return abi.SendResult{}, err
	}
	return t.send(ctx, s)
}

// Post implements wasm.Env: the send is numbered and keyed now, and made when
// the handler returns.
func (t *Turn) Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
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
	cs := rules.ContentSize(s.Msg)
	if held := t.sentBytes + t.postedContent + cs; held > t.maxBytes {
		return abi.SendResult{}, fmt.Errorf("event %s: a post of %d bytes would bring the content the event sends to %d bytes, over bot.max_event_bytes (%d): %w", t.event.ID, cs, held, t.maxBytes, wasm.ErrTooLarge)
	}
	t.posted = append(t.posted, s)
	t.postedBytes += size
	t.postedContent += cs
	return abi.SendResult{Status: abi.SendQueued, Key: s.Key}, nil
}

// flushPosted makes the posted sends, in order. A send refused for the
// event's bot.max_event_bytes (botrun_before_send grew it) is dead, never
// journaled: not a fault, the others are made. Another error is the
// journal's: the event's attempt fails, and its retry answers the sends
// already made from the outbox.
func (t *Turn) flushPosted(ctx context.Context) error {
	for len(t.posted) > 0 {
		s := t.posted[0]
		t.posted = t.posted[1:]
		t.flushMark(ctx)
		_, err := t.send(ctx, s)
		if errors.Is(err, wasm.ErrTooLarge) {
			t.log.WarnContext(ctx, "send refused", "key", s.Key, "err", err)
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
func (t *Turn) send(ctx context.Context, s send.Spec) (abi.SendResult, error) {
	if err := t.fence(); err != nil {
		return abi.SendResult{}, err
	}
	return t.hookedSend(ctx, s, func(s send.Spec) (abi.SendResult, error) { return t.sendNow(ctx, s) })
}

func (t *Turn) sendNow(ctx context.Context, s send.Spec) (abi.SendResult, error) {
	if t.down[s.Provider] {
		res, err := t.sender.Enqueue(ctx, s)
		if err == nil && res.Status == abi.SendDeferred {
			t.metrics.OutboxDeferred.Add(1)
			res.Error = "not tried: an earlier send of this event to the channel was deferred"
		}
		return res, err
	}
	t.flushMark(ctx)
	res, mark, err := t.sender.SendNow(ctx, s, true)
	t.mark = mark
	if err == nil && res.Status == abi.SendDeferred {
		if t.down == nil {
			t.down = map[string]bool{}
		}
		t.down[s.Provider] = true
	}
	return res, err
}

// Enqueue implements wasm.Env.
func (t *Turn) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	s, err := t.next(ctx, req)
	if err != nil {
		return abi.SendResult{}, err
	}
	s.At = req.At
	return t.hookedSend(ctx, s, func(s send.Spec) (abi.SendResult, error) { return t.sender.Enqueue(ctx, s) })
}

// Broadcast implements wasm.Broadcaster: one send per chat, journaled under
// "<key_prefix>:<chat>" for the sweeper; it counts once against
// bot.max_sends, and bot.max_broadcast bounds its chats.
func (t *Turn) Broadcast(ctx context.Context, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
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
	size := rules.ContentSize(rules.OutboxMessage{Text: req.Text, Media: req.Media})
	// With botrun_after_send, each chat's after_send record copies it too.
	first := send.Spec{Provider: t.event.Provider, Msg: rules.OutboxMessage{Text: req.Text, Media: req.Media}, Key: req.KeyPrefix + ":", Inbound: t.event.ID, At: req.At}
	size += t.afterBytes(first, []string{first.Key})
	if t.sentBytes+size*int64(uniqueChats(req.Chats)) > t.maxBytes {
		return abi.BroadcastResult{}, fmt.Errorf("event %s: a broadcast of %d bytes to %d chats is over bot.max_event_bytes (%d, %d taken): %w", t.event.ID, size, uniqueChats(req.Chats), t.maxBytes, t.sentBytes, wasm.ErrTooLarge)
	}
	hook := &send.ChatHook{Charge: func(s send.Spec, n int) error {
		return t.chargeBytes(int64(n)+t.afterBytes(s, []string{s.Key}), "a broadcast's copy")
	}}
	hookFailed := false
	if t.hooks != nil {
		if before, after := t.hooks.Hooks(); before || after {
			*hook = send.ChatHook{
				Charge: hook.Charge,
				Before: func(s *send.Spec) (bool, error) {
					res, done, err := t.beforeSend(ctx, s)
					if done {
						// A chat journaled before (a replay) is answered
						// from the journal whatever the hook says now.
						if _, gerr := t.outbox.Get(ctx, s.Key); gerr == nil {
							return true, nil
						} else if !errors.Is(gerr, durability.ErrNotFound) {
							return false, fmt.Errorf("outbox journal: %w", gerr)
						}
					}
					if done && res.Status == abi.SendDead && !hookFailed {
						hookFailed = true // once per broadcast: a hook cannot flood the log
						t.log.Warn("broadcast: botrun_before_send failed; that chat's send is cancelled (further failures of this broadcast are not logged)", "key", s.Key, "err", res.Error)
					}
					return !done, err
				},
				After: func(s send.Spec) error {
					return t.afterSend(ctx, s, abi.SendResult{Status: abi.SendDeferred, Key: s.Key}, []string{s.Key})
				},
			}
		}
	}
	res, err := send.Broadcast(ctx, t.outbox, t.event.Provider, t.event.ID, req, hook, t.sender.Now())
	if err == nil {
		t.metrics.OutboxJournaled.Add(int64(res.Journaled))
		t.wake.Notify()
	}
	return res, err
}

// chargeBytes takes n bytes of content (copies times size) of the event's
// bot.max_event_bytes for what (a send, a broadcast, a chat's copy of
// one); past it the send is refused (wasm.ErrTooLarge), and nothing taken.
func (t *Turn) chargeBytes(n int64, what string) error {
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
func (t *Turn) fence() error {
	if t.held == nil {
		return nil
	}
	return t.held()
}

// channelOp counts an edit or a typing call: an event makes at most
// bot.max_sends of them (they wait on the channel, so a loop of them would
// hold the worker and flood the channel); past it they are refused.
func (t *Turn) channelOp() error {
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
func (t *Turn) Edit(ctx context.Context, req abi.EditRequest) error {
	if err := t.channelOp(); err != nil {
		return err
	}
	e, ok := t.providers[t.event.Provider].(channel.Editor)
	if !ok {
		return fmt.Errorf("provider %q cannot edit a message: %w", t.event.Provider, wasm.ErrUnsupported)
	}
	ctx, cancel := t.sender.Policy().InlineCall(ctx)
	defer cancel()
	return e.Edit(ctx, req.Chat, req.Message, req.Text)
}

// Typing implements wasm.Editor: the event's channel shows "typing…".
func (t *Turn) Typing(ctx context.Context, req abi.TypingRequest) error {
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
	ctx, cancel := t.sender.Policy().InlineCall(ctx)
	defer cancel()
	return ty.Typing(ctx, req.Chat, replyTo)
}

// stateScope splits a guest's state key into its owner and the key within it:
// keys starting with "user/" belong to the sender (across chats), the others
// to the event's chat. The chat and sender are escaped ('%' and '/'), so the
// encoding is unambiguous: chat "v/x" with key "a" is never chat "v" with key
// "x/a".
func (t *Turn) stateScope(key string) (owner, rest string) {
	return StateScope(t.event.Provider, t.event.Chat, t.event.From, key)
}

// StateScope is stateScope for an event of provider in chat from sender
// from: what the journal's state store keeps a guest's key under (a test
// reads a bot's state with it).
func StateScope(provider, chat, from, key string) (owner, rest string) {
	if rest, ok := strings.CutPrefix(key, "user/"); ok {
		return "user/" + provider + "/" + stateSegment.Replace(from) + "/", rest
	}
	return "chat/" + provider + "/" + stateSegment.Replace(chat) + "/", key
}

// stateKey scopes a guest's state key (see stateScope).
func (t *Turn) stateKey(key string) string {
	owner, rest := t.stateScope(key)
	return owner + rest
}

// stateSegment escapes one path segment of a state key. Names without '%'
// or '/' (nearly every channel's chat ids) keep the key they always had.
var stateSegment = strings.NewReplacer("%", "%25", "/", "%2F")

// StateGet implements wasm.Env: the handler reads its own buffered writes, then
// the store as of the claim.
func (t *Turn) StateGet(ctx context.Context, key string) ([]byte, bool, error) {
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
func (t *Turn) StateSet(ctx context.Context, key string, value []byte) error {
	return t.stateWrite(ctx, key, value, false)
}

// StateDelete implements wasm.Env; the delete lands with the inbox completion.
func (t *Turn) StateDelete(ctx context.Context, key string) error {
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
func (t *Turn) stateWrite(ctx context.Context, key string, value []byte, del bool) error {
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
func (t *Turn) account(ctx context.Context, owner string) (*stateUsage, error) {
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
func (t *Turn) storedSize(ctx context.Context, k string, rest int) (int, error) {
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
func (t *Turn) effects() []durability.StateWrite {
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

// beforeSend runs the module's botrun_before_send on s once, before it is
// journaled. It answers done (with the result to give the guest) when the
// hook cancelled the send or failed with its own error (the send is dead,
// never journaled); an error is a fault, which fails the event's attempt.
// A rewritten send keeps its key, and its parts keep the fingerprints of the
// send as the handler asked for it (section 5 compares those on a replay).
func (t *Turn) beforeSend(ctx context.Context, s *send.Spec) (res abi.SendResult, done bool, err error) {
	if t.hooks == nil {
		return res, false, nil
	}
	if before, _ := t.hooks.Hooks(); !before {
		return res, false, nil
	}
	h := send.HookOf(*s)
	h.Time = t.event.ReceivedAt
	out, err := t.hooks.BeforeSend(wasm.WithBudget(ctx, t.hookBudget), h)
	if res, done, err := rules.BeforeSendOutcome(s.Key, out, err); done || err != nil {
		return res, done, err
	}
	if out.Rewrite != nil {
		s.Prehook = append(s.Prehook, t.sender.Fingerprints(*s)...)
		r := out.Rewrite
		s.Chat, s.Msg = r.Chat, rules.OutboxMessage{Text: r.Text, Media: r.Media, Buttons: r.Buttons, List: r.List}
	}
	return res, false, nil
}

// hookedSend runs botrun_before_send on s, sends it with send, then journals
// its botrun_after_send. A send already journaled under its key (a replay)
// answers from the journal even when the hook now cancels or fails it: what
// was journaled goes out, and its after_send runs.
func (t *Turn) hookedSend(ctx context.Context, s send.Spec, deliver func(send.Spec) (abi.SendResult, error)) (abi.SendResult, error) {
	res, done, err := t.beforeSend(ctx, &s)
	if err != nil {
		return res, err
	}
	if done {
		switch _, err := t.outbox.Get(ctx, s.Key); {
		case errors.Is(err, durability.ErrNotFound):
			return res, nil
		case err != nil:
			return res, fmt.Errorf("outbox journal: %w", err)
		}
	}
	parts := t.sender.PartKeys(s)
	if err := t.chargeBytes(rules.ContentSize(s.Msg)+t.afterBytes(s, parts), "a send"); err != nil {
		return abi.SendResult{}, err
	}
	var keys []string
	if t.hooks != nil {
		s.Keys = &keys
	}
	res, err = deliver(s)
	if err == nil {
		err = t.afterSend(ctx, s, res, keys)
	}
	return res, err
}

// afterSend journals, for a module that exports botrun_after_send, the
// record that runs it once the parts keys of the send res answers are
// delivered. It is put after the parts and before the event completes: a
// crash in between replays the event, which puts it then.
func (t *Turn) afterSend(ctx context.Context, s send.Spec, res abi.SendResult, keys []string) error {
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
	s.Key = res.Key
	return t.sender.JournalAfter(ctx, s, keys)
}

// afterBytes is the size of the after_send record that the send s, in
// parts, journals (0 for a module without botrun_after_send): it copies the
// send's content, so it is charged to the event's bot.max_event_bytes with
// the send, before the send is made.
func (t *Turn) afterBytes(s send.Spec, parts []string) int64 {
	if t.hooks == nil {
		return 0
	}
	if _, after := t.hooks.Hooks(); !after {
		return 0
	}
	return send.AfterSize(s, parts)
}

// mediaLoad is one media_load answer kept for the rest of the event: the
// bytes, or a final error.
type mediaLoad struct {
	b   []byte
	err error
}

// LoadMedia implements wasm.Env: the bytes of the event's media[index],
// downloaded by its provider once per event (a second load of the same index
// is answered from the first). A permanent download failure is a
// rehydrate-failed MediaUnavailableError; a transient one fails the attempt,
// which is retried.
func (t *Turn) LoadMedia(ctx context.Context, index int) ([]byte, error) {
	if index < 0 || index >= len(t.event.Media) {
		return nil, wasm.ErrNoMedia
	}
	if index < len(t.mediaReasons) && t.mediaReasons[index] != "" {
		t.inputs.MediaUnavailable(index, t.mediaReasons[index], "", "")
		return nil, &abi.MediaUnavailableError{Reason: t.mediaReasons[index]}
	}
	if r, ok := t.media[index]; ok {
		return r.b, r.err
	}
	loader, ok := t.providers[t.event.Provider].(channel.MediaLoader)
	if !ok {
		t.inputs.MediaUnavailable(index, "", "", inputs.ErrUnsupported)
		return nil, fmt.Errorf("provider %q cannot download media: %w", t.event.Provider, wasm.ErrUnsupported)
	}
	m := t.event.Media[index]
	b, err := loader.LoadMedia(ctx, channel.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME}, abi.MaxMedia)
	var r mediaLoad
	switch {
	case err == nil:
		r.b = b
		t.inputs.Media(index, b)
	case errors.Is(err, channel.ErrMediaTooLarge):
		r.err = fmt.Errorf("media %d of %s: %w", index, t.event.ID, wasm.ErrMediaTooLarge)
		t.inputs.MediaUnavailable(index, "", "", inputs.ErrTooLarge)
	case httpkit.MediaGone(err):
		r.err = &abi.MediaUnavailableError{Reason: abi.MediaRehydrateFailed, Message: err.Error()}
		t.inputs.MediaUnavailable(index, abi.MediaRehydrateFailed, err.Error(), "")
	default:
		// Transient: not kept, so a retry in this event downloads again.
		return nil, fmt.Errorf("downloading media %d of %s: %w", index, t.event.ID, err)
	}
	if t.media == nil {
		t.media = map[int]mediaLoad{}
	}
	t.media[index] = r
	return r.b, r.err
}
