package durability

import (
	"context"
	"database/sql"
)

// AnyVersion in a Write skips the version check.
const AnyVersion int64 = -1

// Index names one of the two ordered indexes a Kv keeps.
type Index int

// The two ordered indexes.
const (
	// IndexDue orders keys by when their record becomes claimable.
	IndexDue Index = iota
	// IndexOrder orders keys by creation (listing and purge).
	IndexOrder
)

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
	// Delete removes the key (and its index entries).
	Delete bool
	// Group is the key's group for Range ("<scope>/in/"); the key starts
	// with it.
	Group string
	// Due and Order are the key's scores in the two indexes; nil leaves the
	// key out of that index.
	Due, Order *int64
}

// IndexEntry is one key in an ordered index.
type IndexEntry struct {
	Key   string
	Score int64
}

// Kv is the small interface a custom backend implements: versioned values with
// multi-key compare-and-set, and two ordered indexes (due and order) over the
// keys of a group. KvDurability turns any Kv into both journals.
type Kv interface {
	// Get returns the value and version of key; version 0 and a nil value mean
	// absent.
	Get(ctx context.Context, key string) (value []byte, version int64, err error)
	// Commit applies every write atomically if every write's expected version
	// matches, and returns ErrConflict (applying nothing) otherwise. It
	// returns once the commit is durable.
	Commit(ctx context.Context, writes []Write) error
	// Range returns up to limit keys of group in index ix that come after the
	// cursor after in (score, key) order and have score <= max, ascending.
	// Start with IndexEntry{Score: math.MinInt64}.
	Range(ctx context.Context, group string, ix Index, after IndexEntry, max int64, limit int) ([]IndexEntry, error)
	// Close releases the store.
	Close() error
}

// ClaimedValue is a record a NativeClaimer claimed: its key, new value and
// version, and whether it was a send in flight under an expired lease.
type ClaimedValue struct {
	Key       string
	Value     []byte
	Version   int64
	Ambiguous bool
}

// NativeClaimer is implemented by a Kv that claims due records in one native
// statement (PostgreSQL: UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)), so
// concurrent claimers skip each other's rows instead of colliding on versions.
// It applies exactly KvDurability's claim transitions to the JSON records of
// group; KvDurability uses it for ClaimDue when the Kv offers it.
type NativeClaimer interface {
	ClaimInbox(ctx context.Context, group string, opts ClaimOptions) ([]ClaimedValue, error)
	ClaimOutbox(ctx context.Context, group string, opts ClaimOptions) ([]ClaimedValue, error)
}

// SQLDatabase is implemented by a Kv kept in a SQL database in which other
// code may keep tables of its own (whatsapp-web keeps its device keys
// there). OpenSQL opens a database/sql handle on that database, which the
// caller closes; dialect is "sqlite" (driver "sqlite", modernc.org/sqlite,
// with foreign keys on) or "postgres" (driver "pgx"). The handle must not be
// used to touch the Kv's own tables.
type SQLDatabase interface {
	OpenSQL() (db *sql.DB, dialect string, err error)
}
