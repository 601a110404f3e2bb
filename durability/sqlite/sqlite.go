// Package sqlite is the default durability backend: one SQLite database file
// (modernc.org/sqlite, no cgo) in WAL mode holds the journals and the
// conversation state in the table durable, whose due and ord columns are the
// two ordered indexes (SQL indexes on the group and the score). Writes from many goroutines are group-committed: one writer
// connection drains the queue of pending commits into one immediate
// transaction and one fsync, and wakes each caller only after the transaction
// is durable. Several processes on one host may share the file (busy_timeout
// and immediate transactions); NFS is not supported.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/groupcommit"
	"github.com/botrun/botrun/internal/journalfile"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Options tune a Store. The zero value means the defaults.
type Options struct {
	// Path is the database file (Open only; OpenStore takes it apart).
	Path string
	// Synchronous is "full" (default: every commit is fsynced) or "normal"
	// (WAL commits survive a process crash, not a power loss).
	Synchronous string
	// BusyTimeout is how long a write waits for another process's lock
	// (default 5s).
	BusyTimeout time.Duration
	// MaxBatch caps the commits one transaction carries (default 512).
	MaxBatch int
	// ReadOnly opens an existing database for reading only, beside a live
	// bot in another process: no lock is taken, nothing is written (no
	// migration, no checkpoint), and Commit fails.
	ReadOnly bool
}

// errReadOnly refuses a commit to a store opened ReadOnly.
var errReadOnly = fmt.Errorf("sqlite: %w", durability.ErrReadOnly)

// Store is a durability.Kv in a SQLite file.
type Store struct {
	path string
	db   *sql.DB
	w    *sql.Conn

	get                          *sql.Stmt
	rng                          [2]*sql.Stmt
	wInsert, wUpdate, wUpsert    *sql.Stmt
	wDelete, wDeleteVersion      *sql.Stmt
	wBegin, wCommit, wRollback   *sql.Stmt
	wSave, wRollbackTo, wRelease *sql.Stmt

	gc     *groupcommit.Committer[*commit]
	closed atomic.Bool
	// readOnly is Options.ReadOnly: no writer connection, no committer.
	readOnly bool
	// commits counts the batches committed since the last checkpoint;
	// stopCheckpoints ends the checkpointer, which closes checkpointed.
	commits         atomic.Int64
	stopCheckpoints chan struct{}
	checkpointed    chan struct{}
}

// checkpointEvery is how often the checkpointer copies the WAL into the
// database (a second: a hot page rewritten many times is copied once, and
// the copies' I/O comes in fewer bursts than at 250 ms). The writer never checkpoints on its own (wal_autocheckpoint is
// off on its connection): a checkpoint in a commit's path stalls every
// caller of that batch behind the database file's fsync.
const checkpointEvery = time.Second

// walTruncateFrames is the WAL's length (in pages, 4 KiB each by default)
// past which, walTruncateTicks checkpoints in a row, the checkpointer
// empties it (a TRUNCATE checkpoint: it holds writers while it waits for
// readers, at most truncateBusy, and while it copies).
const (
	walTruncateFrames = 1000
	walTruncateTicks  = 3
	truncateBusy      = 100 * time.Millisecond
)

// truncateWAL runs a TRUNCATE checkpoint on a connection of its own whose
// busy timeout is truncateBusy: writers wait on it that long at most.
func (s *Store) truncateWAL() error {
	ctx := context.Background()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var was int64
	if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&was); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", truncateBusy.Milliseconds())); err != nil {
		return err
	}
	defer c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", was))
	var busy, frames, copied int
	if err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &copied); err != nil {
		return err
	}
	if busy != 0 {
		return errors.New("the WAL is still in use")
	}
	return nil
}

type commit struct {
	writes []durability.Write
	err    chan error
}

// Open opens (creating it if needed) the database at opts.Path, migrating its
// schema, and returns the backend over it.
func Open(_ context.Context, opts Options) (*Backend, error) {
	s, err := OpenStore(opts.Path, &opts)
	if err != nil {
		return nil, err
	}
	return &Backend{KvDurability: durability.NewKvDurability(s), Store: s}, nil
}

// Backend is the journals (durability.Backend) over a Store.
type Backend struct {
	*durability.KvDurability
	*Store
}

// Close closes the store.
func (b *Backend) Close() error { return b.Store.Close() }

