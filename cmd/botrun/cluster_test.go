package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestRedisClusterFailover runs botrun on the Redis Cluster and, in the
// middle of its traffic, cuts the connections of the master that owns the
// bot's scope (CLIENT KILL: replies in flight are lost) and fails that master
// over to its replica (CLUSTER FAILOVER). Every message is admitted and
// handled, every reply reaches the deduplicating gateway exactly once, and no
// journal error reaches the bot: the commits refused while the slot moved
// were retried, those whose reply was lost were recognised, none was lost or
// applied twice.
func TestRedisClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover test takes a while")
	}
	// A cluster of its own: the failover must not move the masters under
	// the other packages' tests running on the shared one.
	seeds := testserver.StartRedisCluster(t).Addrs
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	prefix := fmt.Sprintf("cf%d", os.Getpid())
	gw := &gateway{texts: map[string]int{}, dedupe: true, delay: 20 * time.Millisecond}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	backend := fmt.Sprintf("backend = \"redis\"\ncluster = %s\nprefix = %q", tomlStrings(seeds), prefix)
	r := newReplica(t, t.TempDir(), "replica-a", module, backend,
		fmt.Sprintf("[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\ndedupes = true\n", gwSrv.URL, killSecret))
	// Every replica in sync: one that is not cannot take over.
	if err := testserver.WaitClusterOK(seeds, time.Minute); err != nil {
		t.Fatalf("the cluster is not ready for a failover: %v", err)
	}
	r.start(t, bin)
	defer r.cmd.Process.Kill()

	// Four senders deliver the messages over 20 chats; a refused delivery
	// is delivered again (the inbox deduplicates on the message id).
	const messages, chats = 300, 20
	var mu sync.Mutex
	admitted := map[string]string{}
	var latencies []time.Duration // per admitted message, from its first try
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range next {
				text, chat := fmt.Sprintf("cf-%d", i), fmt.Sprintf("chat-%d", i%chats)
				start := time.Now()
				// A condition's deadline, not a speed check.
				if !waitfor.Every(50*time.Millisecond, 5*time.Minute, func() bool { return post(r.addr, chat, text) }) {
					t.Errorf("message %s was not admitted within 5 minutes", text)
				}
				mu.Lock()
				admitted[text] = chat
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			}
		})
	}
	admittedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(admitted)
	}
	failedOver := make(chan time.Duration, 1)
	settled := make(chan struct{})
	var before, after int // messages admitted when the failover began and ended
	go func() {
		defer close(next)
		for i := range messages {
			if i == 2*messages/3 {
				// The last third goes after the failover, however long a
				// loaded machine makes it: traffic on both sides of it.
				<-settled
			}
			if i == messages/3 {
				// The bot's keys exist by now: fail their master over while
				// the senders keep going.
				if !waitfor.True(5*time.Minute, func() bool { return admittedCount() >= messages/4 }) {
					t.Errorf("%d messages admitted in 5 minutes, want %d before the failover", admittedCount(), messages/4)
				}
				go func() {
					before = admittedCount()
					took := clusterFailover(t, seeds, prefix)
					after = admittedCount()
					// The old master rejoins as a replica: later tests get
					// the cluster whole.
					if err := testserver.WaitClusterOK(seeds, 5*time.Minute); err != nil {
						t.Errorf("the cluster did not settle after the failover: %v", err)
					}
					failedOver <- took
					close(settled)
				}()
			}
			next <- i
			// The traffic's pace: the failover lands among messages.
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Wait()
	took := <-failedOver
	if after >= messages {
		t.Errorf("the failover ended after the traffic (admitted %d before it, %d after): it tested nothing", before, after)
	}
	waitSettled(t, bin, r.cfg, messages, 2*time.Minute)
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()

	o := audit(t, bin, r.cfg, "http", gw.delivered, admitted)
	if o.lost+o.duplicated+o.ambiguous > 0 {
		t.Errorf("lost %d, duplicated %d, ambiguous %d across a failover: want 0, 0, 0", o.lost, o.duplicated, o.ambiguous)
	}
	slices.Sort(latencies)
	// The store retried what the failover refused: no journal error
	// reached the bot.
	for _, line := range strings.Split(r.stderr.String(), "\n") {
		if strings.Contains(line, `err="redis:`) {
			t.Errorf("a journal error reached the bot: %s", line)
		}
	}
	fmt.Printf("redis cluster failover: messages %d (%d admitted before the failover, %d when it ended), failover took %s, admission p50 %s, max %s, lost %d, duplicated %d, ambiguous %d, repeated keys %d\n",
		len(admitted), before, after, took.Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond),
		latencies[len(latencies)-1].Round(time.Millisecond), o.lost, o.duplicated, o.ambiguous, gw.repeats)
}

// clusterFailover finds the master that holds keys under prefix, cuts its
// clients' connections, makes its replica take over (CLUSTER FAILOVER) and
// waits until the replica serves as master. It returns how long the
// takeover took.
func clusterFailover(t *testing.T, seeds []string, prefix string) time.Duration {
	ctx := context.Background()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds})
	defer cc.Close()
	var master string
	var mu sync.Mutex
	if !waitfor.Every(20*time.Millisecond, 5*time.Minute, func() bool {
		cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			keys, _, err := c.Scan(ctx, 0, prefix+":*", 1000).Result()
			if err == nil && len(keys) > 0 {
				mu.Lock()
				master = c.Options().Addr
				mu.Unlock()
			}
			return nil
		})
		mu.Lock()
		defer mu.Unlock()
		return master != ""
	}) {
		t.Errorf("no master holds keys under %s", prefix)
		return 0
	}
	mc := goredis.NewClient(&goredis.Options{Addr: master})
	defer mc.Close()
	masterID, err := mc.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		t.Errorf("cluster myid on %s: %v", master, err)
		return 0
	}
	nodes, err := mc.ClusterNodes(ctx).Result()
	if err != nil {
		t.Errorf("cluster nodes on %s: %v", master, err)
		return 0
	}
	var replica string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == masterID && strings.Contains(f[2], "slave") {
			replica, _, _ = strings.Cut(f[1], "@")
		}
	}
	if replica == "" {
		t.Errorf("master %s has no replica:\n%s", master, nodes)
		return 0
	}
	// Connections cut under load: the commits in flight lose their replies.
	for range 3 {
		if err := mc.Do(ctx, "client", "kill", "type", "normal").Err(); err != nil {
			t.Errorf("client kill on %s: %v", master, err)
		}
		// Cuts spread over the commits in flight: the disruption under test.
		time.Sleep(30 * time.Millisecond)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: replica})
	defer rc.Close()
	start := time.Now()
	if err := rc.Do(ctx, "cluster", "failover").Err(); err != nil {
		t.Errorf("cluster failover on %s: %v", replica, err)
		return 0
	}
	var role []any
	// A condition's deadline, not a speed check.
	if !waitfor.Every(20*time.Millisecond, 5*time.Minute, func() bool {
		role, err = rc.Do(ctx, "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}) {
		t.Errorf("replica %s did not become master within 5 minutes: %v %v", replica, role, err)
		return 0
	}
	return time.Since(start)
}
