package host

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
	"github.com/botrun/botrun/unit"
)

// native is a Guest written in Go, standing in for a module in tests of the
// host's durability (the WASM path has its own end-to-end tests).
type native func(ctx context.Context, ev abi.Event, env wasm.Env) error

func (f native) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	return "native", f(ctx, ev, env)
}
func (f native) Digest() string { return "native" }

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
type fakeChannel struct {
	id    string
	limit int

	mu        sync.Mutex
	calls     int
	delivered []delivery
	fail      func(n int, out channel.Outbound) error
	// dedupe makes the channel deduplicate on the send's key, as a gateway
	// honouring Idempotency-Key does; keys holds each delivered key's ref.
	dedupe bool
	keys   map[string]string
}

func newChannel() *fakeChannel { return &fakeChannel{id: "web"} }

func (c *fakeChannel) ID() string { return c.id }

func (c *fakeChannel) Send(_ context.Context, out channel.Outbound) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.fail != nil {
		if err := c.fail(c.calls, out); err != nil {
			return "", err
		}
	}
	if ref, ok := c.keys[out.Key]; ok && c.dedupe && out.Key != "" {
		return ref, nil // a repeated key: the first answer, nothing sent
	}
	c.delivered = append(c.delivered, delivery{out.Chat, out.Text})
	ref := fmt.Sprint("ref-", len(c.delivered))
	if c.keys == nil {
		c.keys = map[string]string{}
	}
	c.keys[out.Key] = ref
	return ref, nil
}

// idempotentChannel is a channel that deduplicates on the send's key and
// says so (channel.Idempotent).
type idempotentChannel struct{ *fakeChannel }

func (idempotentChannel) IdempotentSends() bool { return true }

// reconcilingChannel is a channel that can say whether it delivered a key
// (channel.Reconciler).
type reconcilingChannel struct{ *fakeChannel }

func (r reconcilingChannel) Reconcile(_ context.Context, msg channel.Outbound) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[msg.Key]
	return ok, nil
}

func (c *fakeChannel) count(chat, text string) int {
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

func (c *fakeChannel) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, d := range c.delivered {
		out = append(out, d.Text)
	}
	return out
}

// limited is a channel with a text limit.
type limited struct{ *fakeChannel }

func (l limited) TextLimits(channel.Outbound) (chars, bytes int) { return l.limit, 0 }

// crashProvider is the crashable provider: its sends run under the crash plan
// ("channel.send"), and after the crash nothing goes out.
type crashProvider struct {
	ch    *fakeChannel
	crash *crashpoint.Backend
}

func (p crashProvider) ID() string { return p.ch.id }

func (p crashProvider) Send(ctx context.Context, out channel.Outbound) (string, error) {
	var ref string
	err := p.crash.Call("channel.send", func() error {
		var err error
		ref, err = p.ch.Send(ctx, out)
		return err
	})
	return ref, err
}

