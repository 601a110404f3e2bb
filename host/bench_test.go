package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/file"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// counter is a channel that only counts what it accepts.
type counter struct{ n atomic.Int64 }

func (c *counter) ID() string { return "web" }
func (c *counter) Send(context.Context, channel.Outbound) (string, error) {
	return fmt.Sprint(c.n.Add(1)), nil
}

// BenchmarkDurableEcho measures durable end-to-end messages per second:
// admission (inbox journal) → claim → the Go echo guest → one reply (outbox
// journal, channel, sent) → done, over 256 chats, on each embedded backend. It
// prints the sqlite-FULL/memory ratio measured in the same run.
func BenchmarkDurableEcho(b *testing.B) {
	module := wasmbuild.Go(b, "../examples/echo")
	rates := map[string]float64{}
	for _, bk := range []struct {
		name string
		open func(dir string) (durability.Backend, error)
	}{
		{"memory", func(string) (durability.Backend, error) { return memory.New(), nil }},
		{"sqlite-full", func(dir string) (durability.Backend, error) {
			return sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(dir, "bot.db"), Synchronous: "full"})
		}},
		{"sqlite-normal", func(dir string) (durability.Backend, error) {
			return sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(dir, "bot.db"), Synchronous: "normal"})
		}},
		{"file", func(dir string) (durability.Backend, error) {
			return file.Open(context.Background(), file.Options{Path: filepath.Join(dir, "bot.journal"), AppendLog: true})
		}},
	} {
		b.Run(bk.name, func(b *testing.B) {
			backend, err := bk.open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer backend.Close()
			cfg := testConfig(b, "[durability]\npoll = \"1s\"\n")
			cfg.Bot.Module, cfg.Bot.Workers = module, benchWorkers()
			ch := &counter{}
			bot, err := New(context.Background(), cfg, Options{Backend: backend, Channels: []channel.Channel{ch}, Logger: discard})
			if err != nil {
				b.Fatal(err)
			}
			bot.Start()
			defer bot.Stop(context.Background())
			admit := func(from, to int64) {
				next := atomic.Int64{}
				next.Store(from)
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						for {
							i := next.Add(1) - 1
							if i >= to {
								return
							}
							err := admitRetrying(bot, channel.Message{ID: fmt.Sprint(i), Chat: fmt.Sprint("c", i%256), Text: "hi"})
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				for ch.n.Load() < to || !bot.dispatch.Idle() {
					time.Sleep(time.Millisecond)
				}
			}
			// Warm up: every worker's instance exists before the clock starts.
			warm := int64(4 * cfg.Bot.Workers)
			admit(-warm, 0)
			ch.n.Store(0)
			b.ResetTimer()
			start := time.Now()
			admit(0, int64(b.N))
			elapsed := time.Since(start)
			b.StopTimer()
			rate := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rate, "msg/s")
			rates[bk.name] = rate
		})
	}
	if m, s := rates["memory"], rates["sqlite-full"]; m > 0 && s > 0 {
		fmt.Printf("durable echo msg/s: memory %.0f, sqlite-full %.0f, sqlite-normal %.0f, file %.0f; sqlite-full/memory ratio %.2f\n",
			m, s, rates["sqlite-normal"], rates["file"], s/m)
	}
}

