package durability

import "context"

// Lease is a claim's owner and duration.
type Lease struct {
	// Owner is the claiming instance id.
	Owner string
	// Now is the claim time.
	Now int64
	// Until is when the lease expires unless extended.
	Until int64
}

// PutStatus says whether Put created the record.
type PutStatus string

// Put outcomes.
const (
	Created PutStatus = "created"
	Exists  PutStatus = "exists"
)

// ClaimOptions select what ClaimDue takes.
type ClaimOptions struct {
	// Lease is the lease given to every claimed record (Now is the due time).
	Lease Lease
	// Limit caps how many records are claimed (0 means 100).
	Limit int
	// PendingBefore: inbox pending records created before it are claimable.
	// The host's sweeper passes now: admission journals records already
	// claimed, so a pending one is an operator's replay, due at once.
	PendingBefore int64
	// Reclaim, when set, also claims leases its Owner took before Before
	// although they have not expired: a restarted instance's first sweep
	// recovers the dead incarnation's records at once.
	Reclaim *Reclaim
}

// Reclaim names an earlier incarnation's leases.
type Reclaim struct {
	Owner  string
	Before int64
}

// ListFilter selects records for List, oldest CreatedAt first.
type ListFilter struct {
	// State filters by state (empty: any).
	State string
	// Chat filters by chat (empty: any).
	Chat string
	// Limit caps the result (0: no cap).
	Limit int
	// Since keeps the records created at or after it (Unix ms; 0: all).
	// One List reads a bounded number of records, oldest first: a reader
	// of a whole journal pages with Since set to the last record's
	// CreatedAt.
	Since int64
}

// OutboxPut is a new outbound record.
type OutboxPut struct {
	Key          string
	Provider     string
	Chat         string
	Payload      []byte
	Fingerprint  string
	PreviousPart string
	Inbound      string
	// NotBefore holds a record put without a lease until this time (a
	// scheduled send): it is pending, due at NotBefore.
	NotBefore int64
}

// FailOptions settle a failed attempt.
type FailOptions struct {
	Now int64
	// RetryAt is when the record is due again (ignored with Dead).
	RetryAt int64
	// Dead sends the record to the dead-letter queue.
	Dead bool
	// Refund gives back the attempt the claim charged: the claim made no
	// provider call (a part waiting behind an earlier part).
	Refund bool
	// Inputs are the failing attempt's recorded inputs (inbox only; see
	// Completion.Inputs): the record keeps them; nil (no attempt ran, as
	// for a record dead past max_attempts) keeps the earlier attempt's.
	Inputs []byte
}

// ClaimedSend is a record ClaimDue leased.
type ClaimedSend struct {
	Record OutboxRecord
	// Ambiguous is true when the record was sending under an expired (or
	// reclaimed) lease: the provider may or may not have accepted it.
	Ambiguous bool
}

// OutboxJournal is the persistence contract of outbound sends, method by method
// the seed's OutboxJournal.
type OutboxJournal interface {
	// Put inserts rec if its key is absent; otherwise it returns the existing
	// record unchanged with Exists. With lease, a new record is created already
	// begun: sending, token 1, 1 attempt.
	Put(ctx context.Context, rec OutboxPut, now int64, lease *Lease) (PutStatus, OutboxRecord, error)
	// Begin moves a pending or failed record (due or not) to sending under a
	// fresh token, charging an attempt: the persisted "about to call the
	// provider" marker. ErrNotClaimable in any other state.
	Begin(ctx context.Context, key string, lease Lease) (OutboxRecord, error)
	// MarkSent moves sending → sent with the provider's ref.
	MarkSent(ctx context.Context, key string, token int64, ref string, now int64) error
	// Extend extends the lease of a sending record.
	Extend(ctx context.Context, key string, token int64, until int64) error
	// MarkFailed moves sending → failed (due at RetryAt) or dead.
	MarkFailed(ctx context.Context, key string, token int64, errMsg string, opts FailOptions) error
	// ClaimDue leases due pending and failed records and sending records whose
	// lease expired (Ambiguous), oldest CreatedAt first, under fresh tokens.
	ClaimDue(ctx context.Context, opts ClaimOptions) ([]ClaimedSend, error)
	// ResolveAmbiguous settles an ambiguous claim: to unknown (terminal) or to
	// pending (send again, due now).
	ResolveAmbiguous(ctx context.Context, key string, token int64, to OutboxState, now int64) error
	// Get returns the record, or ErrNotFound.
	Get(ctx context.Context, key string) (OutboxRecord, error)
	// List returns records by state and chat, oldest CreatedAt first.
	List(ctx context.Context, f ListFilter) ([]OutboxRecord, error)
	// Retry is the operator's retry: failed, dead or unknown → pending, due now,
	// with its attempts reset.
	Retry(ctx context.Context, key string, now int64) error
	// Discard deletes the record: a later send with the key goes out again.
	Discard(ctx context.Context, key string) error
	// Purge deletes sent records completed before before; it returns how
	// many. Dead and unknown records stay until an operator retries or
	// discards them: retention never empties the DLQ.
	Purge(ctx context.Context, before int64) (int, error)
	// PurgeDead is the operator's deletion of the outbound dead letters: it
	// deletes the dead and unknown records completed before before and
	// returns their keys. Retention never calls it.
	PurgeDead(ctx context.Context, before int64) ([]string, error)
}

// ExpiredClaimer is implemented by an OutboxJournal that can claim one send
// left in flight under an expired lease, as ClaimDue would (Ambiguous, no
// attempt charged): a replay that meets its own send so left settles it at
// once, before the chat's next turn, instead of leaving it to a sweep.
// ErrNotClaimable when the record is not sending under an expired lease.
type ExpiredClaimer interface {
	ClaimExpired(ctx context.Context, key string, lease Lease) (ClaimedSend, error)
}

