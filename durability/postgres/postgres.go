// Package postgres is the durability backend for several replicas on one
// PostgreSQL (pgx v5): the journals and the conversation state live in the
// table {table_prefix}durable, created idempotently at start, whose due and
// ord columns are the two ordered indexes. Concurrent commits of one process
// are group-committed: a writer sends a batch of commits as one pipelined
// transaction, each commit a call of {table_prefix}botrun_commit, a function
// that checks every expected version and applies the writes atomically (a
// conflict undoes only that commit). Replicas coordinate through the versions:
// two replicas never both claim a record.
package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/groupcommit"
	"github.com/botrun/botrun/internal/netdial"
)

// Options configure a Store: URL (the store opens and closes its own pool) or
// Pool (injected; the caller closes it).
type Options struct {
	URL  string
	Pool *pgxpool.Pool
	// TablePrefix prefixes the table and function names (letters, digits,
	// '_').
	TablePrefix string
	// Logger receives connection-loss reports (default slog.Default()).
	Logger *slog.Logger
	// MaxBatch caps the commits one transaction carries (default 256).
	MaxBatch int
	// ReadOnly opens an existing schema without creating or changing it
	// (no DDL): for readers beside a live bot, such as a dry run. A schema
	// that is missing or of another version is an error.
	ReadOnly bool
	// OpTimeout bounds each attempt of an operation (default 5s): a
	// partition that drops packets fails it then.
	OpTimeout time.Duration
}

// Store is a durability.Kv in PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	table   string
	fn      string
	log     *slog.Logger
	// opTimeout bounds one attempt of an operation.
	opTimeout time.Duration

	gc     *groupcommit.Committer[*commit]
	closed atomic.Bool
}

type commit struct {
	arg []byte
	err chan error
}

// Backend is the journals over a Store.
type Backend struct {
	*durability.KvDurability
	*Store
}

// Close closes the store.
func (b *Backend) Close() error { return b.Store.Close() }

