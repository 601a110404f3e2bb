package redis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
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

// TestClusterMasterKilled SIGKILLs, on a cluster of its own, the master that
// holds a scope while 16 committers write to it: the commits stall until the
// replica takes over, and none fails. With wait_replicas at its default (1:
// a commit returns once a replica has it) none that returned is missing
// after the failover; with wait_replicas = 0 (the store never waits) the
// commits the master acknowledged but had not yet sent to its replica are
// lost, and the test counts them (make soak kills the master 5 times).
func TestClusterMasterKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover takes a while")
	}
	kills := 1
	if os.Getenv("BOTRUN_SOAK") != "" {
		kills = 5
	}
	for _, wait := range []int{0, -1} {
		name := "wait_replicas=default"
		if wait < 0 {
			name = "wait_replicas=0"
		}
		t.Run(name, func(t *testing.T) {
			for k := range kills {
				masterKilled(t, wait, fmt.Sprintf("killed%d", k))
			}
		})
	}
}

func masterKilled(t *testing.T, wait int, prefix string) {
	cl := testserver.StartRedisCluster(t)
	ctx := context.Background()
	b, err := redis.Open(ctx, redis.Options{Cluster: cl.Addrs, Prefix: prefix, WaitReplicas: wait})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs})
	defer cc.Close()
	m, err := cc.MasterForKey(ctx, prefix+":{durable:s0}:v")
	if err != nil {
		t.Fatal(err)
	}
	master := m.Options().Addr

	var acked sync.Map
	var errs, commits, longest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("s0/in/%d-%d", g, i)
				start := time.Now()
				err := b.Commit(ctx, []durability.Write{{Key: k, Version: 0, Value: []byte("x"), Group: "s0/in/"}})
				storeMax(&longest, int64(time.Since(start)))
				if err != nil {
					errs.Add(1)
					t.Errorf("commit %s: %v", k, err)
					continue
				}
				commits.Add(1)
				acked.Store(k, true)
			}
		})
	}
	waitCommits := func(n int64) {
		if !waitfor.True(2*time.Minute, func() bool { return commits.Load() >= n }) {
			t.Fatalf("only %d commits within 2 minutes, want %d", commits.Load(), n)
		}
	}
	waitCommits(500)
	unreplicated := b.Unreplicated()
	if err := cl.Kill(master); err != nil {
		t.Fatal(err)
	}
	killedAt := commits.Load()
	waitCommits(killedAt + 2000) // the replica took over and serves the slot
	close(stop)
	wg.Wait()

	lost := 0
	acked.Range(func(k, _ any) bool {
		if _, v, err := b.Get(ctx, k.(string)); err != nil || v == 0 {
			lost++
		}
		return true
	})
	if lost > 0 && unreplicated == 0 && wait >= 0 {
		t.Errorf("%d commits acknowledged (each after its replica's WAIT) are missing after the failover", lost)
	}
	label := "default wait_replicas (1)"
	if wait < 0 {
		label = "wait_replicas = 0"
	}
	fmt.Printf("redis cluster master killed, %s: commits %d, errors %d, longest commit %s, acknowledged but lost %d, replayed %d, unreplicated %d before the kill, %d after\n",
		label, commits.Load(), errs.Load(), time.Duration(longest.Load()).Round(time.Millisecond), lost, b.Replayed(), unreplicated, b.Unreplicated()-unreplicated)
}

// BenchmarkClusterCommit measures a commit on the cluster without and with
// the replica wait, from 1 and 64 committers per CPU.
func BenchmarkClusterCommit(b *testing.B) {
	seeds := testserver.RedisCluster(b)
	for _, wait := range []int{-1, 1} {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("wait=%d/committers=%d", max(wait, 0), par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				s, err := redis.Open(context.Background(), redis.Options{Cluster: seeds, WaitReplicas: wait,
					Prefix: fmt.Sprintf("bench%d-%d", os.Getpid(), n.Add(1))})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				var i atomic.Int64
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := i.Add(1)
						key := fmt.Sprintf("s%d/in/%d", k%16, k)
						if err := s.Commit(context.Background(), []durability.Write{{Key: key, Version: 0, Value: []byte("0123456789abcdef0123456789abcdef")}}); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// storeMax raises v to d if d is greater.
func storeMax(v *atomic.Int64, d int64) {
	for {
		if old := v.Load(); d <= old || v.CompareAndSwap(old, d) {
			return
		}
	}
}
