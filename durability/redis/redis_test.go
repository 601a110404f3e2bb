package redis_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

var n atomic.Int64

// open gives each test its own key prefix on the shared server.
func open(t *testing.T) *redis.Backend {
	t.Helper()
	b, err := redis.Open(context.Background(), redis.Options{
		URL:    testserver.Redis(t),
		Prefix: fmt.Sprintf("t%d-%d", os.Getpid(), n.Add(1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	durabilitytest.Run(t, func(t *testing.T) durability.Backend { return open(t) })
}
