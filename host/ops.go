package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"log/slog"
	"time"
)

// ListInbox lists inbound records (state "dead" is the inbound DLQ).
func (b *Bot) ListInbox(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
	return b.inbox.List(ctx, f)
}

// ListOutbox lists sends (state "dead" is the outbound DLQ; a pending send
// held until later shows as "scheduled").
func (b *Bot) ListOutbox(ctx context.Context, f durability.ListFilter) ([]durability.OutboxRecord, error) {
	return durability.ListShown(ctx, b.outbox, f, time.Now().UnixMilli())
}

// InboxRecord reads one inbound record (durability.ErrNotFound when there
// is none).
func (b *Bot) InboxRecord(ctx context.Context, id string) (durability.InboxRecord, error) {
	return b.inbox.Get(ctx, id)
}

// OutboxRecord reads one send by its key (durability.ErrNotFound when there
// is none); a pending send held until later shows as "scheduled".
func (b *Bot) OutboxRecord(ctx context.Context, key string) (durability.OutboxRecord, error) {
	rec, err := b.outbox.Get(ctx, key)
	if err == nil {
		rec.State = rec.Shown(nowMs())
	}
	return rec, err
}

// ReplayInbound processes a done, failed or dead inbound record again, with a
// fresh attempt budget. Its sends are answered from the outbox where their keys
// are journaled.
func (b *Bot) ReplayInbound(ctx context.Context, id string) error {
	if err := b.inbox.Replay(ctx, id, nowMs()); err != nil {
		return err
	}
	b.metrics.inboundReplayed.Add(1)
	rec, err := b.inbox.Get(ctx, id)
	if err != nil {
		return err
	}
	b.dispatch.Submit(dispatch.Job{ChatKey: dispatch.ChatKey(rec.Provider, rec.Chat), ID: id})
	return nil
}

// RetrySend sends a dead, failed or unknown send again.
func (b *Bot) RetrySend(ctx context.Context, key string) error {
	if err := RetrySend(ctx, b.outbox, key); err != nil {
		return err
	}
	b.wakeSweeper()
	return nil
}

// RetrySend makes the send key (dead, failed or unknown) due again, for a
// running bot's sweeper: POST /admin/outbox/{key}/retry and botrun retry
// (from another process) both retry through it. Delivered then, the send
// runs the module's botrun_after_send, which was settled without running
// while the send was dead or unknown.
func RetrySend(ctx context.Context, outbox durability.OutboxJournal, key string) error {
	if err := outbox.Retry(ctx, key, nowMs()); err != nil {
		return err
	}
	if err := send.RearmAfterSend(ctx, outbox, key, nowMs()); err != nil {
		return fmt.Errorf("re-arming the botrun_after_send of %s: %w", key, err)
	}
	return nil
}

// Discard forgets a send: a later send with its key goes out again.
func (b *Bot) Discard(ctx context.Context, key string) error {
	return DiscardSend(ctx, b.outbox, key)
}

// DiscardSend deletes the send key and the later parts of its text
// (key#2, key#3, …): discarding a scheduled send cancels all of it.
func DiscardSend(ctx context.Context, outbox durability.OutboxJournal, key string) error {
	if err := outbox.Discard(ctx, key); err != nil {
		return err
	}
	return discardRest(ctx, outbox, key, nil)
}

