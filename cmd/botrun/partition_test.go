package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/faultnet"
	"github.com/botrun/botrun/internal/soak"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestPartition runs botrun on PostgreSQL and on Redis with a TCP proxy
// between each replica and the server that cuts the link (RST), blackholes
// it (packets dropped: no RST, no FIN) and slows it, in turn, during
// traffic: one replica alone, and two replicas with coordination on and
// off, the fault on one of them or on both. While a link is down, admission
// answers 503 with Retry-After within the client's timeout (a blackholed
// connection is given up after the store's timeouts, not waited on), and
// the load balancer's retries reach a replica whose link is up; once it
// heals, the same processes admit again; at the end every message is
// answered exactly once. make soak runs a long random schedule
// (BOTRUN_SEED replays one).
func TestPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the partition test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	modes := []faultnet.Mode{faultnet.Cut, faultnet.Blackhole, faultnet.Slow}
	// one says a fault may hit one replica's link alone (not on a Redis
	// Cluster, whose nodes announce one address, a proxy, to every client).
	fixed := func(one bool) []linkFault {
		var s []linkFault
		for _, m := range modes {
			s = append(s, linkFault{mode: m, all: true})
			if one && m != faultnet.Slow {
				s = append(s, linkFault{mode: m})
			}
		}
		return s
	}
	random := func(one bool) []linkFault { return nil }
	if soak.On() {
		rng := soak.Rand(t, "./cmd/botrun")
		random = func(one bool) []linkFault {
			var s []linkFault
			for range 12 {
				s = append(s, linkFault{mode: modes[rng.IntN(len(modes))], all: !one || rng.IntN(2) == 0})
			}
			return s
		}
	}
	for _, backend := range []string{"postgres", "redis", "redis-cluster"} {
		for _, shape := range []struct {
			name         string
			replicas     int
			coordination bool
		}{{"one", 1, false}, {"two-coordinated", 2, true}, {"two", 2, false}} {
			t.Run(backend+"/"+shape.name, func(t *testing.T) {
				one := shape.replicas > 1 && backend != "redis-cluster"
				schedule := random(one)
				if schedule == nil {
					schedule = fixed(one)
				}
				partition(t, bin, module, backend, shape.replicas, shape.coordination, schedule)
			})
		}
	}
}

// linkFault is one fault of a schedule: a mode on one replica's link (the
// first) or on all.
type linkFault struct {
	mode faultnet.Mode
	all  bool
}

func (f linkFault) String() string {
	if f.all {
		return f.mode.String() + " all"
	}
	return f.mode.String() + " one"
}

// proxied is the backend's [durability] keys for replicas replicas, each
// reaching the server through a proxy of its own. On a Redis Cluster (a
// cluster of its own, started for the test) the proxies are the nodes',
// shared by the replicas: each node announces its proxy.
func proxied(t *testing.T, backend string, replicas int) ([]string, []*faultnet.Proxy) {
	t.Helper()
	var raw string
	switch backend {
	case "redis-cluster":
		// A start that failed (a port taken) is tried again with new
		// fronts: the proxies are those of the cluster's addresses.
		fronts := map[string]*faultnet.Proxy{}
		c := testserver.StartRedisClusterFronted(t, func(addr string) (string, error) {
			p, err := faultnet.Start(addr)
			if err != nil {
				return "", err
			}
			t.Cleanup(func() { p.Close() })
			fronts[p.Addr()] = p
			return p.Addr(), nil
		})
		var proxies []*faultnet.Proxy
		for _, a := range c.Addrs {
			proxies = append(proxies, fronts[a])
		}
		seeds, _ := json.Marshal(c.Addrs)
		n := runs.Add(1)
		keys := make([]string, replicas)
		for i := range keys {
			keys[i] = fmt.Sprintf("backend = \"redis\"\ncluster = %s\nprefix = \"part%d_%d\"", seeds, os.Getpid(), n)
		}
		return keys, proxies
	case "postgres":
		raw = testserver.Postgres(t)
	case "redis":
		raw = testserver.Redis(t)
	default:
		t.Fatalf("no proxy for %s", backend)
	}
	n := runs.Add(1)
	var keys []string
	var proxies []*faultnet.Proxy
	for range replicas {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		p, err := faultnet.Start(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		u.Host = p.Addr()
		proxies = append(proxies, p)
		if backend == "postgres" {
			keys = append(keys, fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"part%d_%d_\"", u.String(), os.Getpid(), n))
		} else {
			keys = append(keys, fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"part%d_%d\"", u.String(), os.Getpid(), n))
		}
	}
	return keys, proxies
}

