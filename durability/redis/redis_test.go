package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

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

// openCluster gives each test its own key prefix on the shared cluster.
func openCluster(t *testing.T) *redis.Backend {
	t.Helper()
	b, err := redis.Open(context.Background(), redis.Options{
		Cluster: testserver.RedisCluster(t),
		Prefix:  fmt.Sprintf("t%d-%d", os.Getpid(), n.Add(1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestClusterConformance(t *testing.T) {
	durabilitytest.Run(t, func(t *testing.T) durability.Backend { return openCluster(t) })
}

// TestReplayedCommit sends a commit twice, as a retry after a lost reply
// does: the second is recognised as applied, not a conflict; a different
// commit over the same version still conflicts.
func TestReplayedCommit(t *testing.T) {
	for name, open := range map[string]func(*testing.T) *redis.Backend{"single": open, "cluster": openCluster} {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			defer b.Close()
			ctx := context.Background()
			order := int64(1)
			w := []durability.Write{
				{Key: "s/in/a", Version: 0, Next: 7, Value: []byte("x"), Group: "s/in/", Order: &order},
				{Key: "s/st/a", Version: durability.AnyVersion, Next: 9, Value: []byte("state")},
			}
			for i := range 2 {
				if err := b.Commit(ctx, w); err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			if b.Replayed() != 1 {
				t.Fatalf("replayed = %d, want 1", b.Replayed())
			}
			w[0].Value = []byte("y")
			if err := b.Commit(ctx, w); !errors.Is(err, durability.ErrConflict) {
				t.Fatalf("a different commit over version 0: %v, want a conflict", err)
			}
			if v, ver, err := b.Get(ctx, "s/in/a"); err != nil || string(v) != "x" || ver != 7 {
				t.Fatalf("get: %q %d %v, want x 7", v, ver, err)
			}
		})
	}
}

// TestClusterCommitSpansScopes: a commit over two scopes is refused before
// it reaches the cluster, naming both keys.
func TestClusterCommitSpansScopes(t *testing.T) {
	b := openCluster(t)
	defer b.Close()
	err := b.Commit(context.Background(), []durability.Write{
		{Key: "s1/in/a", Version: durability.AnyVersion, Value: []byte("x")},
		{Key: "s2/in/a", Version: durability.AnyVersion, Value: []byte("x")},
	})
	if err == nil || !strings.Contains(err.Error(), "one scope") {
		t.Fatalf("err = %v, want a refusal naming one scope", err)
	}
}

// TestURLOnClusterNode: a cluster node given as url is refused with the way
// out.
func TestURLOnClusterNode(t *testing.T) {
	_, err := redis.Open(context.Background(), redis.Options{URL: "redis://" + testserver.RedisCluster(t)[0] + "/0"})
	if err == nil || !strings.Contains(err.Error(), "durability.cluster") {
		t.Fatalf("err = %v, want a refusal naming durability.cluster", err)
	}
}

// TestScriptFlushed: a master that lost the commit script (a promoted
// replica, a restarted server) gets the script itself; the commit lands.
func TestScriptFlushed(t *testing.T) {
	ctx := context.Background()
	for name, open := range map[string]func(*testing.T) *redis.Backend{"single": open, "cluster": openCluster} {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			defer b.Close()
			var flush func() error
			if name == "single" {
				opts, err := goredis.ParseURL(testserver.Redis(t))
				if err != nil {
					t.Fatal(err)
				}
				c := goredis.NewClient(opts)
				defer c.Close()
				flush = func() error { return c.ScriptFlush(ctx).Err() }
			} else {
				c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: testserver.RedisCluster(t)})
				defer c.Close()
				flush = func() error {
					return c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return m.ScriptFlush(ctx).Err() })
				}
			}
			if err := flush(); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := b.Commit(ctx, []durability.Write{{Key: "s/in/a", Version: durability.AnyVersion, Value: []byte("x")}}); err != nil {
					t.Fatalf("commit %d after SCRIPT FLUSH: %v", i, err)
				}
			}
		})
	}
}
