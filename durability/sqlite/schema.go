package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] brings the schema from version i to i+1. Append only.
var migrations = []string{
	`CREATE TABLE durable (
		key     TEXT PRIMARY KEY,
		version INTEGER NOT NULL,
		value   BLOB NOT NULL,
		grp     TEXT NOT NULL DEFAULT '',
		due     INTEGER,
		ord     INTEGER
	) WITHOUT ROWID;
	CREATE INDEX durable_due ON durable (grp, due, key) WHERE due IS NOT NULL;
	CREATE INDEX durable_ord ON durable (grp, ord, key) WHERE ord IS NOT NULL;`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

// migrate applies the migrations the database lacks, in one immediate
// transaction, and refuses a database written by a newer schema.
func migrate(ctx context.Context, c *sql.Conn, path string) error {
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS botrun_schema (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite %s: %w (is it a SQLite database?)", path, err)
	}
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite %s: %w", path, err)
	}
	err := func() error {
		var v int
		err := c.QueryRowContext(ctx, `SELECT version FROM botrun_schema`).Scan(&v)
		if err == sql.ErrNoRows {
			if _, err := c.ExecContext(ctx, `INSERT INTO botrun_schema (version) VALUES (0)`); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if v > SchemaVersion {
			return fmt.Errorf("schema version %d is newer than this botrun's %d: upgrade botrun", v, SchemaVersion)
		}
		for ; v < SchemaVersion; v++ {
			if _, err := c.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migration %d: %w", v+1, err)
			}
		}
		_, err = c.ExecContext(ctx, `UPDATE botrun_schema SET version = ?`, v)
		return err
	}()
	if err != nil {
		c.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("sqlite %s: %w", path, err)
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("sqlite %s: %w", path, err)
	}
	return nil
}