func partition(t *testing.T, bin, module, backend string, replicas int, coordination bool, schedule []linkFault) {
	keys, proxies := proxied(t, backend, replicas)
	if coordination {
		for i := range keys {
			keys[i] += "\ncoordination = true"
		}
	}
	f := startFleet(t, bin, module, keys, "")
	f.drive(100 + 60*len(schedule))
	var report []string
	for i, fault := range schedule {
		// Some traffic on healthy links first.
		if !f.admittedMore(f.count.Load(), 30, 2*time.Minute) {
			t.Fatalf("fault %d (%s): the links are up, but 30 messages were not admitted in 2 minutes\n%s", i, fault, f.logs())
		}
		refused := f.ref.withRetryAfter.Load()
		at := f.count.Load()
		start := time.Now()
		hit := proxies[:1]
		if fault.all {
			hit = proxies
		}
		for _, p := range hit {
			switch fault.mode {
			case faultnet.Cut:
				p.Cut()
			case faultnet.Blackhole:
				p.Blackhole()
			case faultnet.Slow:
				p.Slow(30 * time.Millisecond)
			}
		}
		// Held until the bot showed it: refusals from a replica cut
		// off (and, with a replica still linked, admissions through
		// it), admissions through a slow link.
		held := waitfor.True(2*time.Minute, func() bool {
			switch {
			case fault.mode == faultnet.Slow:
				return f.count.Load() >= at+20
			case fault.all:
				return f.ref.withRetryAfter.Load() >= refused+8
			default:
				return f.ref.withRetryAfter.Load() >= refused+4 && f.count.Load() >= at+10
			}
		})
		heldFor := time.Since(start)
		for _, p := range hit {
			p.Heal()
		}
		if !held {
			t.Fatalf("fault %d (%s): held 2 minutes without the bot refusing (or admitting): %d refusals, %d admitted\n%s", i, fault, f.ref.withRetryAfter.Load()-refused, f.count.Load()-at, f.logs())
		}
		// Each replica the fault hit admits again within lease + poll of
		// the heal (probed every 50 ms, not waiting out Retry-After).
		healed := time.Now()
		var resumed time.Duration
		for r := range f.reps {
			if len(proxies) == len(f.reps) && !fault.all && r > 0 {
				break // the others' links were up
			}
			took, ok := f.probe(r, fmt.Sprintf("probe-%d-%d", i, r), healed)
			if !ok {
				t.Fatalf("fault %d (%s): replica %d admitted nothing 2 minutes after the link healed\n%s", i, fault, r, f.logs())
			}
			resumed = max(resumed, took)
		}
		if bound := faultLease + faultPoll; resumed > bound {
			t.Errorf("fault %d (%s): admitting again %s after the link healed, over lease + poll (%s)", i, fault, resumed.Round(time.Millisecond), bound)
		}
		report = append(report, fmt.Sprintf("%s %s (%d refused, %d admitted) resumed in %s", fault, heldFor.Round(100*time.Millisecond), f.ref.withRetryAfter.Load()-refused, f.count.Load()-at, resumed.Round(10*time.Millisecond)))
	}
	o := f.finish()
	fmt.Printf("partition %s, %d replica(s), coordination %v: %d messages; %s; slowest refusal %s; lost %d, duplicated %d, ambiguous %d\n",
		backend, replicas, coordination, f.messages, strings.Join(report, "; "), time.Duration(f.ref.slowest.Load()).Round(time.Millisecond), o.lost, o.duplicated, o.ambiguous)
}
