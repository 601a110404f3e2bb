package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/faultnet"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestPartition runs botrun on PostgreSQL and on Redis through a TCP proxy
// that cuts the link (RST), blackholes it (packets dropped: no RST, no
// FIN) and slows it, in turn, during traffic. While the link is down,
// admission answers 503 with Retry-After within the client's timeout (a
// blackholed connection is given up after the store's timeouts, not waited
// on); once it heals, the same process admits again; at the end every
// message is answered exactly once. make soak runs a long random schedule
// (BOTRUN_SEED replays one).
func TestPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the partition test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	schedule := []faultnet.Mode{faultnet.Cut, faultnet.Blackhole, faultnet.Slow}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BOTRUN_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	if os.Getenv("BOTRUN_SOAK") != "" || os.Getenv("BOTRUN_SEED") != "" {
		rng := rand.New(rand.NewPCG(seed, 33))
		modes := []faultnet.Mode{faultnet.Cut, faultnet.Blackhole, faultnet.Slow}
		schedule = nil
		for range 12 {
			schedule = append(schedule, modes[rng.IntN(len(modes))])
		}
		fmt.Printf("partition schedule: seed %d (replay: BOTRUN_SEED=%d make soak): %v\n", seed, seed, schedule)
	}
	for _, backend := range []string{"postgres", "redis"} {
		t.Run(backend, func(t *testing.T) { partition(t, bin, module, backend, schedule) })
	}
}

// proxied is the backend's [durability] keys with its server behind a new
// proxy.
func proxied(t *testing.T, backend string) (string, *faultnet.Proxy) {
	t.Helper()
	var raw string
	switch backend {
	case "postgres":
		raw = testserver.Postgres(t)
	case "redis":
		raw = testserver.Redis(t)
	default:
		t.Fatalf("no proxy for %s", backend)
	}
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
	n := runs.Add(1)
	if backend == "postgres" {
		return fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"part%d_%d_\"", u.String(), os.Getpid(), n), p
	}
	return fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"part%d_%d\"", u.String(), os.Getpid(), n), p
}

func partition(t *testing.T, bin, module, backend string, schedule []faultnet.Mode) {
	keys, proxy := proxied(t, backend)
	dir := t.TempDir()
	addr := freePort(t)
	cfg := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
%s
poll = "50ms"
[durability.inbox]
lease = "3s"
max_attempts = 100
[durability.outbox]
lease = "3s"
[admin]
token = %q
[[channels]]
id = "web"
type = "webchat"
rate_limit = 0
`, module, testDataDir(), addr, keys, killAdminToken)), 0o600)
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, cfg)
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			<-exited
		}
	}()
	if err := waitHealthy(addr, 60*time.Second); err != nil {
		t.Fatalf("botrun did not come up: %v\n%s", err, stderr)
	}

	messages := 100 + 60*len(schedule)
	const chats = 20
	var ref refusals
	var admitted sync.Map
	var count, next atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				i := next.Add(1) - 1
				if i >= int64(messages) {
					return
				}
				text := fmt.Sprintf("msg-%d", i)
				chat := fmt.Sprintf("chat-%d", (int(i)+w)%chats)
				ok := waitfor.Every(20*time.Millisecond, 5*time.Minute, func() bool {
					select {
					case <-stop:
						return true
					default:
					}
					return deliverHonouring(client, addr, text, chat, &ref)
				})
				select {
				case <-stop:
					return
				default:
				}
				if ok {
					admitted.Store(text, chat)
					count.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
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

	var report []string
	for i, mode := range schedule {
		// Some traffic on a healthy link first.
		before := count.Load()
		if !waitfor.True(2*time.Minute, func() bool { return count.Load() >= before+30 }) {
			t.Fatalf("fault %d (%s): the link is up, but only %d messages were admitted in 2 minutes\n%s", i, mode, count.Load()-before, stderr)
		}
		refused := ref.withRetryAfter.Load()
		admittedAt := count.Load()
		start := time.Now()
		switch mode {
		case faultnet.Cut:
			proxy.Cut()
		case faultnet.Blackhole:
			proxy.Blackhole()
		case faultnet.Slow:
			proxy.Slow(30 * time.Millisecond)
		}
		// Held until the bot showed it: refusals for a down link,
		// admissions through a slow one.
		held := waitfor.True(2*time.Minute, func() bool {
			if mode == faultnet.Slow {
				return count.Load() >= admittedAt+20
			}
			return ref.withRetryAfter.Load() >= refused+8
		})
		heldFor := time.Since(start)
		proxy.Heal()
		if !held {
			t.Fatalf("fault %d (%s): held 2 minutes without the bot refusing (or, slow, admitting): %d refusals, %d admitted\n%s", i, mode, ref.withRetryAfter.Load()-refused, count.Load()-admittedAt, stderr)
		}
		healed := time.Now()
		at := count.Load()
		if !waitfor.True(2*time.Minute, func() bool { return count.Load() > at }) {
			t.Fatalf("fault %d (%s): nothing admitted 2 minutes after the link healed\n%s", i, mode, stderr)
		}
		report = append(report, fmt.Sprintf("%s %s (%d refused) resumed in %s", mode, heldFor.Round(100*time.Millisecond), ref.withRetryAfter.Load()-refused, time.Since(healed).Round(10*time.Millisecond)))
	}
	if !waitfor.True(5*time.Minute, func() bool { return count.Load() == int64(messages) }) {
		t.Fatalf("%d of %d messages admitted after the last fault\n%s", count.Load(), messages, stderr)
	}
	wg.Wait()
	if !waitfor.Every(200*time.Millisecond, 3*time.Minute, func() bool { return settled(addr) }) {
		t.Fatalf("not settled after the last fault\n%s", stderr)
	}
	select {
	case err := <-exited:
		t.Fatalf("botrun exited during the test (%v): service must resume without a restart\n%s", err, stderr)
	default:
	}
	all := map[string]string{}
	admitted.Range(func(k, v any) bool { all[k.(string)] = v.(string); return true })
	replies := transcript(t, addr, all)
	o := audit(t, bin, cfg, "webchat", replies, all)
	if o.lost+o.duplicated+o.ambiguous > 0 {
		t.Errorf("lost %d, duplicated %d, ambiguous %d; want 0, 0, 0", o.lost, o.duplicated, o.ambiguous)
	}
	if n := ref.without.Load(); n > 0 {
		t.Errorf("%d refusals without a Retry-After", n)
	}
	if n := ref.noAnswer.Load(); n > 0 {
		t.Errorf("%d deliveries got no answer within the client's 10 s timeout", n)
	}
	fmt.Printf("partition %s: %d messages; %s; slowest refusal %s; lost %d, duplicated %d, ambiguous %d\n",
		backend, messages, strings.Join(report, "; "), time.Duration(ref.slowest.Load()).Round(time.Millisecond), o.lost, o.duplicated, o.ambiguous)
}