// InboxPut is a new inbound record.
type InboxPut struct {
	ID       string
	Provider string
	Chat     string
	Payload  []byte
}

// StateWrite is one buffered conversation state write; Delete removes the key.
type StateWrite struct {
	Key    string
	Value  []byte
	Delete bool
}

// InboxJournal is the persistence contract of inbound messages.
type InboxJournal interface {
	// Put inserts rec if its id is absent (Created); otherwise it counts a
	// duplicate on the existing record and returns it with Exists. With lease,
	// a new record is created already claimed: processing, token 1, 1 attempt.
	Put(ctx context.Context, rec InboxPut, now int64, lease *Lease) (PutStatus, InboxRecord, error)
	// Claim leases a pending or failed record (due or not), or a processing one
	// whose lease expired, under a fresh token, charging an attempt.
	// ErrNotClaimable otherwise.
	Claim(ctx context.Context, id string, lease Lease) (InboxRecord, error)
	// Extend extends the lease of a processing record.
	Extend(ctx context.Context, id string, token int64, until int64) error
	// Complete moves processing → done and applies the completion's state
	// writes in the same atomic write; the record keeps its Module and
	// Inputs.
	Complete(ctx context.Context, id string, token int64, c Completion) error
	// Fail moves processing → failed (due at RetryAt) or dead.
	Fail(ctx context.Context, id string, token int64, errMsg string, opts FailOptions) error
	// ClaimDue leases pending records created before PendingBefore, failed
	// records due by now and processing records whose lease expired (or that
	// Reclaim names), oldest CreatedAt first.
	ClaimDue(ctx context.Context, opts ClaimOptions) ([]InboxRecord, error)
	// Get returns the record, or ErrNotFound.
	Get(ctx context.Context, id string) (InboxRecord, error)
	// List returns records by state and chat, oldest CreatedAt first.
	List(ctx context.Context, f ListFilter) ([]InboxRecord, error)
	// Replay is the operator's replay: a done, failed or dead record → pending,
	// with its attempts reset, so the next sweep processes it again.
	Replay(ctx context.Context, id string, now int64) error
	// Purge deletes done records completed before before. Dead records stay
	// until an operator replays or discards them: retention never empties
	// the DLQ.
	Purge(ctx context.Context, before int64) (int, error)
	// Discard is the operator's deletion of one dead record (ErrInvalidState
	// in any other state): the channel's redelivery of that message id is
	// processed as a new message.
	Discard(ctx context.Context, id string) error
	// PurgeDead is the operator's deletion of the inbound dead letters: it
	// deletes the dead records completed before before and returns their
	// ids. Retention never calls it.
	PurgeDead(ctx context.Context, before int64) ([]string, error)
}

// SentMark is a MarkSent deferred to land with an inbox completion.
type SentMark struct {
	Key   string
	Token int64
	Ref   string
	Now   int64
}

// CompleteSender is implemented by an InboxJournal that can land the last
// sends' MarkSent in the same atomic write as a completion (one commit instead
// of two per message). If any mark or the completion is stale, nothing lands
// and the error wraps ErrStaleLease: the caller settles them one by one.
type CompleteSender interface {
	CompleteWithSent(ctx context.Context, id string, token int64, c Completion, sent []SentMark) error
}

// Completion is what an inbound record's completion lands, in one write.
type Completion struct {
	// Effects are the turn's buffered state writes.
	Effects []StateWrite
	// Module is the digest of the module that ran the record.
	Module string
	// Inputs are the turn's recorded inputs (the answers the guest read
	// from the host): a JSON document (or empty), stored on the record as
	// JSON (InboxRecord.Inputs).
	Inputs []byte
	// Now is the completion time (Unix ms).
	Now int64
}

// Deliver is a delivery made of writes to the backend's own store (the
// webchat transcript): it returns the send's ref and the writes that deliver
// it. retry is true when the writes of an earlier call conflicted.
type Deliver func(ctx context.Context, retry bool) (ref string, writes []Write, err error)

// SentWriter is implemented by an OutboxJournal whose MarkSent can carry a
// channel's writes: the writes deliver the send and the record becomes sent
// in one commit, or neither happens, so no crash can leave that send
// ambiguous. deliver runs again after a conflict. The error wraps
// ErrStaleLease when the lease was lost (nothing lands).
type SentWriter interface {
	MarkSentWith(ctx context.Context, key string, token int64, now int64, deliver Deliver) (ref string, err error)
}

// StateStore reads conversation state. Writes land only through
// InboxJournal.Complete, atomically with the inbound record.
type StateStore interface {
	// Get returns the value of key; ok is false when absent.
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
}

// StateCreator is implemented by a StateStore that can create a key only if it
// is absent. The host keeps per-scope values that are not conversation state
// with it (the random secret, under a key no guest can name).
type StateCreator interface {
	// PutIfAbsent stores value under key unless key exists, and returns the
	// value key holds afterwards: value when this call created it (created is
	// true), the existing one otherwise. Concurrent callers, in this process
	// or others sharing the backend, all get the first writer's value.
	PutIfAbsent(ctx context.Context, key string, value []byte) (stored []byte, created bool, err error)
}

// Journals are one scope's view of a backend.
type Journals struct {
	Inbox  InboxJournal
	Outbox OutboxJournal
	State  StateStore
}

// Backend is a durability backend. Open returns the journals of one scope;
// records of different scopes never meet.
type Backend interface {
	Open(ctx context.Context, scope Scope) (Journals, error)
	Close() error
}
