package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

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
