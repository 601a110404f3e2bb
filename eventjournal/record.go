package eventjournal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botrun/botrun/durability"
)

// State is an event's state. pending → processing (claimed) → done;
// processing → failed (due again at RetryAt) or dead; an expired lease may be
// claimed again.
type State string

// Event states, named as the inbox's (a bot's inbound records are events).
const (
	Pending    State = "pending"
	Processing State = "processing"
	Done       State = "done"
	Failed     State = "failed"
	Dead       State = "dead"
)

// Event is what Append records.
type Event struct {
	// ID identifies the event in the journal; empty picks a random one.
	ID string
	// Channel groups events for workers; empty is "no channel".
	Channel string
	// Type says what happened (required).
	Type string
	// Time is when it happened (zero: now). An event is due from its time.
	Time time.Time
	// Payload is the event's content, opaque to the journal.
	Payload []byte
	// Meta is the appender's own data about the event, valid JSON or empty.
	Meta json.RawMessage
}

// EventRecord is one journaled event with its processing state. Times are
// Unix milliseconds.
type EventRecord struct {
	ID      string          `json:"id"`
	Channel string          `json:"channel,omitempty"`
	Type    string          `json:"type"`
	Time    int64           `json:"time"`
	Payload []byte          `json:"payload"`
	Meta    json.RawMessage `json:"meta,omitempty"`
	State   State           `json:"state"`
	// Attempts counts claims.
	Attempts int `json:"attempts"`
	// Token is the fencing token of the current (or last) claim.
	Token int64 `json:"token"`
	// Owner is the worker holding (or last holding) the lease.
	Owner      string `json:"owner,omitempty"`
	LeasedAt   int64  `json:"leased_at,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	// RetryAt is when a failed event is due again.
	RetryAt     int64  `json:"retry_at,omitempty"`
	Error       string `json:"error,omitempty"`
	UpdatedAt   int64  `json:"updated_at"`
	CompletedAt int64  `json:"completed_at,omitempty"`
}

// Errors, tested with errors.Is. The journal's own are durability's.
var (
	ErrNotFound     = durability.ErrNotFound
	ErrStaleLease   = durability.ErrStaleLease
	ErrNotClaimable = durability.ErrNotClaimable
	ErrInvalidState = durability.ErrInvalidState
	ErrClosed       = durability.ErrClosed
	// ErrExists: Append of an id the journal holds.
	ErrExists = errors.New("events: an event with that id exists")
	// ErrReserved: a channel or id starting with "botrun:", botrun's own.
	ErrReserved = errors.New(`events: channels and ids starting with "botrun:" are botrun's`)
)

// Reserved is the prefix of botrun's own channels and event ids.
const Reserved = "botrun:"

// Storage layout in a durability.Kv: every event is a JSON EventRecord under
// Key(id), in Group, scored in the due index by when it becomes claimable and
// in the order index by its Time.
const Group = "ev/"

// Key is the Kv key of the event id.
func Key(id string) string { return Group + id }

// Due returns when the record becomes claimable; ok is false once it is
// done or dead. A pending event is due from its Time, a failed one at
// RetryAt, a claimed one when its lease expires (durability's inbox records
// are scored the same way).
func (r *EventRecord) Due() (due int64, ok bool) {
	switch r.State {
	case Pending:
		return r.Time, true
	case Failed:
		return r.RetryAt, true
	case Processing:
		return r.LeaseUntil, true
	}
	return 0, false
}

// StoredWrite returns the Kv write that stores r over version (0: create it)
// as version next, with its scores.
func StoredWrite(r *EventRecord, version, next int64) (durability.Write, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return durability.Write{}, err
	}
	order := r.Time
	w := durability.Write{Key: Key(r.ID), Version: version, Next: next, Value: b, Group: Group, Order: &order}
	if due, ok := r.Due(); ok {
		w.Due = &due
	}
	return w, nil
}

// DecodeRecord reads a stored record. The bytes come from a file: a damaged
// one, or another program's, is refused rather than half read.
func DecodeRecord(b []byte) (EventRecord, error) {
	var r EventRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, err
	}
	if dec.More() {
		return r, errors.New("trailing data after the event")
	}
	switch r.State {
	case Pending, Processing, Done, Failed, Dead:
	default:
		return r, fmt.Errorf("unknown state %q", r.State)
	}
	if r.ID == "" {
		return r, errors.New("an event without an id")
	}
	return r, nil
}