const fastDurability = `
[durability]
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

// testConfig parses a bot.toml made of fastDurability and extra (keys of
// [durability.outbox], or whole other sections), with instance id "i1".
func testConfig(t testing.TB, extra string) *config.Config {
	t.Helper()
	cfg := testConfigRaw(t, extra)
	cfg.Durability.InstanceID = "i1"
	return cfg
}

// testConfigRaw is testConfig with the config's default instance id.
func testConfigRaw(t testing.TB, extra string) *config.Config {
	t.Helper()
	cfg, err := parseConfig(t, extra)
	if err != nil {
		t.Fatal(err)
	}
	// The shared compile cache: each guest compiles once per machine, not
	// once per bot (under -race a Go guest takes seconds to compile).
	cfg.Bot.DataDir = filepath.Dir(testCacheDir)
	return cfg
}

func parseConfig(t testing.TB, extra string) (*config.Config, error) {
	src := "[bot]\nmodule = \"unused.wasm\"\nworkers = 2\n" + mergeTOML(fastDurability, extra) + "\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"
	return config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
}

// mergeTOML overlays extra on base, table by table and key by key. Lines of
// extra before any table header belong to [durability.outbox].
func mergeTOML(base, extra string) string {
	type table struct {
		name string
		keys []string
		line map[string]string
	}
	var order []*table
	byName := map[string]*table{}
	add := func(src, first string) {
		cur := first
		for _, l := range strings.Split(src, "\n") {
			l = strings.TrimSpace(l)
			switch {
			case l == "":
			case strings.HasPrefix(l, "["):
				cur = l
			default:
				tb := byName[cur]
				if tb == nil {
					tb = &table{name: cur, line: map[string]string{}}
					byName[cur] = tb
					order = append(order, tb)
				}
				k := strings.TrimSpace(strings.SplitN(l, "=", 2)[0])
				if _, ok := tb.line[k]; !ok {
					tb.keys = append(tb.keys, k)
				}
				tb.line[k] = l
			}
		}
	}
	add(base, "[durability]")
	add(extra, "[durability.outbox]")
	var b strings.Builder
	for _, tb := range order {
		b.WriteString(tb.name + "\n")
		for _, k := range tb.keys {
			b.WriteString(tb.line[k] + "\n")
		}
	}
	return b.String()
}

func parseErr(t testing.TB, extra string) error {
	_, err := parseConfig(t, extra)
	return err
}

func duration(t testing.TB, s string) config.Duration {
	t.Helper()
	d, err := unit.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return config.Duration(d)
}

type testBot struct {
	*Bot
	events chan observe.Alert
}

func newTestBot(t testing.TB, cfg *config.Config, backend durability.Backend, h Guest, provs ...channel.Channel) *testBot {
	t.Helper()
	return newTestBotWith(t, cfg, Options{Backend: backend, Guest: h, Channels: provs})
}

// newTestBotWith starts a bot of cfg with opts (its logs discarded).
func newTestBotWith(t testing.TB, cfg *config.Config, opts Options) *testBot {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	b, err := New(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBot{Bot: b, events: make(chan observe.Alert, 1000)}
	b.Observer().OnAlert(func(e observe.Alert) {
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

func (b *testBot) admit(t testing.TB, chat, id, text string) (channel.Admission, error) {
	t.Helper()
	return b.Admit(context.Background(), "web", channel.Message{ID: id, Chat: chat, From: "u", Text: text})
}

// quiet waits until every inbox record is done or dead and every send is
// settled, with at least wantInbox inbox records; it reports whether that
// happened within timeout.
func (b *testBot) quiet(wantInbox int, timeout time.Duration) bool {
	return waitfor.Every(2*time.Millisecond, timeout, func() bool { return b.settled(wantInbox) })
}

// sweeps waits until b's sweeper has finished n more sweeps: what a test
// waits for before it checks that nothing more happened.
func (b *testBot) sweeps(t testing.TB, n int64) {
	t.Helper()
	want := b.sweeper.Sweeps() + n
	if !waitfor.True(time.Minute, func() bool { return b.sweeper.Sweeps() >= want }) {
		t.Fatalf("the sweeper did not sweep %d more times in a minute (at %d)", n, b.sweeper.Sweeps())
	}
}

// nextMilli waits until the wall clock is past the next millisecond, so that
// a bot started now stamps its leases strictly after a crashed one's last.
func nextMilli(t testing.TB) {
	t.Helper()
	now := time.Now().UnixMilli()
	if !waitfor.Every(100*time.Microsecond, time.Minute, func() bool { return time.Now().UnixMilli() > now+1 }) {
		t.Fatal("the wall clock did not move for a minute")
	}
}

func (b *testBot) settled(wantInbox int) bool {
	ctx := context.Background()
	in, err := b.Operator().ListInbox(ctx, durability.ListFilter{})
	if err != nil || len(in) < wantInbox {
		return false
	}
	for _, r := range in {
		if !r.State.Terminal() {
			return false
		}
	}
	out, err := b.Operator().ListOutbox(ctx, durability.ListFilter{})
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

// hooked wraps a backend's inbox to fail Put, or to freeze the bot: its lease
// extensions and sweeps do nothing (a SIGSTOPped process writes nothing).
type hooked struct {
	durability.Backend
	failPut func() error
	frozen  bool
}

func (h *hooked) Open(ctx context.Context, s durability.Scope) (durability.Journals, error) {
	j, err := h.Backend.Open(ctx, s)
	j.Inbox = &hookedInbox{InboxJournal: j.Inbox, h: h}
	return j, err
}

func (h *hooked) Close() error { return nil }

type hookedInbox struct {
	durability.InboxJournal
	h *hooked
}

func (i *hookedInbox) Put(ctx context.Context, r durability.InboxPut, now int64, l *durability.Lease) (durability.PutStatus, durability.InboxRecord, error) {
	if i.h.failPut != nil {
		if err := i.h.failPut(); err != nil {
			return "", durability.InboxRecord{}, err
		}
	}
	return i.InboxJournal.Put(ctx, r, now, l)
}

func (i *hookedInbox) Extend(ctx context.Context, id string, token, until int64) error {
	if i.h.frozen {
		return nil
	}
	return i.InboxJournal.Extend(ctx, id, token, until)
}

func (i *hookedInbox) ClaimDue(ctx context.Context, o durability.ClaimOptions) ([]durability.InboxRecord, error) {
	if i.h.frozen {
		return nil, nil
	}
	return i.InboxJournal.ClaimDue(ctx, o)
}

// waitFor polls cond every 2ms until it holds or timeout passes (wait.For).
func waitFor(timeout time.Duration, cond func() bool) bool { return waitfor.True(timeout, cond) }

var discard = slog.New(slog.DiscardHandler)

// testCacheDir is the wasm compilation cache of the engines the tests open
// themselves; the bots of data_dir "botrun-test-data" share it too, so each
// guest compiles once per machine, not once per test.
var testCacheDir = wasmbuild.CacheDir

// nowMs is the wall clock in Unix milliseconds.
func nowMs() int64 { return time.Now().UnixMilli() }
