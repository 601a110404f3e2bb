// Package ops is the operator's side of a bot: what botrun's CLI and the
// admin API read (the inbox and outbox, a chat's message log, who holds
// what among the replicas) and do (replay, retry, discard, purge, send and
// broadcast later). One type, Operator, serves both: built over the
// journals alone for the CLI (another process than the bot's), or handed
// out by a running bot (host.Bot.Operator), which it then wakes.
//
// ops imports durability, abi, host/channel and host/channel/kvlease (the
// leaders' records); never host, which builds an Operator and hands it the
// turn's rule book through Book. It is not under host/internal so that
// cmd/botrun can use it.
package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// ErrInvalidSend is wrapped by the errors of the sends and broadcasts an
// operator journals (SendLater, BroadcastLater, Book.Enqueue) for a request
// that can never be journaled (a bad name, a missing field, an unknown
// provider); their other errors are the journal's.
var ErrInvalidSend = errors.New("invalid send")

// Book is the turn's rule book as an operator's actions need it: the
// formats the journals keep. host supplies it.
type Book interface {
	// Enqueue journals a send made outside any handler, for a running
	// bot's sweeper to deliver: now, or held until at (Unix ms) when at is
	// later. Without a key, a random one. A key already journaled answers
	// from its record.
	Enqueue(ctx context.Context, outbox durability.OutboxJournal, providerID, chat, text, key string, at int64) (abi.SendResult, error)
	// Broadcast journals one send of req's text to each of its chats,
	// under the key "<keyPrefix>:<chat>" (a key journaled before counts in
	// Existing).
	Broadcast(ctx context.Context, outbox durability.OutboxJournal, providerID string, req abi.BroadcastRequest) (abi.BroadcastResult, error)
	// Rearm makes the botrun_after_send record of send key run again once
	// the send is delivered.
	Rearm(ctx context.Context, outbox durability.OutboxJournal, key string) error
	// AfterSendKey is the key of the botrun_after_send record of send key.
	AfterSendKey(key string) string
	// Internal reports whether providerID names one of the host's own
	// kinds of outbox record (alerts, after_send), not a channel.
	Internal(providerID string) bool
	// Inbound reads the event journaled in an inbox record's payload.
	Inbound(payload []byte) (abi.Event, error)
	// Outbound reads the text and media journaled in a send's payload.
	Outbound(payload []byte) (text string, media *abi.Media, err error)
	// Turns lists the chat turns ([durability] coordination) held under
	// group in kv.
	Turns(ctx context.Context, kv durability.Kv, group string) ([]Lease, error)
}

// Live is the running bot an Operator acts on, to have what it journaled
// taken up at once.
type Live interface {
	// Replayed counts an inbound record replayed (inbound_replayed).
	Replayed()
	// Submit hands inbound record rec, made due again, to the bot's
	// workers.
	Submit(rec durability.InboxRecord)
	// Wake wakes the bot's sweeper.
	Wake()
	// Leads reports whether this replica sends on channel providerID
	// (false: another replica leads its session).
	Leads(providerID string) bool
	// Configured reports whether providerID is one of the bot's channels.
	Configured(providerID string) bool
	// MaxBroadcast is bot.max_broadcast.
	MaxBroadcast() int
	// Journaled counts n sends journaled (the outbox_journaled counter).
	Journaled(n int)
}

