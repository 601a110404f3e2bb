package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// migrate runs River's migrations up, then creates the bot's two tables.
func migrate[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], exec func(string) error, schema []string) error {
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return fmt.Errorf("rivermigrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("rivermigrate up: %w", err)
	}
	for _, q := range schema {
		if err := exec(q); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// SQLite is the Store on a SQLite file, through modernc.org/sqlite and River's
// riversqlite driver.
type SQLite struct {
	db     *sql.DB
	client *river.Client[*sql.Tx]
}

// OpenSQLite opens (creating it if needed) the database at path, migrates it
// and makes River's client with cfg.
//
// The database is in WAL mode with synchronous=FULL, so every commit is on
// disk before it returns (botrun's default). The pool has one connection, as
// riversqlite's documentation recommends: River runs many operations in
// parallel, which SQLite, one writer at a time, answers with SQLITE_BUSY.
func OpenSQLite(ctx context.Context, path string, cfg *river.Config) (*SQLite, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: database path %q may not contain '?' or '#'", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &SQLite{db: db}
	driver := riversqlite.New(db)
	exec := func(q string) error { _, err := db.ExecContext(ctx, q); return err }
	if err := migrate(ctx, driver, exec, []string{
		`CREATE TABLE IF NOT EXISTS inbound (id TEXT PRIMARY KEY)`,
		`CREATE TABLE IF NOT EXISTS transcript (chat TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (chat, seq))`,
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if s.client, err = river.NewClient(driver, cfg); err != nil {
		db.Close()
		return nil, fmt.Errorf("river client: %w", err)
	}
	return s, nil
}

// Admit implements Store.
func (s *SQLite) Admit(ctx context.Context, id string, args EchoArgs) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("admit: begin: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO inbound (id) VALUES (?) ON CONFLICT DO NOTHING`, id)
	if err != nil {
		return false, fmt.Errorf("admit: dedupe: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("admit: dedupe: %w", err)
	} else if n == 0 {
		return true, nil
	}
	if _, err := s.client.InsertTx(ctx, tx, args, nil); err != nil {
		return false, fmt.Errorf("admit: insert job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("admit: commit: %w", err)
	}
	return false, nil
}

// Reply implements Store.
func (s *SQLite) Reply(ctx context.Context, job *river.Job[EchoArgs], text string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("reply: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO transcript (chat, seq, text)
		SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2 FROM transcript WHERE chat = ?1`, job.Args.Chat, text); err != nil {
		return fmt.Errorf("reply: append: %w", err)
	}
	if _, err := river.JobCompleteTx[*riversqlite.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("reply: complete job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("reply: commit: %w", err)
	}
	return nil
}

// After implements Store.
func (s *SQLite) After(ctx context.Context, chat string, after int64, limit int) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, chat, text FROM transcript
		WHERE chat = ? AND seq > ? ORDER BY seq LIMIT ?`, chat, after, limit)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		if err := rows.Scan(&e.Seq, &e.Chat, &e.Text); err != nil {
			return nil, fmt.Errorf("transcript: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	return out, nil
}

// Start implements Store.
func (s *SQLite) Start(ctx context.Context) error { return s.client.Start(ctx) }

// Stop implements Store.
func (s *SQLite) Stop(ctx context.Context) error { return s.client.Stop(ctx) }

// Close implements Store.
func (s *SQLite) Close() { s.db.Close() }

// Postgres is the Store on PostgreSQL, through pgxpool and River's riverpgxv5
// driver.
type Postgres struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

// OpenPostgres connects to the database at dbURL, migrates it and makes
// River's client with cfg. Unless the URL sets pool_max_conns, the pool gets
// a connection per worker and 16 for the HTTP handlers and River's own
// services (pgxpool's default is only max(4, NumCPU)).
func OpenPostgres(ctx context.Context, dbURL string, workers int, cfg *river.Config) (*Postgres, error) {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if !strings.Contains(dbURL, "pool_max_conns") {
		pc.MaxConns = int32(workers + 16)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Postgres{pool: pool}
	driver := riverpgxv5.New(pool)
	exec := func(q string) error { _, err := pool.Exec(ctx, q); return err }
	if err := migrate(ctx, driver, exec, []string{
		`CREATE TABLE IF NOT EXISTS inbound (id TEXT PRIMARY KEY)`,
		`CREATE TABLE IF NOT EXISTS transcript (chat TEXT NOT NULL, seq BIGINT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (chat, seq))`,
	}); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if s.client, err = river.NewClient(driver, cfg); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river client: %w", err)
	}
	return s, nil
}

// Admit implements Store.
func (s *Postgres) Admit(ctx context.Context, id string, args EchoArgs) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("admit: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	tag, err := tx.Exec(ctx, `INSERT INTO inbound (id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
	if err != nil {
		return false, fmt.Errorf("admit: dedupe: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return true, nil
	}
	if _, err := s.client.InsertTx(ctx, tx, args, nil); err != nil {
		return false, fmt.Errorf("admit: insert job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("admit: commit: %w", err)
	}
	return false, nil
}

// Reply implements Store. Two workers may answer the same chat at once: the
// transaction-scoped advisory lock on the chat makes the second wait for the
// first's commit, so MAX(seq)+1 never collides (which would fail the job and
// leave it to River's retry backoff).
func (s *Postgres) Reply(ctx context.Context, job *river.Job[EchoArgs], text string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("reply: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, job.Args.Chat); err != nil {
		return fmt.Errorf("reply: lock chat: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO transcript (chat, seq, text)
		SELECT $1, COALESCE(MAX(seq), 0) + 1, $2 FROM transcript WHERE chat = $1`, job.Args.Chat, text); err != nil {
		return fmt.Errorf("reply: append: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("reply: complete job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("reply: commit: %w", err)
	}
	return nil
}

// After implements Store.
func (s *Postgres) After(ctx context.Context, chat string, after int64, limit int) ([]Entry, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, chat, text FROM transcript
		WHERE chat = $1 AND seq > $2 ORDER BY seq LIMIT $3`, chat, after, limit)
	if err != nil {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := r.Scan(&e.Seq, &e.Chat, &e.Text)
		return e, err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("transcript: %w", err)
	}
	return out, nil
}

// Start implements Store.
func (s *Postgres) Start(ctx context.Context) error { return s.client.Start(ctx) }

// Stop implements Store.
func (s *Postgres) Stop(ctx context.Context) error { return s.client.Stop(ctx) }

// Close implements Store.
func (s *Postgres) Close() { s.pool.Close() }