// OpenStore opens the Kv alone.
func OpenStore(path string, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Synchronous == "" {
		o.Synchronous = "full"
	}
	sync := strings.ToUpper(o.Synchronous)
	if sync != "FULL" && sync != "NORMAL" {
		return nil, fmt.Errorf("sqlite: synchronous %q: want full or normal", o.Synchronous)
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: database path %q may not contain '?' or '#'", path)
	}
	if o.ReadOnly {
		return openReadOnly(path, o)
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+sync+")")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := &Store{path: path, db: db}
	if err := s.init(context.Background(), o.BusyTimeout); err != nil {
		db.Close()
		return nil, err
	}
	s.gc = groupcommit.New(o.MaxBatch, s.run)
	s.stopCheckpoints, s.checkpointed = make(chan struct{}), make(chan struct{})
	go s.checkpoints()
	return s, nil
}

// openReadOnly opens an existing database with mode=ro: its readers take no
// write lock and it runs no migration (a schema other than this build's is
// refused) and no checkpointer.
func openReadOnly(path string, o Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlite %s: %w (is durability.path the bot's database?)", path, err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	q.Set("mode", "ro")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	s := &Store{path: path, db: db, readOnly: true}
	var v int
	if err := db.QueryRow(`SELECT version FROM botrun_schema`).Scan(&v); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: reading the schema version: %w (has a bot ever run on it?)", path, err)
	}
	if v != SchemaVersion {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: schema version %d, this botrun reads %d: use the bot's own botrun version", path, v, SchemaVersion)
	}
	if err := s.prepareReads(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// createPrivate creates the database file, and the directories it needs,
// readable by the owner only (0600, directories 0700), before SQLite opens
// it: SQLite creates the -wal and -shm files with the database file's mode,
// so they come out 0600 too, whatever the umask. An existing file must be
// private already: a symbolic link, a file of another user, or one open to
// its group or others is refused (journalfile.OpenPrivate), so that a planted
// link never points the bot's writes at another file.
func createPrivate(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := journalfile.OpenPrivate(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return err
	}
	f.Close()
	// SQLite opens its -wal and -shm files itself, following links: an
	// existing one must be private too.
	for _, side := range []string{path + "-wal", path + "-shm"} {
		f, err := journalfile.OpenPrivate(side, os.O_RDONLY)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// walMode puts the file in WAL mode. WAL is a property of the file, set once
// rather than by every pooled connection as it opens: switching takes a lock
// that another process's checkpoint may hold, and that answers SQLITE_BUSY at
// once instead of waiting busy_timeout, so it is retried until then.
func walMode(ctx context.Context, c interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, busyTimeout time.Duration) error {
	for deadline := time.Now().Add(busyTimeout); ; time.Sleep(10 * time.Millisecond) {
		_, err := c.ExecContext(ctx, "PRAGMA journal_mode = WAL")
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return fmt.Errorf("journal_mode WAL: %w", err)
		}
	}
}

// OpenDB opens a database/sql handle (driver "sqlite") on the SQLite file at
// path, creating it 0600 if needed, in WAL mode, with foreign keys on, a 5 s
// busy timeout and immediate transactions: for tables that other code keeps
// beside the journals, or in a file of its own.
func OpenDB(path string) (*sql.DB, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: database path %q may not contain '?' or '#'", path)
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	const busy = 5 * time.Second
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if err := walMode(context.Background(), db, busy); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// OpenSQL implements durability.SQLDatabase: a handle of its own on the
// store's file (OpenDB).
func (s *Store) OpenSQL() (*sql.DB, string, error) {
	db, err := OpenDB(s.path)
	return db, "sqlite", err
}

func (s *Store) init(ctx context.Context, busyTimeout time.Duration) error {
	w, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite %s: %w (is the directory writable?)", s.path, err)
	}
	s.w = w
	if err := walMode(ctx, w, busyTimeout); err != nil {
		return fmt.Errorf("sqlite %s: %w", s.path, err)
	}
	if err := migrate(ctx, w, s.path); err != nil {
		return err
	}
	// journal_size_limit: a WAL that grew under a burst is cut back once
	// a checkpoint has copied it all.
	for _, pragma := range []string{"PRAGMA wal_autocheckpoint = 0", "PRAGMA journal_size_limit = 8388608"} {
		if _, err := w.ExecContext(ctx, pragma); err != nil {
			return fmt.Errorf("sqlite %s: %s: %w", s.path, pragma, err)
		}
	}
	prep := func(c interface {
		PrepareContext(context.Context, string) (*sql.Stmt, error)
	}, dst **sql.Stmt, q string) {
		if err != nil {
			return
		}
		*dst, err = c.PrepareContext(ctx, q)
	}
	if err := s.prepareReads(ctx); err != nil {
		return err
	}
	prep(w, &s.wInsert, `INSERT INTO durable (key, version, value, grp, due, ord) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`)
	prep(w, &s.wUpdate, `UPDATE durable SET version = ?, value = ?, grp = ?, due = ?, ord = ? WHERE key = ? AND version = ?`)
	prep(w, &s.wUpsert, `INSERT INTO durable (key, version, value, grp, due, ord) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET version = excluded.version, value = excluded.value,
			grp = excluded.grp, due = excluded.due, ord = excluded.ord`)
	prep(w, &s.wDelete, `DELETE FROM durable WHERE key = ?`)
	prep(w, &s.wDeleteVersion, `DELETE FROM durable WHERE key = ? AND version = ?`)
	prep(w, &s.wBegin, `BEGIN IMMEDIATE`)
	prep(w, &s.wCommit, `COMMIT`)
	prep(w, &s.wRollback, `ROLLBACK`)
	prep(w, &s.wSave, `SAVEPOINT c`)
	prep(w, &s.wRollbackTo, `ROLLBACK TO c`)
	prep(w, &s.wRelease, `RELEASE c`)
	if err != nil {
		return fmt.Errorf("sqlite %s: prepare: %w", s.path, err)
	}
	return nil
}

// prepareReads prepares the statements of Get and Range.
func (s *Store) prepareReads(ctx context.Context) error {
	var err error
	prep := func(dst **sql.Stmt, q string) {
		if err == nil {
			*dst, err = s.db.PrepareContext(ctx, q)
		}
	}
	prep(&s.get, `SELECT value, version FROM durable WHERE key = ?`)
	for ix, col := range []string{"due", "ord"} {
		prep(&s.rng[ix], `SELECT key, `+col+` FROM durable
			WHERE grp = ? AND `+col+` IS NOT NULL AND (`+col+` > ? OR (`+col+` = ? AND key > ?)) AND `+col+` <= ?
			ORDER BY `+col+`, key LIMIT ?`)
	}
	if err != nil {
		return fmt.Errorf("sqlite %s: prepare: %w", s.path, err)
	}
	return nil
}

// Get implements durability.Kv.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	if s.closed.Load() {
		return nil, 0, durability.ErrClosed
	}
	var v []byte
	var version int64
	err := s.get.QueryRowContext(ctx, key).Scan(&v, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite %s: get: %w", s.path, err)
	}
	return v, version, nil
}

// Range implements durability.Kv.
func (s *Store) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	if s.closed.Load() {
		return nil, durability.ErrClosed
	}
	if limit <= 0 {
		limit = -1
	}
	if ix != durability.IndexDue && ix != durability.IndexOrder {
		return nil, fmt.Errorf("sqlite %s: unknown index %d", s.path, ix)
	}
	rows, err := s.rng[ix].QueryContext(ctx, group, after.Score, after.Score, after.Key, max, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: range: %w", s.path, err)
	}
	defer rows.Close()
	var out []durability.IndexEntry
	for rows.Next() {
		var e durability.IndexEntry
		if err := rows.Scan(&e.Key, &e.Score); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Commit implements durability.Kv. It returns once the commit is durable (or
// refused): concurrent commits share one transaction.
func (s *Store) Commit(ctx context.Context, writes []durability.Write) error {
	if s.readOnly {
		return errReadOnly
	}
	c := &commit{writes: writes, err: make(chan error, 1)}
	if err := s.gc.Submit(c); err != nil {
		return durability.ErrClosed
	}
	return <-c.err
}

// run commits a batch. A commit whose expected versions do not match gets
// ErrConflict and writes nothing; the others land together.
func (s *Store) run(batch []*commit) {
	ctx := context.Background()
	results := make([]error, len(batch))
	err := func() (err error) {
		if _, err := s.wBegin.ExecContext(ctx); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				s.wRollback.ExecContext(ctx)
			}
		}()
		for i, c := range batch {
			results[i], err = s.apply(ctx, c)
			if err != nil {
				return err
			}
		}
		_, err = s.wCommit.ExecContext(ctx)
		return err
	}()
	if err == nil {
		s.commits.Add(1)
	}
	if err != nil && len(batch) > 1 {
		// One bad write must fail only its own caller: the batch was
		// rolled back, so run each commit alone.
		for _, c := range batch {
			s.run([]*commit{c})
		}
		return
	}
	for i, c := range batch {
		if err != nil {
			c.err <- fmt.Errorf("sqlite %s: commit: %w", s.path, err)
		} else {
			c.err <- results[i]
		}
	}
}

// next returns the version to store: the caller's, or a fresh one from the
// clock (versions only need to differ from the key's earlier ones).
func next(want int64) int64 {
	if want > 0 {
		return want
	}
	return time.Now().UnixNano()
}

// nullable turns an index score into a column value.
func nullable(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// apply runs one commit inside the batch's transaction. Each versioned write
// is a conditional statement whose row count says whether the version matched;
// a commit with more than one write runs under a savepoint, so a conflict on a
// later write undoes the earlier ones. It returns ErrConflict as the commit's
// result, or an error that fails the whole batch.
func (s *Store) apply(ctx context.Context, c *commit) (error, error) {
	nested := len(c.writes) > 1
	if nested {
		if _, err := s.wSave.ExecContext(ctx); err != nil {
			return nil, err
		}
	}
	conflict := false
	for _, w := range c.writes {
		var res sql.Result
		var err error
		due, ord := nullable(w.Due), nullable(w.Order)
		switch {
		case w.Delete && w.Version == durability.AnyVersion:
			_, err = s.wDelete.ExecContext(ctx, w.Key)
		case w.Delete:
			res, err = s.wDeleteVersion.ExecContext(ctx, w.Key, w.Version)
		case w.Version == durability.AnyVersion:
			_, err = s.wUpsert.ExecContext(ctx, w.Key, next(w.Next), w.Value, w.Group, due, ord)
		case w.Version == 0:
			res, err = s.wInsert.ExecContext(ctx, w.Key, next(w.Next), w.Value, w.Group, due, ord)
		default:
			res, err = s.wUpdate.ExecContext(ctx, next(w.Next), w.Value, w.Group, due, ord, w.Key, w.Version)
		}
		if err != nil {
			return nil, err
		}
		if res != nil {
			if n, err := res.RowsAffected(); err != nil {
				return nil, err
			} else if n != 1 {
				conflict = true
				break
			}
		}
	}
	if nested {
		if conflict {
			if _, err := s.wRollbackTo.ExecContext(ctx); err != nil {
				return nil, err
			}
		}
		if _, err := s.wRelease.ExecContext(ctx); err != nil {
			return nil, err
		}
	}
	if conflict {
		return durability.ErrConflict, nil
	}
	return nil, nil
}

// checkpoints copies the WAL into the database every checkpointEvery while
// commits land, beside the writer (PASSIVE: it waits for no reader or
// writer); the WAL restarts from its start once it is all copied.
func (s *Store) checkpoints() {
	defer close(s.checkpointed)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	over := 0 // ticks in a row that left the WAL over walTruncateFrames
	for {
		select {
		case <-s.stopCheckpoints:
			return
		case <-t.C:
		}
		if s.commits.Swap(0) == 0 {
			continue
		}
		var busy, frames, copied int
		err := s.db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
		if err == nil && frames > walTruncateFrames {
			over++
		} else {
			over = 0
		}
		if over >= walTruncateTicks {
			// Readers that never all let go keep the WAL from restarting,
			// so it grows with every commit (until it fills the disk,
			// and then a checkpoint has no room to copy it): wait for
			// them, briefly, copy the rest and empty the file.
			over = 0
			err = s.truncateWAL()
		}
		if err != nil && !s.closed.Load() {
			// The next tick tries again; the WAL only grows meanwhile.
			s.commits.Add(1)
		}
	}
}

// Close stops the writer after the commits already queued and closes the
// database.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.readOnly {
		return s.db.Close()
	}
	close(s.stopCheckpoints)
	<-s.checkpointed
	s.gc.Close()
	s.w.Close()
	return s.db.Close()
}

// Path is the database file.
func (s *Store) Path() string { return s.path }
