package host

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/wasm"
)

// native is a Handler written in Go, standing in for a module in tests of the
// host's durability (the WASM path has its own end-to-end tests).
type native func(ctx context.Context, ev abi.Event, env wasm.Env) error

func (f native) Handle(ctx context.Context, ev abi.Event, env wasm.Env) error { return f(ctx, ev, env) }
func (f native) Digest() string                                              { return "native" }

// echoTwice replies "echo: <text>" and then "bye: <text>".
var echoTwice = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	for _, prefix := range []string{"echo: ", "bye: "} {
		if _, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: prefix + ev.Text}); err != nil {
			return err
		}
	}
	return nil
})

type delivery struct{ Chat, Text string }

// channel is a fake channel that records what it accepted; fail, when set,
// decides the outcome of each call (n counts calls from 1).
type channel struct {
	id    string
	limit int

	mu        sync.Mutex
	calls     int
	delivered []delivery
	fail      func(n int, out provider.Outbound) error
}

func newChannel() *channel { return &channel{id: "web"} }

func (c *channel) ID() string { return c.id }

func (c *channel) Send(_ context.Context, out provider.Outbound) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.fail != nil {
		if err := c.fail(c.calls, out); err != nil {
			return "", err
		}
	}
	c.delivered = append(c.delivered, delivery{out.Chat, out.Text})
	return fmt.Sprint("ref-", len(c.delivered)), nil
}

func (c *channel) count(chat, text string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.delivered {
		if d.Chat == chat && d.Text == text {
			n++
		}
	}
	return n
}

func (c *channel) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, d := range c.delivered {
		out = append(out, d.Text)
	}
	return out
}

// limited is a channel with a text limit.
type limited struct{ *channel }

func (l limited) TextLimit() int { return l.limit }

// crashProvider is the crashable provider: its sends run under the crash plan
// ("provider.send"), and after the crash nothing goes out.
type crashProvider struct {
	ch    *channel
	crash *durabilitytest.Crashable
}

func (p crashProvider) ID() string { return p.ch.id }

func (p crashProvider) Send(ctx context.Context, out provider.Outbound) (string, error) {
	var ref string
	err := p.crash.Call("provider.send", func() error {
		var err error
		ref, err = p.ch.Send(ctx, out)
		return err
	})
	return ref, err
}

const fastDurability = `
[durability]
instance_id = "i1"
poll = "5ms"
[durability.inbox]
lease = "2s"
max_attempts = 3
backoff = { base = "5ms", cap = "20ms", jitter = 0.0 }
[durability.outbox]
lease = "2s"
inline_max = "60ms"
retries = 3
`

// testConfig parses a bot.toml made of fastDurability and extra (which may
// override whole sections it does not share with it).
func testConfig(t testing.TB, extra string) *config.Config {
	t.Helper()
	src := "[bot]\nmodule = \"unused.wasm\"\nworkers = 2\n" + fastDurability + extra + "\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type testBot struct {
	*Bot
	events chan Event
}

func newTestBot(t testing.TB, cfg *config.Config, backend durability.Backend, h Handler, provs ...provider.Provider) *testBot {
	t.Helper()
	b, err := New(context.Background(), cfg, Options{
		Logger:    slog.New(slog.DiscardHandler),
		Backend:   backend,
		Handler:   h,
		Providers: provs,
	})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBot{Bot: b, events: make(chan Event, 1000)}
	b.OnEvent(func(e Event) {
		select {
		case tb.events <- e:
		default:
		}
	})
	b.Start()
	return tb
}

func (b *testBot) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Error(err)
	}
}

func (b *testBot) admit(t testing.TB, chat, id, text string) (provider.Admission, error) {
	t.Helper()
	return b.Admit(context.Background(), "web", provider.Message{ID: id, Chat: chat, From: "u", Text: text})
}

// quiet waits until every inbox record is done or dead and every send is
// settled, with at least wantInbox inbox records; it reports whether that
// happened within timeout.
func (b *testBot) quiet(wantInbox int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b.settled(wantInbox) {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

func (b *testBot) settled(wantInbox int) bool {
	ctx := context.Background()
	in, err := b.ListInbox(ctx, durability.ListFilter{})
	if err != nil || len(in) < wantInbox {
		return false
	}
	for _, r := range in {
		if !r.State.Terminal() {
			return false
		}
	}
	out, err := b.ListOutbox(ctx, durability.ListFilter{})
	if err != nil {
		return false
	}
	for _, r := range out {
		if !r.State.Terminal() {
			return false
		}
	}
	return true
}

func (b *testBot) inboxState(t testing.TB, id string) durability.InboxRecord {
	t.Helper()
	r, err := b.inbox.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("inbox %s: %v", id, err)
	}
	return r
}

func (b *testBot) outboxRecord(t testing.TB, key string) durability.OutboxRecord {
	t.Helper()
	r, err := b.outbox.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("outbox %s: %v", key, err)
	}
	return r
}
