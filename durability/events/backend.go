// Package events is the events durability backend ([durability] backend =
// "events"): a bot's journals kept in an application's event journal (the
// events package), the seed's eventsDurability.
//
// The bot's inbound records are events of that journal on the channel
// botrun:durable, of type botrun.inbound.message or
// botrun.inbound.interaction, with the journaled event as their payload: the
// journal's List sees them, and its Replay makes the bot process one again
// (the sweeper claims it like any pending record). The outbox and the
// conversation state are kept beside the events in the same file and the same
// atomic write (a sidecar), or the outbox in a separate durability.Kv (a
// PostgreSQL store) while the state stays in the file.
//
// The journal is a FileEventJournal opened with Lock (one process) or a
// SharedFileEventJournal (a few processes of one host).
package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/botrun/botrun/durability"
	evj "github.com/botrun/botrun/eventjournal"
)

// Channel is the events channel of the bot's inbound records.
const Channel = "botrun:durable"

// Types of the bot's inbound events: a message, or the press of a button or
// a list row (an abi.EventInteraction).
const (
	TypeMessage     = "botrun.inbound.message"
	TypeInteraction = "botrun.inbound.interaction"
)

// Journal is an events journal kept in a durability.Kv: a FileEventJournal
// or a SharedFileEventJournal.
type Journal interface {
	evj.Journal
	Kv() durability.Kv
}

// Backend is the bot's journals in an events journal.
type Backend struct {
	*durability.KvDurability
	journal Journal
	split   bool
}

// ErrUnlocked refuses a FileEventJournal opened without Lock: another process
// could open the file and lose the bot's records.
var ErrUnlocked = errors.New("events durability: the FileEventJournal must be opened with Lock (or use a SharedFileEventJournal)")

// New returns the backend over j, with the outbox (and the channels' own
// data, such as the webchat transcript) in outbox when it is not nil. The
// backend owns both: its Close closes them.
func New(j Journal, outbox durability.Kv) (*Backend, error) {
	if f, ok := j.(*evj.FileEventJournal); ok && !f.Locked() {
		return nil, ErrUnlocked
	}
	kv := &journalKv{journal: j.Kv(), outbox: outbox}
	return &Backend{KvDurability: durability.NewKvDurability(kv), journal: j, split: outbox != nil}, nil
}

// Journal returns the events journal.
func (b *Backend) Journal() Journal { return b.journal }

// Open implements durability.Backend. With a separate outbox, a completion
// and its sends cannot land in one write, so the inbox does not offer
// CompleteWithSent: the host marks the sends, then completes.
func (b *Backend) Open(ctx context.Context, scope durability.Scope) (durability.Journals, error) {
	j, err := b.KvDurability.Open(ctx, scope)
	if err == nil && b.split {
		j.Inbox = inboxOnly{j.Inbox}
	}
	return j, err
}

// inboxOnly hides the journal's optional interfaces.
type inboxOnly struct{ durability.InboxJournal }

// OpenCoordinated refuses: the events journal serves processes on one host,
// and its inbox cannot keep the per-chat order coordination needs beside an
// outbox in another store.
func (b *Backend) OpenCoordinated(context.Context, durability.Scope) (durability.Journals, error) {
	return durability.Journals{}, fmt.Errorf("events durability: %w: use backend = \"postgres\" or \"redis\" for replicas without sticky routing", durability.ErrNoCoordination)
}
