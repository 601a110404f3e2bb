package durability

import "errors"

// Errors every journal returns, tested with errors.Is.
var (
	// ErrNotFound: no record with that id or key in this scope.
	ErrNotFound = errors.New("durability: record not found")
	// ErrStaleLease: the fencing token is not the record's current one, or the
	// record left the leased state; a newer owner holds it. The caller must not
	// act on the record; the host counts these as stale_leases.
	ErrStaleLease = errors.New("durability: stale lease (another owner claimed the record)")
	// ErrNotClaimable: the record is in a state that cannot be claimed now
	// (done, dead, or leased by a live owner).
	ErrNotClaimable = errors.New("durability: record not claimable in its state")
	// ErrInvalidState: an operator action on a record in a state it does not
	// apply to (retry of a sent record, replay of a record in flight).
	ErrInvalidState = errors.New("durability: operation not valid in the record's state")
	// ErrConflict: a Kv compare-and-set found another version.
	ErrConflict = errors.New("durability: version conflict")
	// ErrReadOnly: a store opened read-only refused a write.
	ErrReadOnly = errors.New("durability: the store is open read-only")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("durability: backend closed")
	// ErrNoCoordination: the backend cannot coordinate replicas
	// (Coordinator.OpenCoordinated).
	ErrNoCoordination = errors.New("the backend cannot coordinate replicas")
)
