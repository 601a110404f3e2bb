package host

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// turn answers the host calls of one event's handler (wasm.Env). It numbers the
// event's sends, so the n-th send without an explicit key gets "<event id>:<n>",
// and buffers state writes until the inbox completion commits them.
type turn struct {
	bot    *Bot
	event  abi.Event
	n      int
	writes map[string]durability.StateWrite
	// mark is the last send's MarkSent, deferred to land with the completion;
	// its heartbeat keeps the send's lease until then.
	mark *pendingMark
	// mediaReasons say why event media is unavailable, per index ("" when
	// it is available).
	mediaReasons []string
	// media holds this event's media_load results by index, so a guest
	// loading the same media twice downloads it once.
	media map[int]mediaLoad
	// module is the digest of the module that ran the handler, when the
	// handler is hot-reloadable.
	module string
}

type pendingMark struct {
	rec durability.OutboxRecord
	ref string
	at  int64
	hb  *heartbeat
}

// flushMark lands a deferred MarkSent on its own.
func (t *turn) flushMark(ctx context.Context) {
	if m := t.mark; m != nil {
		t.mark = nil
		m.hb.stop()
		t.bot.markSentAt(ctx, m.rec, m.ref, m.at)
		m.hb.release()
	}
}

func (b *Bot) newTurn(ev abi.Event) *turn {
	return &turn{bot: b, event: ev, writes: map[string]durability.StateWrite{}}
}

// ErrSendCap fails an event whose handler sends more than bot.max_sends.
var ErrSendCap = errors.New("the handler sent more than bot.max_sends")

// spec builds the send of req by the idempotency key rules: explicit, else
// derived from the event and the send's position.
func (t *turn) spec(req abi.SendRequest) (sendSpec, error) {
	t.n++
	if max := t.bot.cfg.Bot.MaxSends; t.n > max {
		return sendSpec{}, fmt.Errorf("event %s: %w (%d): raise it in [bot] if the bot means it", t.event.ID, ErrSendCap, max)
	}
	s := sendSpec{provider: t.event.Provider, chat: req.Chat, msg: outMsg{Text: req.Text, Media: req.Media}, inbound: t.event.ID, turn: t}
	if req.IdempotencyKey != "" {
		s.key = req.IdempotencyKey
	} else {
		s.key, s.derived = fmt.Sprintf("%s:%d", t.event.ID, t.n), true
	}
	return s, nil
}

// Send implements wasm.Env.
func (t *turn) Send(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	t.flushMark(ctx)
	s, err := t.spec(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	return t.bot.sendNow(ctx, s)
}

// Enqueue implements wasm.Env.
func (t *turn) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	t.flushMark(ctx)
	s, err := t.spec(req)
	if err != nil {
		return abi.SendResult{}, err
	}
	return t.bot.enqueue(ctx, s)
}

// stateKey scopes a guest's state key: keys starting with "user/" belong to
// the sender (across chats), the others to the event's chat. The chat and
// sender are escaped ('%' and '/'), so the encoding is unambiguous: chat "v/x"
// with key "a" is never chat "v" with key "x/a".
func (t *turn) stateKey(key string) string {
	if rest, ok := strings.CutPrefix(key, "user/"); ok {
		return "user/" + t.event.Provider + "/" + stateSegment.Replace(t.event.From) + "/" + rest
	}
	return "chat/" + t.event.Provider + "/" + stateSegment.Replace(t.event.Chat) + "/" + key
}

// stateSegment escapes one path segment of a state key. Names without '%'
// or '/' (nearly every channel's chat ids) keep the key they always had.
var stateSegment = strings.NewReplacer("%", "%25", "/", "%2F")

// StateGet implements wasm.Env: the handler reads its own buffered writes, then
// the store as of the claim.
func (t *turn) StateGet(ctx context.Context, key string) ([]byte, bool, error) {
	k := t.stateKey(key)
	if w, ok := t.writes[k]; ok {
		return w.Value, !w.Delete, nil
	}
	return t.bot.state.Get(ctx, k)
}

// StateSet implements wasm.Env; the write lands with the inbox completion.
func (t *turn) StateSet(_ context.Context, key string, value []byte) error {
	k := t.stateKey(key)
	t.writes[k] = durability.StateWrite{Key: k, Value: append([]byte(nil), value...)}
	return nil
}

// StateDelete implements wasm.Env; the delete lands with the inbox completion.
func (t *turn) StateDelete(_ context.Context, key string) error {
	k := t.stateKey(key)
	t.writes[k] = durability.StateWrite{Key: k, Delete: true}
	return nil
}

// effects returns the buffered writes in key order.
func (t *turn) effects() []durability.StateWrite {
	out := make([]durability.StateWrite, 0, len(t.writes))
	for _, w := range t.writes {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