// admitRetrying admits m as a channel would: refused while the admission
// queue is full, it is delivered again a moment later.
func admitRetrying(bot *Bot, m channel.Message) error {
	for {
		_, err := bot.Admit(context.Background(), "web", m)
		if !errors.Is(err, ErrQueueFull) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// benchWorkers is bot.workers for the benchmark (BOTRUN_BENCH_WORKERS, default
// 64): enough chats in flight to keep both cores busy and commits grouped.
func benchWorkers() int {
	if n, err := strconv.Atoi(os.Getenv("BOTRUN_BENCH_WORKERS")); err == nil && n > 0 {
		return n
	}
	return 64
}

// BenchmarkReplicas measures durable end-to-end messages/s on the shared
// backends with one replica and with three (each its own connection pool or
// client, as separate processes would have), chats split between them.
func BenchmarkReplicas(b *testing.B) {
	module := wasmbuild.Go(b, "../examples/echo")
	rates := map[string]float64{}
	for _, bk := range []struct {
		name string
		open func(prefix string) (durability.Backend, error)
	}{
		{"postgres", func(prefix string) (durability.Backend, error) {
			return postgres.Open(context.Background(), postgres.Options{URL: testserver.Postgres(b), TablePrefix: prefix})
		}},
		{"redis", func(prefix string) (durability.Backend, error) {
			return redis.Open(context.Background(), redis.Options{URL: testserver.Redis(b), Prefix: prefix})
		}},
	} {
		for _, n := range []int{1, 3} {
			name := fmt.Sprintf("%s/replicas=%d", bk.name, n)
			b.Run(name, func(b *testing.B) {
				prefix := uniquePrefix("bench")
				ch := &counter{}
				var bots []*Bot
				for i := range n {
					backend, err := bk.open(prefix)
					if err != nil {
						b.Fatal(err)
					}
					defer backend.Close()
					cfg := testConfig(b, "[durability]\npoll = \"1s\"\n")
					cfg.Bot.Module, cfg.Bot.Workers = module, 32
					cfg.Durability.InstanceID = fmt.Sprint("replica-", i)
					bot, err := New(context.Background(), cfg, Options{Backend: backend, Channels: []channel.Channel{ch}, Logger: discard})
					if err != nil {
						b.Fatal(err)
					}
					bot.Start()
					defer bot.Stop(context.Background())
					bots = append(bots, bot)
				}
				admit := func(from, to int64) {
					var next atomic.Int64
					next.Store(from)
					var wg sync.WaitGroup
					for range 64 {
						wg.Go(func() {
							for {
								i := next.Add(1) - 1
								if i >= to {
									return
								}
								chat := (i%256 + 256) % 256
								bot := bots[chat%int64(n)]
								if err := admitRetrying(bot, channel.Message{ID: fmt.Sprint(i), Chat: fmt.Sprint("c", chat), Text: "hi"}); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					for ch.n.Load() < to {
						time.Sleep(time.Millisecond)
					}
					for _, bot := range bots {
						for !bot.dispatch.Idle() {
							time.Sleep(time.Millisecond)
						}
					}
				}
				warm := int64(4 * 32 * n)
				admit(-warm, 0)
				ch.n.Store(0)
				b.ResetTimer()
				start := time.Now()
				admit(0, int64(b.N))
				rate := float64(b.N) / time.Since(start).Seconds()
				b.StopTimer()
				b.ReportMetric(rate, "msg/s")
				rates[name] = rate
			})
		}
	}
	fmt.Printf("durable echo msg/s on shared backends: postgres %.0f (1 replica) %.0f (3 replicas); redis %.0f (1) %.0f (3)\n",
		rates["postgres/replicas=1"], rates["postgres/replicas=3"], rates["redis/replicas=1"], rates["redis/replicas=3"])
}

// parked is a handler that never finishes an event until released: the bot
// that admits the backlog dies with every record unfinished.
type parked struct{ release chan struct{} }

func (p parked) Handle(ctx context.Context, _ abi.Event, _ wasm.Env) (string, error) {
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return "parked", ctx.Err()
}
func (parked) Digest() string { return "parked" }

// ordered counts replies "echo: <n>" and checks each chat's come in order.
type ordered struct {
	counter
	mu   sync.Mutex
	last map[string]int
	bad  []string
}

func (o *ordered) Send(ctx context.Context, out channel.Outbound) (string, error) {
	n, _ := strconv.Atoi(strings.TrimPrefix(out.Text, "echo: "))
	o.mu.Lock()
	if last, ok := o.last[out.Chat]; ok && n <= last && len(o.bad) < 5 {
		o.bad = append(o.bad, fmt.Sprintf("chat %s: reply %d after %d", out.Chat, n, last))
	}
	o.last[out.Chat] = n
	o.mu.Unlock()
	return o.counter.Send(ctx, out)
}

// check reports replies out of their chat's order.
func (o *ordered) check() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.bad) > 0 {
		return fmt.Errorf("replies out of order (or twice): %s", strings.Join(o.bad, "; "))
	}
	return nil
}

// BenchmarkRestartBacklog measures how long a restart takes to settle 10,000
// inbound records a crashed process left unfinished (admitted, claimed, not
// handled), on SQLite FULL with the Go echo guest and the default workers and
// instances: from Start until every record is done and its reply sent. Each
// chat's replies must come in its messages' order, each once.
func BenchmarkRestartBacklog(b *testing.B) {
	module := wasmbuild.Go(b, "../examples/echo")
	const backlog = 10000
	path := filepath.Join(b.TempDir(), "bot.db")
	open := func() durability.Backend {
		backend, err := sqlite.Open(context.Background(), sqlite.Options{Path: path, Synchronous: "full"})
		if err != nil {
			b.Fatal(err)
		}
		return backend
	}
	cfg := testConfig(b, "[durability]\npoll = \"1s\"\n")
	// The defaults of bot.toml: 64 chats in flight on 8 instances.
	cfg.Bot.Module, cfg.Bot.Workers, cfg.Bot.Instances, cfg.Bot.MaxQueue = module, 64, 8, 2*backlog
	// The first process admits the backlog and dies before handling it.
	backend := open()
	p := parked{release: make(chan struct{})}
	crashed, err := New(context.Background(), cfg, Options{Backend: backend, Guest: p, Channels: []channel.Channel{&counter{}}, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	crashed.Start()
	for i := range backlog {
		if err := admitRetrying(crashed, channel.Message{ID: fmt.Sprint(i), Chat: fmt.Sprint("c", i%256), Text: fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
	}
	crashed.Kill()
	close(p.release)
	backend.Close()
	// The restart.
	ch := &ordered{last: map[string]int{}}
	backend = open()
	defer backend.Close()
	bot, err := New(context.Background(), cfg, Options{Backend: backend, Channels: []channel.Channel{ch}, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	bot.Start()
	defer bot.Stop(context.Background())
	deadline := start.Add(5 * time.Minute)
	for ch.n.Load() < backlog || !bot.dispatch.Idle() {
		if time.Now().After(deadline) {
			b.Fatalf("after 5 minutes %d of %d replies", ch.n.Load(), backlog)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := ch.check(); err != nil {
		b.Fatal(err)
	}
	for _, state := range []durability.InboxState{durability.InboxPending, durability.InboxProcessing, durability.InboxFailed} {
		left, err := bot.inbox.List(context.Background(), durability.ListFilter{State: string(state), Limit: 10})
		if err != nil || len(left) > 0 {
			b.Fatalf("records left %s: %d, %v", state, len(left), err)
		}
	}
	b.ReportMetric(elapsed.Seconds(), "s-to-settle")
	fmt.Printf("restart with %d unfinished inbound records (sqlite FULL, workers=%d, instances=%d): settled in %.1fs (goal <= 10s)\n", backlog, cfg.Bot.Workers, cfg.Bot.Instances, elapsed.Seconds())
}
