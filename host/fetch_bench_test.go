package host

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// BenchmarkFetch measures what an API call costs a turn, on SQLite FULL
// with the defaults: messages/s of the orders example (one API call and
// one reply per message) with journal = true and journal = false, against
// the echo (one reply, no call); the API answers at once.
func BenchmarkFetch(b *testing.B) { benchFetch(b, false) }

// BenchmarkFetchWaits: 64 chats whose handlers each wait on an API that
// answers after 2 s, with the default 8 instances: the time until all 64
// are answered (run it with -benchtime=1x).
func BenchmarkFetchWaits(b *testing.B) { benchFetch(b, true) }

func benchFetch(b *testing.B, waits bool) {
	orders, echo := wasmbuild.Go(b, "../examples/orders"), wasmbuild.Go(b, "../examples/echo")
	var delay time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.Write([]byte("shipped"))
	}))
	defer srv.Close()
	open := func(b *testing.B, module string, journal bool, workers int) (*Bot, *counter) {
		backend, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(b.TempDir(), "bot.db")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { backend.Close() })
		cfg := testConfig(b, "[durability]\npoll = \"1s\"\n")
		cfg.Bot.Module, cfg.Bot.Workers, cfg.Bot.Instances = module, workers, 8
		api := testAPI("orders", srv.URL, "", 10*time.Second, journal)
		retries := 2
		api.Retries = &retries
		cfg.APIs = []config.API{api}
		ch := &counter{}
		bot, err := New(context.Background(), cfg, Options{Backend: backend, Channels: []channel.Channel{ch}, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		bot.Start()
		b.Cleanup(func() { bot.Stop(context.Background()) })
		return bot, ch
	}
	// run admits messages from..to (ids unique to the bot) and waits until
	// ch has to-from more replies.
	run := func(b *testing.B, bot *Bot, ch *counter, from, to int, text string) time.Duration {
		start, want := time.Now(), ch.n.Load()+int64(to-from)
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Go(func() {
				if err := admitRetrying(bot, channel.Message{ID: fmt.Sprint(i), Chat: fmt.Sprint("c", i%256), Text: text}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		for ch.n.Load() < want || !bot.dispatch.Idle() {
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	if waits {
		bot, ch := open(b, orders, false, 64)
		delay = 2 * time.Second
		defer func() { delay = 0 }()
		var elapsed time.Duration
		for i := range b.N {
			elapsed = run(b, bot, ch, i*64, (i+1)*64, "order 42")
		}
		b.ReportMetric(elapsed.Seconds(), "s/64-calls")
		fmt.Printf("64 handlers waiting 2 s on an API, 8 instances: all answered in %.2f s\n", elapsed.Seconds())
		return
	}
	rates := map[string]float64{}
	for _, v := range []struct {
		name    string
		module  string
		journal bool
	}{{"echo", echo, false}, {"fetch-journal", orders, true}, {"fetch-no-journal", orders, false}} {
		b.Run(v.name, func(b *testing.B) {
			bot, ch := open(b, v.module, v.journal, 64)
			run(b, bot, ch, -256, 0, "order 42") // warm: every instance exists
			b.ResetTimer()
			elapsed := run(b, bot, ch, 0, b.N, "order 42")
			b.StopTimer()
			rates[v.name] = float64(b.N) / elapsed.Seconds()
			b.ReportMetric(rates[v.name], "msg/s")
		})
	}
	if rates["echo"] > 0 && rates["fetch-journal"] > 0 {
		fmt.Printf("sqlite FULL msg/s: echo %.0f, one API call journaled %.0f, not journaled %.0f\n",
			rates["echo"], rates["fetch-journal"], rates["fetch-no-journal"])
	}
}
