package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

var n atomic.Int64

// open gives each test its own table prefix on the shared server.
func open(t *testing.T) *postgres.Backend {
	t.Helper()
	b, err := postgres.Open(context.Background(), postgres.Options{
		URL:         testserver.Postgres(t),
		TablePrefix: fmt.Sprintf("t%d_%d_", os.Getpid(), n.Add(1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	durabilitytest.Run(t, func(t *testing.T) durability.Backend { return open(t) })
}

// A connection the server cuts while idle is logged and replaced: the next
// query works.
func TestIdleConnectionCutIsReplaced(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	url := testserver.Postgres(t)
	s, err := postgres.OpenStore(context.Background(), postgres.Options{
		URL: url, TablePrefix: fmt.Sprintf("t%d_%d_", os.Getpid(), n.Add(1)),
		Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Commit(ctx, []durability.Write{{Key: "k", Version: 0, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	// Another session terminates every idle connection of this database.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var killed int
	admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state = 'idle' AND datname = current_database()`).Scan(&killed)
	admin.Close(ctx)
	if killed == 0 {
		t.Fatal("no idle connection to cut")
	}
	v, version, err := s.Get(ctx, "k")
	if err != nil || string(v) != "v" || version == 0 {
		t.Fatalf("get after the cut: %q %d %v", v, version, err)
	}
	if err := s.Commit(ctx, []durability.Write{{Key: "k", Version: version, Value: []byte("w")}}); err != nil {
		t.Fatalf("commit after the cut: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "postgres connection lost") {
		t.Fatalf("the cut was not logged:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReadOnlyCreatesNothing: a read-only opening refuses a missing schema
// (creating nothing) and reads one in place.
func TestReadOnlyCreatesNothing(t *testing.T) {
	ctx := context.Background()
	url := testserver.Postgres(t)
	prefix := fmt.Sprintf("t%d_%d_", os.Getpid(), n.Add(1))
	if _, err := postgres.Open(ctx, postgres.Options{URL: url, TablePrefix: prefix, ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Fatalf("read-only on no schema: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, prefix+"durable").Scan(&exists); err != nil || exists {
		t.Fatalf("the read-only opening created the table (%v, %v)", exists, err)
	}
	w, err := postgres.Open(ctx, postgres.Options{URL: url, TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := postgres.Open(ctx, postgres.Options{URL: url, TablePrefix: prefix, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only on the schema in place: %v", err)
	}
	r.Close()
}
