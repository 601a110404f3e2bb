// Package ops is the operator's side of a bot: what botrun's CLI and the
// admin API read (the inbox and outbox, a chat's message log, who holds
// what among the replicas) and do (replay, retry, discard, purge, send and
// broadcast later). One type, Operator, serves both: built over the
// journals alone for the CLI (another process than the bot's), or handed
// out by a running bot (host.Bot.Operator), which it then wakes.
//
// ops imports durability, abi, host/channel, host/channel/kvlease (the
// leaders' records) and the host's rule book, sender, leases and
// counters (host/internal/{rules,send,lease,observe}: the formats the
// journals keep, how a send or broadcast is journaled, the chats' turns, a
// running bot's counters); never host, which builds an
// Operator, nor host/admin. It is not under host/internal so that
// cmd/botrun can use it.
package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
)

// ErrInvalidSend is wrapped by the errors of the sends and broadcasts an
// operator journals (SendLater, BroadcastLater) for a request that can
// never be journaled (a bad name, a missing field, an unknown provider);
// their other errors are the journal's. It is send.ErrInvalidSend, named
// here for code outside host.
var ErrInvalidSend = send.ErrInvalidSend

// Live is the running bot an Operator acts on, to have what it journaled
// taken up at once.
type Live interface {
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
	// Live is the running bot; nil for an operator over the journals
	// alone (the CLI's).
	Live Live
	// Counters are the running bot's counters (inbound_replayed,
	// outbox_journaled); nil with Live.
	Counters *observe.Counters
	// MaxFetches is bot.max_fetches: how many API calls of a record
	// Calls looks for (0: 16).
	MaxFetches int
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
	if c := op.o.Counters; c != nil {
		c.InboundReplayed.Add(1)
	}
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
	if err := send.RearmAfterSend(ctx, op.out, key, op.nowMs()); err != nil {
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
	if err := op.out.Discard(ctx, rules.AfterSendKey(key)); err != nil && !errors.Is(err, durability.ErrNotFound) {
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
// script's) for the bot's sweeper to deliver (see send.Enqueue), and wakes
// a running bot's sweeper when this replica leads the channel. Over the
// journals alone it works on a running bot's backend from another process
// (SQLite, PostgreSQL, Redis).
func (op *Operator) SendLater(ctx context.Context, providerID, chat, text, key string, at int64) (abi.SendResult, error) {
	if op.live != nil && (!op.live.Configured(providerID) || rules.Internal(providerID)) {
		return abi.SendResult{}, fmt.Errorf("send: %w: provider %q is not configured", ErrInvalidSend, providerID)
	}
	res, err := send.Enqueue(ctx, op.out, providerID, chat, text, key, at, op.nowMs())
	if err == nil && op.live != nil && op.live.Leads(providerID) {
		op.live.Wake() // (a standby leaves it to the leader's next sweep)
	}
	return res, err
}

// BroadcastLater journals a broadcast for the bot's sweeper (see
// send.Broadcast) and wakes a running bot's sweeper; a running bot refuses
// more chats than bot.max_broadcast.
func (op *Operator) BroadcastLater(ctx context.Context, providerID string, req abi.BroadcastRequest) (abi.BroadcastResult, error) {
	if op.live != nil {
		if !op.live.Configured(providerID) || rules.Internal(providerID) {
			return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: provider %q is not configured", ErrInvalidSend, providerID)
		}
		if max := op.live.MaxBroadcast(); len(req.Chats) > max {
			return abi.BroadcastResult{}, fmt.Errorf("broadcast: %w: %d chats, over bot.max_broadcast (%d)", ErrInvalidSend, len(req.Chats), max)
		}
	}
	res, err := send.Broadcast(ctx, op.out, providerID, "", req, nil, op.nowMs())
	if err == nil && op.live != nil {
		if c := op.o.Counters; c != nil {
			c.OutboxJournaled.Add(int64(res.Journaled))
		}
		op.live.Wake()
	}
	return res, err
}