// Options build an Operator.
type Options struct {
	Journals durability.Journals
	// Kv is the backend's Kv, where the leaders and chat turns are (nil:
	// a status shows no leader and no chat turn).
	Kv durability.Kv
	// Scope is the bot's key prefix in Kv ("<scope id>/").
	Scope string
	// Sessions are the channels whose session is "leader", in config
	// order.
	Sessions []string
	Book     Book
	// Live is the running bot; nil for an operator over the journals
	// alone (the CLI's).
	Live Live
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Operator reads and acts on a bot's journals.
type Operator struct {
	in   durability.InboxJournal
	out  durability.OutboxJournal
	o    Options
	live Live
}

// New is an Operator over o's journals.
func New(o Options) *Operator {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Operator{in: o.Journals.Inbox, out: o.Journals.Outbox, o: o, live: o.Live}
}

func (op *Operator) nowMs() int64 { return op.o.Now().UnixMilli() }

// wake wakes the running bot's sweeper, if any.
func (op *Operator) wake() {
	if op.live != nil {
		op.live.Wake()
	}
}

// ListInbox lists inbound records (state "dead" is the inbound DLQ).
func (op *Operator) ListInbox(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
	return op.in.List(ctx, f)
}

// ListOutbox lists sends (state "dead" is the outbound DLQ; a pending send
// held until later shows as "scheduled").
func (op *Operator) ListOutbox(ctx context.Context, f durability.ListFilter) ([]durability.OutboxRecord, error) {
	return durability.ListShown(ctx, op.out, f, op.nowMs())
}

// InboxRecord reads one inbound record (durability.ErrNotFound when there
// is none).
func (op *Operator) InboxRecord(ctx context.Context, id string) (durability.InboxRecord, error) {
	return op.in.Get(ctx, id)
}

// OutboxRecord reads one send by its key (durability.ErrNotFound when there
// is none); a pending send held until later shows as "scheduled".
func (op *Operator) OutboxRecord(ctx context.Context, key string) (durability.OutboxRecord, error) {
	rec, err := op.out.Get(ctx, key)
	if err == nil {
		rec.State = rec.Shown(op.nowMs())
	}
	return rec, err
}

// ReplayInbound processes a done, failed or dead inbound record again, with a
// fresh attempt budget. Its sends are answered from the outbox where their keys
// are journaled.
func (op *Operator) ReplayInbound(ctx context.Context, id string) error {
	if err := op.in.Replay(ctx, id, op.nowMs()); err != nil {
		return err
	}
	if op.live == nil {
		return nil
	}
	op.live.Replayed()
	rec, err := op.in.Get(ctx, id)
	if err != nil {
		return err
	}
	op.live.Submit(rec)
	return nil
}

// RetrySend makes the send key (dead, failed or unknown) due again, for a
// running bot's sweeper: POST /admin/outbox/{key}/retry and botrun retry
// (from another process) both retry through it. Delivered then, the send
// runs the module's botrun_after_send, which was settled without running
// while the send was dead or unknown.
func (op *Operator) RetrySend(ctx context.Context, key string) error {
	if err := op.out.Retry(ctx, key, op.nowMs()); err != nil {
		return err
	}
	if err := op.o.Book.Rearm(ctx, op.out, key); err != nil {
		return fmt.Errorf("re-arming the botrun_after_send of %s: %w", key, err)
	}
	op.wake()
	return nil
}

// Discard forgets a send: a later send with its key goes out again. It
// deletes the send key and the later parts of its text (key#2, key#3, …):
// discarding a scheduled send cancels all of it.
func (op *Operator) Discard(ctx context.Context, key string) error {
	if err := op.out.Discard(ctx, key); err != nil {
		return err
	}
	return op.discardRest(ctx, key, nil)
}

// discardRest deletes what goes with the deleted send key: its
// after_send record and the later parts of its text, up to the first part
// missing that is not in gone (parts deleted already).
func (op *Operator) discardRest(ctx context.Context, key string, gone map[string]bool) error {
	// A later send under the key journals its own botrun_after_send.
	if err := op.out.Discard(ctx, op.o.Book.AfterSendKey(key)); err != nil && !errors.Is(err, durability.ErrNotFound) {
		return err
	}
	for n := 2; ; n++ {
		part := fmt.Sprintf("%s#%d", key, n)
		if gone[part] {
			continue
		}
		err := op.out.Discard(ctx, part)
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
func (op *Operator) DiscardInbound(ctx context.Context, id string) error {
	return op.in.Discard(ctx, id)
}

// PurgeDeadLetters deletes the dead letters completed before before (Unix
// ms): the dead inbound records, and the dead and unknown sends with what
// goes with each (as Discard). It returns how many inbound records and
// sends it deleted.
func (op *Operator) PurgeDeadLetters(ctx context.Context, before int64) (inbox, outbox int, err error) {
	ids, err := op.in.PurgeDead(ctx, before)
	if err != nil {
		return len(ids), 0, fmt.Errorf("purging the inbound dead letters: %w", err)
	}
	keys, err := op.out.PurgeDead(ctx, before)
	gone := make(map[string]bool, len(keys))
	for _, k := range keys {
		gone[k] = true
	}
	for _, k := range keys {
		if err != nil {
			break
		}
		err = op.discardRest(ctx, k, gone)
	}
	if err != nil {
		return len(ids), len(keys), fmt.Errorf("purging the outbound dead letters: %w", err)
	}
	return len(ids), len(keys), nil
}

// SendLater journals a send made outside any handler (an operator's, a
// script's) for the bot's sweeper to deliver (see Book.Enqueue), and wakes
// a running bot's sweeper when this replica leads the channel. Over the
// journals alone it works on a running bot's backend from another process
// (SQLite, PostgreSQL, Redis).
func (op *Operator) SendLater(ctx context.Context, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	if op.live != nil && (!op.live.Configured(providerID) || op.o.Book.Internal(providerID)) {
		return abi.SendResult{}, fmt.Errorf("send: %w: provider %q is not configured", ErrInvalidSend, providerID)
	}
	res, err := op.o.Book.Enqueue(ctx, op.out, providerID, chat, text, key, at)
	if err == nil && op.live != nil && op.live.Leads(providerID) {
		op.live.Wake() // (a standby leaves it to the leader's next sweep)
	}
	return res, err
}

// BroadcastLater journals a broadcast for the bot's sweeper (see
// Book.Broadcast) and wakes a running bot's sweeper; a running bot refuses
// more chats than bot.max_broadcast.
func (op *Operator) BroadcastLater(ctx context.Context, providerID string, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	if op.live != nil {
		if !op.live.Configured(providerID) || op.o.Book.Internal(providerID) {
			return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: provider %q is not configured", ErrInvalidSend, providerID)
		}
		if max := op.live.MaxBroadcast(); len(req.Chats) > max {
			return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: %d chats, over bot.max_broadcast (%d)", ErrInvalidSend, len(req.Chats), max)
		}
	}
	res, err := op.o.Book.Broadcast(ctx, op.out, providerID, req)
	if err == nil && op.live != nil {
		op.live.Journaled(res.Journaled)
		op.live.Wake()
	}
	return res, err
}
