package durability

import "context"

// AnyVersion in a Write skips the version check.
const AnyVersion int64 = -1

// Write is one key write in a Kv commit.
type Write struct {
	Key string
	// Version is the version the key must have now: 0 for absent, AnyVersion
	// for no check.
	Version int64
	// Next is the version to store; 0 lets the store pick one greater than
	// every version it handed out.
	Next  int64
	Value []byte
	// Delete removes the key (Value is ignored).
	Delete bool
}

// IndexOp sets or removes a member's score in an ordered index.
type IndexOp struct {
	Index  string
	Member string
	Score  int64
	Remove bool
}

// IndexEntry is one member of an ordered index.
type IndexEntry struct {
	Member string
	Score  int64
}

// Kv is the small interface a custom backend implements: versioned values with
// multi-key compare-and-set, and ordered indexes (named sorted sets; the
// journals use two per journal, "due" and "created"). KvDurability turns any Kv
// into both journals.
type Kv interface {
	// Get returns the value and version of key; version 0 and a nil value mean
	// absent. Versions increase with every write of a key.
	Get(ctx context.Context, key string) (value []byte, version int64, err error)
	// Commit applies every write and index op atomically if every write's
	// expected version matches, and returns ErrConflict (applying nothing)
	// otherwise.
	Commit(ctx context.Context, writes []Write, index []IndexOp) error
	// Range returns up to limit members of index that come after the cursor
	// after in (score, member) order and have score <= max, ascending. Start
	// with IndexEntry{Score: math.MinInt64}.
	Range(ctx context.Context, index string, after IndexEntry, max int64, limit int) ([]IndexEntry, error)
	// Close releases the store.
	Close() error
}