// discardRest deletes what goes with the deleted send key: its
// after_send record and the later parts of its text, up to the first part
// missing that is not in gone (parts deleted already).
func discardRest(ctx context.Context, outbox durability.OutboxJournal, key string, gone map[string]bool) error {
	// A later send under the key journals its own botrun_after_send.
	if err := outbox.Discard(ctx, rules.AfterSendKey(key)); err != nil && !errors.Is(err, durability.ErrNotFound) {
		return err
	}
	for n := 2; ; n++ {
		part := fmt.Sprintf("%s#%d", key, n)
		if gone[part] {
			continue
		}
		err := outbox.Discard(ctx, part)
		if errors.Is(err, durability.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// DiscardInbound deletes a dead inbound record (the operator's explicit
// deletion of one dead letter): the channel's redelivery of its message is
// processed as a new message.
func (b *Bot) DiscardInbound(ctx context.Context, id string) error {
	return b.inbox.Discard(ctx, id)
}

// PurgeDeadLetters deletes the dead letters completed before before (Unix
// ms): the dead inbound records, and the dead and unknown sends with what
// goes with each (as DiscardSend). It returns how many inbound records and
// sends it deleted.
func (b *Bot) PurgeDeadLetters(ctx context.Context, before int64) (inbox, outbox int, err error) {
	return PurgeDeadLetters(ctx, b.inbox, b.outbox, before)
}

// PurgeDeadLetters is Bot.PurgeDeadLetters on journals (the CLI's botrun
// purge --dead).
func PurgeDeadLetters(ctx context.Context, in durability.InboxJournal, out durability.OutboxJournal, before int64) (inbox, outbox int, err error) {
	ids, err := in.PurgeDead(ctx, before)
	if err != nil {
		return len(ids), 0, fmt.Errorf("purging the inbound dead letters: %w", err)
	}
	keys, err := out.PurgeDead(ctx, before)
	gone := make(map[string]bool, len(keys))
	for _, k := range keys {
		gone[k] = true
	}
	for _, k := range keys {
		if err != nil {
			break
		}
		err = discardRest(ctx, out, k, gone)
	}
	if err != nil {
		return len(ids), len(keys), fmt.Errorf("purging the outbound dead letters: %w", err)
	}
	return len(ids), len(keys), nil
}

// ErrInvalidSend is wrapped by the errors of Enqueue, SendLater and
// BroadcastLater for a request that can never be journaled (a bad name, a
// missing field, an unknown provider); their other errors are the journal's.
var ErrInvalidSend = errors.New("invalid send")

// Enqueue journals a send made outside any handler (an operator's, a
// script's), for a running bot's sweeper to deliver: now, or held until at
// (Unix ms) when at is later. Without a key, a random one. It works on a
// running bot's backend from another process (SQLite, PostgreSQL, Redis). A
// key already journaled answers from its record.
func Enqueue(ctx context.Context, outbox durability.OutboxJournal, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	if key == "" {
		key = "rnd:" + randomID()
	}
	if err := errors.Join(abi.CheckName("chat", chat), abi.CheckKey("idempotency key", key)); err != nil {
		return abi.SendResult{}, fmt.Errorf("send: %w: %w", ErrInvalidSend, err)
	}
	if text == "" || chat == "" || providerID == "" {
		return abi.SendResult{}, fmt.Errorf("send: %w: a provider, a chat and a text are required", ErrInvalidSend)
	}
	if at < 0 {
		return abi.SendResult{}, fmt.Errorf("send: %w: at %d is negative (Unix milliseconds)", ErrInvalidSend, at)
	}
	payload, _ := json.Marshal(outMsg{Text: text})
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

// SendLater journals a send for this bot's sweeper (see Enqueue) and wakes it.
func (b *Bot) SendLater(ctx context.Context, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	if _, ok := b.providers[providerID]; !ok || rules.Internal(providerID) {
		return abi.SendResult{}, fmt.Errorf("send: %w: provider %q is not configured", ErrInvalidSend, providerID)
	}
	res, err := Enqueue(ctx, b.outbox, providerID, chat, text, key, at)
	if err == nil && b.leaders.Refuse(providerID) == nil {
		b.wakeSweeper() // (a standby leaves it to the leader's next sweep)
	}
	return res, err
}

// Broadcast journals one send of text to each chat, under the key
// "<keyPrefix>:<chat>", for a running bot's sweeper to deliver (held until
// at when it is later): botrun broadcast, POST /admin/broadcast, and the
// guest's broadcast all journal through it. A key journaled before is not
// sent again (it counts in Existing).
func Broadcast(ctx context.Context, outbox durability.OutboxJournal, providerID, inbound string, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	return send.Broadcast(ctx, outbox, providerID, inbound, req, nil, nowMs())
}

// BroadcastLater journals a broadcast for this bot's sweeper (see
// Broadcast) and wakes it.
func (b *Bot) BroadcastLater(ctx context.Context, providerID string, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	if _, ok := b.providers[providerID]; !ok || rules.Internal(providerID) {
		return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: provider %q is not configured", ErrInvalidSend, providerID)
	}
	if max := b.cfg.Bot.MaxBroadcast; len(req.Chats) > max {
		return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: %d chats, over bot.max_broadcast (%d)", ErrInvalidSend, len(req.Chats), max)
	}
	res, err := Broadcast(ctx, b.outbox, providerID, "", req)
	if err == nil {
		b.metrics.outboxJournaled.Add(int64(res.Journaled))
		b.wakeSweeper()
	}
	return res, err
}

// ModuleDigest is the sha256 digest of the module that runs the bot's turns
// now (after a hot reload, the new one).
func (b *Bot) ModuleDigest() string { return b.guest.Digest() }

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
