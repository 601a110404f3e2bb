package durability

import (
	"context"
	"encoding/json"
)

// InboxState is the state of an inbound record.
type InboxState string

// Inbox states. pending → processing → done; processing → failed (due again at
// RetryAt) or dead; failed → processing on the next claim.
const (
	InboxPending    InboxState = "pending"
	InboxProcessing InboxState = "processing"
	InboxDone       InboxState = "done"
	InboxFailed     InboxState = "failed"
	InboxDead       InboxState = "dead"
)

// InboxStates lists every inbox state.
var InboxStates = []InboxState{InboxPending, InboxProcessing, InboxDone, InboxFailed, InboxDead}

// Terminal reports whether no claim will ever take the record again.
func (s InboxState) Terminal() bool { return s == InboxDone || s == InboxDead }

// OutboxState is the state of an outbound record.
type OutboxState string

// Outbox states. pending/failed → sending (begin or claim) → sent, failed or
// dead; an expired sending lease is ambiguous and resolves to unknown (skip) or
// pending (resend).
const (
	OutboxPending OutboxState = "pending"
	OutboxSending OutboxState = "sending"
	OutboxSent    OutboxState = "sent"
	OutboxFailed  OutboxState = "failed"
	OutboxDead    OutboxState = "dead"
	OutboxUnknown OutboxState = "unknown"
)

// OutboxScheduled is how a pending record held until a later time (a
// scheduled send) is shown to an operator; it is never stored.
const OutboxScheduled OutboxState = "scheduled"

// Shown is the state to show an operator at now: scheduled for a pending
// record that is not due yet, else the stored state.
func (r OutboxRecord) Shown(now int64) OutboxState {
	if r.State == OutboxPending && r.RetryAt > now {
		return OutboxScheduled
	}
	return r.State
}

// OutboxStates lists every outbox state an operator sees (scheduled is shown,
// not stored).
var OutboxStates = []OutboxState{OutboxScheduled, OutboxPending, OutboxSending, OutboxSent, OutboxFailed, OutboxDead, OutboxUnknown}

// ListShown lists o's records as an operator sees them at now: a pending
// record not due yet shows as scheduled, and the filter state "scheduled"
// selects those.
func ListShown(ctx context.Context, o OutboxJournal, f ListFilter, now int64) ([]OutboxRecord, error) {
	want, limit := f.State, f.Limit
	if want == string(OutboxScheduled) || want == string(OutboxPending) {
		// Pending records show as pending or scheduled: filter them all
		// here, then apply the limit.
		f.State, f.Limit = string(OutboxPending), 0
	}
	recs, err := o.List(ctx, f)
	out := recs[:0]
	for _, r := range recs {
		r.State = r.Shown(now)
		if want == "" || string(r.State) == want {
			out = append(out, r)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// Terminal reports whether the record will never be sent again without an
// operator's retry.
func (s OutboxState) Terminal() bool {
	return s == OutboxSent || s == OutboxDead || s == OutboxUnknown
}

// InboxRecord is one journaled inbound message.
type InboxRecord struct {
	// ID is the record id, "<provider id>:<channel message id>".
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Chat     string `json:"chat"`
	// Payload is the journaled event, opaque to the journal.
	Payload []byte     `json:"payload"`
	State   InboxState `json:"state"`
	// Attempts counts claims: each claim charges one run.
	Attempts int `json:"attempts"`
	// Token is the fencing token of the current (or last) claim.
	Token int64 `json:"token"`
	// Owner is the instance id holding (or last holding) the lease.
	Owner      string `json:"owner,omitempty"`
	LeasedAt   int64  `json:"leased_at,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	// RetryAt is when a failed record is due again.
	RetryAt int64 `json:"retry_at,omitempty"`
	// Duplicates counts deliveries of the same message id after the first.
	Duplicates int    `json:"duplicates"`
	Error      string `json:"error,omitempty"`
	// Module is the digest of the module that last ran the record.
	Module string `json:"module,omitempty"`
	// Inputs are the recorded inputs of the record's last completed or
	// failed attempt (Completion.Inputs): JSON, stored and answered as
	// such (not base64), otherwise opaque to the journal; empty for
	// a record that never finished an attempt, or finished it before inputs
	// were recorded.
	Inputs      json.RawMessage `json:"inputs,omitempty"`
	CreatedAt   int64           `json:"created_at"`
	UpdatedAt   int64           `json:"updated_at"`
	CompletedAt int64           `json:"completed_at,omitempty"`
}

// OutboxRecord is one journaled send.
type OutboxRecord struct {
	// Key is the idempotency key.
	Key      string `json:"key"`
	Provider string `json:"provider"`
	Chat     string `json:"chat"`
	// Payload is the content to send, opaque to the journal.
	Payload []byte `json:"payload"`
	// Fingerprint identifies chat + content before hooks, to detect divergence.
	Fingerprint string      `json:"fingerprint,omitempty"`
	State       OutboxState `json:"state"`
	// Attempts counts provider calls (a refunded claim gives one back).
	Attempts   int    `json:"attempts"`
	Token      int64  `json:"token"`
	Owner      string `json:"owner,omitempty"`
	LeasedAt   int64  `json:"leased_at,omitempty"`
	LeaseUntil int64  `json:"lease_until,omitempty"`
	RetryAt    int64  `json:"retry_at,omitempty"`
	// Ref is the channel's message id once sent.
	Ref   string `json:"ref,omitempty"`
	Error string `json:"error,omitempty"`
	// PreviousPart is the key of the part that must be sent before this one.
	PreviousPart string `json:"previous_part,omitempty"`
	// Inbound is the id of the inbound record whose handler made the send.
	Inbound     string `json:"inbound,omitempty"`
	CreatedAt   int64  `json:"created_at"`
	UpdatedAt   int64  `json:"updated_at"`
	CompletedAt int64  `json:"completed_at,omitempty"`
}

// WithoutInputs clears the recorded inputs of recs, for list answers: they
// can be large and hold state values (a single record's read keeps them).
func WithoutInputs(recs []InboxRecord) []InboxRecord {
	for i := range recs {
		recs[i].Inputs = nil
	}
	return recs
}
