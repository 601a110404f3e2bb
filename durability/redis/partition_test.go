package redis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/internal/faultnet"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
)

// TestClusterPartition puts a TCP proxy in front of every node of the
// Redis Cluster (the client dials each node's announced address through
// its proxy) and, while 8 committers write with a 5 s deadline each (as an
// admission does), cuts every link and then blackholes every link. While
// down, each commit fails within its deadline; once healed, commits succeed
// again on the same store; no commit that returned nil is missing.
func TestClusterPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the partition test takes a while")
	}
	seeds := testserver.RedisCluster(t)
	var mu sync.Mutex
	proxies := map[string]*faultnet.Proxy{}
	proxyFor := func(addr string) (*faultnet.Proxy, error) {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := proxies[addr]; ok {
			return p, nil
		}
		p, err := faultnet.Start(addr)
		if err != nil {
			return nil, err
		}
		proxies[addr] = p
		return p, nil
	}
	all := func(f func(*faultnet.Proxy)) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range proxies {
			f(p)
		}
	}
	defer all(func(p *faultnet.Proxy) { p.Close() })
	var d net.Dialer
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds, ReadTimeout: 3 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			p, err := proxyFor(addr)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, p.Addr())
		}})
	defer cc.Close()
	s, err := redis.Open(context.Background(), redis.Options{Client: cc, Prefix: fmt.Sprintf("part%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var acked sync.Map
	var ok, failed, slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("s%d/in/%d-%d", i%4, g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				err := s.Commit(ctx, []durability.Write{{Key: key, Version: 0, Value: []byte("x"), Group: fmt.Sprintf("s%d/in/", i%4)}})
				took := time.Since(start)
				cancel()
				storeMax(&slowest, int64(took))
				if err != nil {
					failed.Add(1)
					time.Sleep(50 * time.Millisecond) // a refused client waits
					continue
				}
				ok.Add(1)
				acked.Store(key, true)
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	more := func(what string, n int64) {
		t.Helper()
		at := ok.Load()
		if !waitfor.True(2*time.Minute, func() bool { return ok.Load() >= at+n }) {
			t.Fatalf("%s: %d commits in 2 minutes, want %d", what, ok.Load()-at, n)
		}
	}
	var report []string
	more("before the faults", 300)
	for _, fault := range []faultnet.Mode{faultnet.Cut, faultnet.Blackhole} {
		f0 := failed.Load()
		all(func(p *faultnet.Proxy) {
			if fault == faultnet.Cut {
				p.Cut()
			} else {
				p.Blackhole()
			}
		})
		if !waitfor.True(2*time.Minute, func() bool { return failed.Load() >= f0+16 }) {
			t.Fatalf("%s: the commits did not fail while every link was down (%d failed)", fault, failed.Load()-f0)
		}
		all(func(p *faultnet.Proxy) { p.Heal() })
		healed := time.Now()
		more("after healing "+fault.String(), 300)
		report = append(report, fmt.Sprintf("%s: %d failed, 300 more commits done %s after healing", fault, failed.Load()-f0, time.Since(healed).Round(10*time.Millisecond)))
	}
	close(stop)
	wg.Wait()
	if d := time.Duration(slowest.Load()); d > 10*time.Second {
		t.Errorf("a commit took %s: the 5 s deadline did not bound it", d)
	}
	lost := 0
	acked.Range(func(k, _ any) bool {
		if _, v, err := s.Get(context.Background(), k.(string)); err != nil || v == 0 {
			lost++
		}
		return true
	})
	if lost > 0 {
		t.Errorf("%d acknowledged commits are missing after the partitions", lost)
	}
	fmt.Printf("redis cluster partition: %d commits, %d failed; %v; slowest commit %s; acknowledged but lost %d\n",
		ok.Load(), failed.Load(), report, time.Duration(slowest.Load()).Round(time.Millisecond), lost)
}
