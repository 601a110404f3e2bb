// Package sqlite is the default durability backend: one SQLite database file
// (modernc.org/sqlite, no cgo) in WAL mode holds the journals and the
// conversation state in the table durable, with its ordered indexes in
// durable_index. Writes from many goroutines are group-committed: one writer
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
	"sync"
	"time"

	"github.com/botrun/botrun/durability"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Options tune a Store. The zero value means the defaults.
type Options struct {
	// Synchronous is "full" (default: every commit is fsynced) or "normal"
	// (WAL commits survive a process crash, not a power loss).
	Synchronous string
	// BusyTimeout is how long a write waits for another process's lock
	// (default 5s).
	BusyTimeout time.Duration
	// MaxBatch caps the commits one transaction carries (default 512).
	MaxBatch int
}

// Store is a durability.Kv in a SQLite file.
type Store struct {
	path string
	db   *sql.DB
	w    *sql.Conn

	get, rng                           *sql.Stmt
	wInsert, wUpdate, wUpsert          *sql.Stmt
	wDelete, wDeleteVersion            *sql.Stmt
	wIdxUpsert, wIdxDelete, wSeq, wSet *sql.Stmt
	wBegin, wCommit, wRollback         *sql.Stmt
	wSave, wRollbackTo, wRelease       *sql.Stmt

	reqs   chan *commit
	stop   chan struct{}
	done   chan struct{}
	mu     sync.RWMutex
	closed bool
}

type commit struct {
	writes []durability.Write
	index  []durability.IndexOp
	err    chan error
}

