package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/ops"
)

// Operator is the bot's operator (host/ops): what the admin API reads and
// does, acting on this running bot.
func (b *Bot) Operator() *ops.Operator { return b.op }

// NewOperator is an operator over the journals j (and the backend's Kv kv,
// nil without one) of the bot cfg describes, with no running bot: botrun's
// CLI, from another process than the bot's.
func NewOperator(cfg *config.Config, j durability.Journals, kv durability.Kv) *ops.Operator {
	return ops.New(operatorOptions(cfg, j, kv))
}

// operatorOptions are the settings of an operator of the bot cfg
// describes, over its journals j and Kv kv.
func operatorOptions(cfg *config.Config, j durability.Journals, kv durability.Kv) ops.Options {
	var sessions []string
	for _, p := range sessionProviders(cfg) {
		sessions = append(sessions, p.ID)
	}
	return ops.Options{Journals: j, Kv: kv, Scope: Scope(cfg).ID() + "/", Sessions: sessions, Book: book{}}
}

// newOperator is b's operator (Bot.Operator).
func newOperator(b *Bot) *ops.Operator {
	o := operatorOptions(b.cfg, durability.Journals{Inbox: b.inbox, Outbox: b.outbox, State: b.state}, b.kv)
	o.Live = live{b}
	return ops.New(o)
}

// live is the running bot as its operator acts on it (ops.Live).
type live struct{ b *Bot }

func (l live) Replayed() { l.b.metrics.InboundReplayed.Add(1) }

func (l live) Submit(rec durability.InboxRecord) {
	l.b.dispatch.Submit(dispatch.Job{ChatKey: dispatch.ChatKey(rec.Provider, rec.Chat), ID: rec.ID})
}

func (l live) Wake()                        { l.b.wake.Notify() }
func (l live) Leads(providerID string) bool { return l.b.leaders.Refuse(providerID) == nil }
func (l live) MaxBroadcast() int            { return l.b.cfg.Bot.MaxBroadcast }
func (l live) Journaled(n int)              { l.b.metrics.OutboxJournaled.Add(int64(n)) }
func (l live) Configured(providerID string) bool {
	_, ok := l.b.providers[providerID]
	return ok
}

// book is the turn's rule book as an operator's actions need it (ops.Book).
type book struct{}

// Broadcast journals an operator's broadcast (ops.Book): botrun
// broadcast, POST /admin/broadcast, and the guest's broadcast all journal
// through send.Broadcast.
func (book) Broadcast(ctx context.Context, outbox durability.OutboxJournal, providerID string, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	return send.Broadcast(ctx, outbox, providerID, "", req, nil, time.Now().UnixMilli())
}

func (book) Rearm(ctx context.Context, outbox durability.OutboxJournal, key string) error {
	return send.RearmAfterSend(ctx, outbox, key, time.Now().UnixMilli())
}

func (book) AfterSendKey(key string) string  { return rules.AfterSendKey(key) }
func (book) Internal(providerID string) bool { return rules.Internal(providerID) }

func (book) Inbound(payload []byte) (abi.Event, error) {
	ev, _, err := rules.ParseJournaled(payload)
	return ev, err
}

func (book) Outbound(payload []byte) (string, *abi.Media, error) {
	var m rules.OutboxMessage
	if err := json.Unmarshal(payload, &m); err != nil {
		return "", nil, err
	}
	return m.Text, m.Media, nil
}

func (book) Turns(ctx context.Context, kv durability.Kv, group string) ([]ops.Lease, error) {
	held, err := lease.HeldTurns(ctx, kv, group)
	out := make([]ops.Lease, len(held))
	for i, h := range held {
		out[i] = ops.Lease{Owner: h.Owner, Until: h.Until}
	}
	return out, err
}

// Enqueue journals an operator's send (ops.Book).
func (book) Enqueue(ctx context.Context, outbox durability.OutboxJournal, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	return enqueue(ctx, outbox, providerID, chat, text, key, at)
}

// enqueue journals a send made outside any handler (an operator's, a
// script's, an alert's), for a running bot's sweeper to deliver: now, or
// held until at (Unix ms) when at is later. Without a key, a random one. It
// works on a running bot's backend from another process (SQLite,
// PostgreSQL, Redis). A key already journaled answers from its record.
func enqueue(ctx context.Context, outbox durability.OutboxJournal, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	if key == "" {
		key = "rnd:" + randomID()
	}
	if err := errors.Join(abi.CheckName("chat", chat), abi.CheckKey("idempotency key", key)); err != nil {
		return abi.SendResult{}, fmt.Errorf("send: %w: %w", ops.ErrInvalidSend, err)
	}
	if text == "" || chat == "" || providerID == "" {
		return abi.SendResult{}, fmt.Errorf("send: %w: a provider, a chat and a text are required", ops.ErrInvalidSend)
	}
	if at < 0 {
		return abi.SendResult{}, fmt.Errorf("send: %w: at %d is negative (Unix milliseconds)", ops.ErrInvalidSend, at)
	}
	payload, _ := json.Marshal(rules.OutboxMessage{Text: text})
	now := time.Now().UnixMilli()
	st, rec, err := outbox.Put(ctx, durability.OutboxPut{Key: key, Provider: providerID, Chat: chat, Payload: payload,
		Fingerprint: rules.Fingerprint(chat, payload), NotBefore: at}, now, nil)
	if err != nil {
		return abi.SendResult{}, fmt.Errorf("send: outbox journal: %w", err)
	}
	res := abi.SendResult{Status: abi.SendDeferred, Key: key}
	switch {
	case st == durability.Exists && rec.State == durability.OutboxSent:
		res = abi.SendResult{Status: abi.SendDeduped, Key: key, Ref: rec.Ref}
	case st == durability.Exists && rec.State == durability.OutboxDead:
		res = abi.SendResult{Status: abi.SendDead, Key: key, Error: rec.Error}
	case rec.Shown(now) == durability.OutboxScheduled:
		res.Status = abi.SendScheduled
	}
	return res, nil
}

// Logger is the bot's logger, for the surfaces mounted on it (the admin
// API's log of operator actions).
func (b *Bot) Logger() *slog.Logger { return b.log }

// Draining is closed when the bot begins to stop, before its HTTP servers
// shut down: a long-lived response (the console's live tail) ends on it, so
// the graceful stop does not wait for it.
func (b *Bot) Draining() <-chan struct{} { return b.draining }

// DryRunSource returns the bot's journals and config: what a dry run of a
// candidate module reads (host/dryrun, from the console). It only reads
// them.
func (b *Bot) DryRunSource() (durability.Journals, *config.Config) {
	return durability.Journals{Inbox: b.inbox, Outbox: b.outbox, State: b.state}, b.cfg
}