// Open connects and creates the schema if needed.
func Open(ctx context.Context, o Options) (*Backend, error) {
	s, err := OpenStore(ctx, o)
	if err != nil {
		return nil, err
	}
	return &Backend{KvDurability: durability.NewKvDurability(s), Store: s}, nil
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

// OpenStore opens the Kv alone.
func OpenStore(ctx context.Context, o Options) (*Store, error) {
	if !prefixRE.MatchString(o.TablePrefix) {
		return nil, fmt.Errorf("postgres: table prefix %q: use letters, digits and '_'", o.TablePrefix)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	s := &Store{pool: o.Pool, table: o.TablePrefix + "durable", fn: o.TablePrefix + "botrun_commit_v1", log: o.Logger, opTimeout: o.OpTimeout}
	if s.pool == nil {
		if o.URL == "" {
			return nil, errors.New("postgres: set durability.url (or inject a pool)")
		}
		cfg, err := pgxpool.ParseConfig(o.URL)
		if err != nil {
			return nil, fmt.Errorf("postgres: url: %w", err)
		}
		cfg.MaxConns = max(cfg.MaxConns, 8)
		// A connection the server cut while idle is found at the next
		// health check or query, logged, and replaced.
		cfg.HealthCheckPeriod = 5 * time.Second
		// A bounded connect and a keepalive that finds a silent peer
		// (netdial).
		if cfg.ConnConfig.ConnectTimeout == 0 {
			cfg.ConnConfig.ConnectTimeout = netdial.ConnectTimeout
		}
		cfg.ConnConfig.DialFunc = netdial.Dialer(cfg.ConnConfig.ConnectTimeout).DialContext
		if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		s.ownPool = true
	}
	setup := s.migrate
	if o.ReadOnly {
		setup = s.checkSchema
	}
	if err := setup(ctx); err != nil {
		if s.ownPool {
			s.pool.Close()
		}
		return nil, err
	}
	s.gc = groupcommit.New(o.MaxBatch, s.run)
	return s, nil
}

// OpenSQL implements durability.SQLDatabase: a database/sql handle over the
// store's own pool (closing it leaves the pool open).
func (s *Store) OpenSQL() (*sql.DB, string, error) {
	return stdlib.OpenDBFromPool(s.pool), "postgres", nil
}

// OpenDB opens a database/sql handle (driver "pgx") on the PostgreSQL
// database at url: for tables that other code keeps in a database of its
// own.
func OpenDB(url string) (*sql.DB, error) {
	if _, err := pgx.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("postgres: url: %w", err)
	}
	return sql.Open("pgx", url)
}

// schemaInPlace reports whether this version's schema exists: it is
// versioned by the commit function's name.
func (s *Store) schemaInPlace(ctx context.Context) (bool, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regproc($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, s.fn, s.table).Scan(&exists); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	return exists, nil
}

// checkSchema is a read-only opening's migrate: it refuses a schema that is
// not this version's rather than change it.
func (s *Store) checkSchema(ctx context.Context) error {
	exists, err := s.schemaInPlace(ctx)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("postgres: table %s with function %s is missing (no bot of this botrun version has run on this database, or its schema is older): opened read-only, nothing is created; run the bot with this botrun once, or check durability.url and table_prefix", s.table, s.fn)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	exists, err := s.schemaInPlace(ctx)
	if err != nil {
		return err
	}
	if exists {
		return nil
	}
	t, fn := pgx.Identifier{s.table}.Sanitize(), pgx.Identifier{s.fn}.Sanitize()
	ddl := `
	CREATE TABLE IF NOT EXISTS ` + t + ` (
		key     text PRIMARY KEY,
		version bigint NOT NULL,
		value   bytea NOT NULL,
		grp     text NOT NULL DEFAULT '',
		due     bigint,
		ord     bigint
	);
	CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{s.table + "_due"}.Sanitize() + ` ON ` + t + ` (grp, due, key) WHERE due IS NOT NULL;
	CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{s.table + "_ord"}.Sanitize() + ` ON ` + t + ` (grp, ord, key) WHERE ord IS NOT NULL;
	CREATE OR REPLACE FUNCTION ` + fn + `(writes jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
	DECLARE
		w jsonb;
		n int;
	BEGIN
		FOR w IN SELECT * FROM jsonb_array_elements(writes) LOOP
			IF (w->>'del')::boolean THEN
				IF (w->>'ver')::bigint = -1 THEN
					DELETE FROM ` + t + ` WHERE key = w->>'key';
				ELSE
					DELETE FROM ` + t + ` WHERE key = w->>'key' AND version = (w->>'ver')::bigint;
					GET DIAGNOSTICS n = ROW_COUNT;
					IF n <> 1 THEN RAISE EXCEPTION USING ERRCODE = 'BR001'; END IF;
				END IF;
			ELSIF (w->>'ver')::bigint = -1 THEN
				INSERT INTO ` + t + ` (key, version, value, grp, due, ord)
				VALUES (w->>'key', (w->>'next')::bigint, decode(w->>'val', 'base64'), w->>'grp', (w->>'due')::bigint, (w->>'ord')::bigint)
				ON CONFLICT (key) DO UPDATE SET version = excluded.version, value = excluded.value,
					grp = excluded.grp, due = excluded.due, ord = excluded.ord;
			ELSIF (w->>'ver')::bigint = 0 THEN
				INSERT INTO ` + t + ` (key, version, value, grp, due, ord)
				VALUES (w->>'key', (w->>'next')::bigint, decode(w->>'val', 'base64'), w->>'grp', (w->>'due')::bigint, (w->>'ord')::bigint)
				ON CONFLICT (key) DO NOTHING;
				GET DIAGNOSTICS n = ROW_COUNT;
				IF n <> 1 THEN RAISE EXCEPTION USING ERRCODE = 'BR001'; END IF;
			ELSE
				UPDATE ` + t + ` SET version = (w->>'next')::bigint, value = decode(w->>'val', 'base64'),
					grp = w->>'grp', due = (w->>'due')::bigint, ord = (w->>'ord')::bigint
				WHERE key = w->>'key' AND version = (w->>'ver')::bigint;
				GET DIAGNOSTICS n = ROW_COUNT;
				IF n <> 1 THEN RAISE EXCEPTION USING ERRCODE = 'BR001'; END IF;
			END IF;
		END LOOP;
		RETURN true;
	EXCEPTION WHEN SQLSTATE 'BR001' THEN
		RETURN false;
	END $$;`
	// Replicas starting together serialize their schema setup.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "botrun:"+s.table); err != nil {
		return fmt.Errorf("postgres: schema lock: %w", err)
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("postgres: creating %s: %w", s.table, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// retry runs fn, and once more after a connection error: the pool drops the
// dead connection (the server cut it while idle, or restarted) and hands out
// a new one. Reads retry on any connection error; a commit only when the
// request provably never reached the server.
func (s *Store) retry(ctx context.Context, what string, read bool, fn func(ctx context.Context) error) error {
	err := s.attempt(ctx, fn)
	if err != nil && ctx.Err() == nil && (pgconn.SafeToRetry(err) || read && isConnError(err)) {
		s.log.Error("postgres connection lost; retrying on a new connection", "op", what, "err", err)
		err = s.attempt(ctx, fn)
	}
	return err
}

// attempt runs fn once, within the store's OpTimeout: a connection the
// network dropped without a word (no RST) fails the operation then, rather
// than hanging it until TCP gives up.
func (s *Store) attempt(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	return fn(ctx)
}

func isConnError(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Get implements durability.Kv.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	var v []byte
	var version int64
	err := s.retry(ctx, "get", true, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT value, version FROM `+pgx.Identifier{s.table}.Sanitize()+` WHERE key = $1`, key).Scan(&v, &version)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: get: %w", err)
	}
	return v, version, nil
}

// Range implements durability.Kv.
func (s *Store) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	col := "due"
	if ix == durability.IndexOrder {
		col = "ord"
	} else if ix != durability.IndexDue {
		return nil, fmt.Errorf("postgres: unknown index %d", ix)
	}
	lim := "ALL"
	if limit > 0 {
		lim = strconv.Itoa(limit)
	}
	q := `SELECT key, ` + col + ` FROM ` + pgx.Identifier{s.table}.Sanitize() + `
		WHERE grp = $1 AND ` + col + ` IS NOT NULL AND (` + col + `, key) > ($2, $3) AND ` + col + ` <= $4
		ORDER BY ` + col + `, key LIMIT ` + lim
	var out []durability.IndexEntry
	err := s.retry(ctx, "range", true, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, q, group, after.Score, after.Key, max)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e durability.IndexEntry
			if err := rows.Scan(&e.Key, &e.Score); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: range: %w", err)
	}
	return out, nil
}

type jsonWrite struct {
	Key   string `json:"key"`
	Ver   int64  `json:"ver"`
	Next  int64  `json:"next"`
	Val   []byte `json:"val"`
	Del   bool   `json:"del"`
	Group string `json:"grp"`
	Due   *int64 `json:"due"`
	Order *int64 `json:"ord"`
}

// Commit implements durability.Kv; it returns once the commit is durable (or
// refused). Concurrent commits share one transaction.
func (s *Store) Commit(ctx context.Context, writes []durability.Write) error {
	ws := make([]jsonWrite, len(writes))
	for i, w := range writes {
		next := w.Next
		if next <= 0 {
			next = time.Now().UnixNano()
		}
		ws[i] = jsonWrite{Key: w.Key, Ver: w.Version, Next: next, Val: w.Value, Del: w.Delete, Group: w.Group, Due: w.Due, Order: w.Order}
		if ws[i].Val == nil {
			ws[i].Val = []byte{}
		}
	}
	arg, err := json.Marshal(ws)
	if err != nil {
		return err
	}
	c := &commit{arg: arg, err: make(chan error, 1)}
	if err := s.gc.Submit(c); err != nil {
		return durability.ErrClosed
	}
	select {
	case err := <-c.err:
		return err
	case <-ctx.Done():
		// The caller gives up (an admission's bound) while its batch waits
		// behind one the network holds: the commit goes on and may still
		// land, as one whose answer a cut link lost.
		return fmt.Errorf("postgres: commit: %w (it may still land)", ctx.Err())
	}
}

// run sends a batch as one pipelined transaction: every commit is one call of
// the commit function, which answers false on a version conflict.
func (s *Store) run(batch []*commit) {
	ctx := context.Background()
	results := make([]bool, len(batch))
	err := s.retry(ctx, "commit", false, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		for _, c := range batch {
			b.Queue(`SELECT `+pgx.Identifier{s.fn}.Sanitize()+`($1::jsonb)`, string(c.arg))
		}
		b.Queue("COMMIT")
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		for i := range batch {
			if err := br.QueryRow().Scan(&results[i]); err != nil {
				return err
			}
		}
		_, err := br.Exec()
		return err
	})
	if err != nil && len(batch) > 1 && !isConnError(err) {
		// One bad write (a value the server refuses) must fail only its own
		// caller: the transaction was rolled back, so run each commit alone.
		// A lost connection is not split: the batch may have committed.
		for _, c := range batch {
			s.run([]*commit{c})
		}
		return
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.err <- fmt.Errorf("postgres: commit: %w", err)
		case !results[i]:
			c.err <- durability.ErrConflict
		default:
			c.err <- nil
		}
	}
}

// Close stops the writer after the queued commits and closes an owned pool.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.gc.Close()
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}