// Open opens (creating it if needed) the database at path, migrating its
// schema, and returns the backend over it.
func Open(path string, opts *Options) (*Backend, error) {
	s, err := OpenStore(path, opts)
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	s := &Store{path: path, db: db, reqs: make(chan *commit, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.init(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	go s.writer(o.MaxBatch)
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	w, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite %s: %w (is the directory writable?)", s.path, err)
	}
	s.w = w
	if err := migrate(ctx, w, s.path); err != nil {
		return err
	}
	prep := func(c interface {
		PrepareContext(context.Context, string) (*sql.Stmt, error)
	}, dst **sql.Stmt, q string) {
		if err != nil {
			return
		}
		*dst, err = c.PrepareContext(ctx, q)
	}
	prep(s.db, &s.get, `SELECT value, version FROM durable WHERE key = ?`)
	prep(s.db, &s.rng, `SELECT member, score FROM durable_index
		WHERE name = ? AND (score > ? OR (score = ? AND member > ?)) AND score <= ?
		ORDER BY score, member LIMIT ?`)
	prep(w, &s.wInsert, `INSERT INTO durable (key, version, value) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`)
	prep(w, &s.wUpdate, `UPDATE durable SET version = ?, value = ? WHERE key = ? AND version = ?`)
	prep(w, &s.wDeleteVersion, `DELETE FROM durable WHERE key = ? AND version = ?`)
	prep(w, &s.wUpsert, `INSERT INTO durable (key, version, value) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET version = excluded.version, value = excluded.value`)
	prep(w, &s.wDelete, `DELETE FROM durable WHERE key = ?`)
	prep(w, &s.wIdxUpsert, `INSERT INTO durable_index (name, member, score) VALUES (?, ?, ?)
		ON CONFLICT (name, member) DO UPDATE SET score = excluded.score`)
	prep(w, &s.wIdxDelete, `DELETE FROM durable_index WHERE name = ? AND member = ?`)
	prep(w, &s.wBegin, `BEGIN IMMEDIATE`)
	prep(w, &s.wCommit, `COMMIT`)
	prep(w, &s.wRollback, `ROLLBACK`)
	prep(w, &s.wSave, `SAVEPOINT c`)
	prep(w, &s.wRollbackTo, `ROLLBACK TO c`)
	prep(w, &s.wRelease, `RELEASE c`)
	prep(w, &s.wSeq, `SELECT seq FROM durable_seq WHERE id = 1`)
	prep(w, &s.wSet, `UPDATE durable_seq SET seq = ? WHERE id = 1`)
	if err != nil {
		return fmt.Errorf("sqlite %s: prepare: %w", s.path, err)
	}
	return nil
}

// Get implements durability.Kv.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
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
func (s *Store) Range(ctx context.Context, index string, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, durability.ErrClosed
	}
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rng.QueryContext(ctx, index, after.Score, after.Score, after.Member, max, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: range: %w", s.path, err)
	}
	defer rows.Close()
	var out []durability.IndexEntry
	for rows.Next() {
		var e durability.IndexEntry
		if err := rows.Scan(&e.Member, &e.Score); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// Commit implements durability.Kv. It returns once the commit is durable (or
// refused): concurrent commits share one transaction.
func (s *Store) Commit(ctx context.Context, writes []durability.Write, index []durability.IndexOp) error {
	c := &commit{writes: writes, index: index, err: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return durability.ErrClosed
	}
	s.reqs <- c
	s.mu.RUnlock()
	return <-c.err
}

// writer is the group committer: it takes the first pending commit, drains
// whatever else is queued (up to maxBatch), and runs them in one transaction.
func (s *Store) writer(maxBatch int) {
	defer close(s.done)
	batch := make([]*commit, 0, maxBatch)
	for {
		var first *commit
		select {
		case first = <-s.reqs:
		case <-s.stop:
			// Close: no new commits arrive; run the ones still queued.
			for {
				select {
				case c := <-s.reqs:
					s.run([]*commit{c})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-s.reqs:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		s.run(batch)
	}
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
		var seq int64
		if err := s.wSeq.QueryRowContext(ctx).Scan(&seq); err != nil {
			return err
		}
		for i, c := range batch {
			results[i], err = s.apply(ctx, c, &seq)
			if err != nil {
				return err
			}
		}
		if _, err := s.wSet.ExecContext(ctx, seq); err != nil {
			return err
		}
		_, err = s.wCommit.ExecContext(ctx)
		return err
	}()
	for i, c := range batch {
		if err != nil {
			c.err <- fmt.Errorf("sqlite %s: commit: %w", s.path, err)
		} else {
			c.err <- results[i]
		}
	}
}

// next returns the version to store: the caller's, or one past the highest
// handed out; seq keeps the highest.
func next(seq *int64, want int64) int64 {
	if want <= 0 {
		want = *seq + 1
	}
	*seq = max(*seq, want)
	return want
}

// apply runs one commit inside the batch's transaction. Each versioned write
// is a conditional statement whose row count says whether the version matched;
// a commit with more than one write runs under a savepoint, so a conflict on a
// later write undoes the earlier ones. It returns ErrConflict as the commit's
// result, or an error that fails the whole batch.
func (s *Store) apply(ctx context.Context, c *commit, seq *int64) (error, error) {
	nested := len(c.writes) > 1
	if nested {
		if _, err := s.wSave.ExecContext(ctx); err != nil {
			return nil, err
		}
	}
	startSeq := *seq
	conflict := false
	for _, w := range c.writes {
		var res sql.Result
		var err error
		switch {
		case w.Delete && w.Version == durability.AnyVersion:
			_, err = s.wDelete.ExecContext(ctx, w.Key)
		case w.Delete:
			res, err = s.wDeleteVersion.ExecContext(ctx, w.Key, w.Version)
		case w.Version == durability.AnyVersion:
			_, err = s.wUpsert.ExecContext(ctx, w.Key, next(seq, w.Next), w.Value)
		case w.Version == 0:
			res, err = s.wInsert.ExecContext(ctx, w.Key, next(seq, w.Next), w.Value)
		default:
			res, err = s.wUpdate.ExecContext(ctx, next(seq, w.Next), w.Value, w.Key, w.Version)
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
	if !conflict {
		for _, op := range c.index {
			var err error
			if op.Remove {
				_, err = s.wIdxDelete.ExecContext(ctx, op.Index, op.Member)
			} else {
				_, err = s.wIdxUpsert.ExecContext(ctx, op.Index, op.Member, op.Score)
			}
			if err != nil {
				return nil, err
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
		*seq = startSeq
		return durability.ErrConflict, nil
	}
	return nil, nil
}

// Close stops the writer after the commits already queued and closes the
// database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// Every Commit that got past the closed check has queued its request; the
	// writer runs them before it stops.
	close(s.stop)
	<-s.done
	s.w.Close()
	return s.db.Close()
}

// Path is the database file.
func (s *Store) Path() string { return s.path }
