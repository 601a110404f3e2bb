package whatsappweb_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/kvlease"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"github.com/botrun/botrun/host/channel/whatsappweb/whatsappwebtest"
)

var _ whatsappweb.Client = (*whatsappwebtest.Client)(nil)

// account is the WhatsApp account the fake phone links devices to.
var account = types.NewJID("15550001111", types.DefaultUserServer)

// alice is a user on WhatsApp who writes to the bot.
var alice = types.NewJID("15552223333", types.DefaultUserServer)

// alerts records the alerts a provider raises.
type alerts struct {
	mu  sync.Mutex
	got []string
}

func (a *alerts) raise(name, detail string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, name+": "+detail)
}

func (a *alerts) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

// bot is one provider on a SQLite backend's Kv, with the fake network.
type bot struct {
	t      *testing.T
	net    *whatsappwebtest.Network
	kv     durability.Kv
	cfg    whatsappweb.Config
	env    channel.Env
	p      *whatsappweb.Provider
	admit  *channeltest.Journal
	logs   *fakekit.Log
	alerts *alerts
	stop   func()
	// lease elects the session's holder among bots on one Kv, as the host
	// does (nil without a Kv); waitedFor is the last holder it waited for.
	lease     *kvlease.Lease
	waitedFor atomic.Value
}

// newBot opens a provider "wa" whose session is the SQLite backend's own
// file (the default), with short timings.
func newBot(t *testing.T, net *whatsappwebtest.Network, kv durability.Kv, tweak func(*whatsappweb.Config)) *bot {
	t.Helper()
	if kv == nil {
		s, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "bot.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		kv = s
	}
	b := &bot{t: t, net: net, kv: kv, admit: channeltest.NewJournal(), logs: &fakekit.Log{}, alerts: &alerts{}}
	b.cfg = whatsappweb.Config{ID: "wa",
		NewClient:    func(dev *store.Device, log waLog.Logger) whatsappweb.Client { return net.NewClient(dev, log) },
		UnpairedPoll: 20 * time.Millisecond, MediaRetryWait: 5 * time.Second, RedeliverAfter: 10 * time.Millisecond}
	if tweak != nil {
		tweak(&b.cfg)
	}
	b.env = channel.Env{ID: "wa", Admitter: b.admit, Kv: kv, KeyPrefix: "/bot/default/",
		Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Alert: b.alerts.raise}
	if _, ok := kv.(noKv); ok {
		b.env.Kv = nil
	}
	p, err := whatsappweb.Open(b.cfg, b.env)
	if err != nil {
		t.Fatal(err)
	}
	b.p = p
	if b.env.Kv != nil {
		// Renewed every 3 s and held 6.75 s after the last renewal: a stall
		// of over 3 s on a loaded machine keeps it; nothing waits for one
		// to expire.
		b.lease = kvlease.New(b.env.Kv, b.env.SessionKey(), "", 9*time.Second)
	}
	return b
}

// noKv makes newBot open the provider without a Kv (a backend without one).
type noKv struct{ durability.Kv }

// pair links the session through Pair and the fake phone.
func (b *bot) pair() string {
	b.t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := whatsappweb.Pair(ctx, b.cfg, b.env, whatsappweb.PairOptions{Out: &out}); err != nil {
		b.t.Fatalf("pairing: %v\n%s", err, out.String())
	}
	return out.String()
}

// always is the fence of a session no election guards: always held, token 0.
type always struct{}

func (always) Held() (bool, int64) { return true, 0 }

// run runs the provider's session as the host runs a leader-only one:
// whenever this bot holds the session's lease (always without a Kv); stop
// ends it and waits.
func (b *bot) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if b.lease == nil {
			b.p.RunSession(ctx, always{})
			return
		}
		b.lease.Lead(ctx, func(holder string) { b.waitedFor.Store(holder) }, nil, func(held context.Context) {
			b.p.RunSession(held, b.lease)
		})
	}()
	b.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			b.t.Fatal("Run did not return after its context ended")
		}
	}
	b.t.Cleanup(b.stop)
}

// device is the linked device's JID.
func device() types.JID { return types.NewADJID(account.User, 0, 17) }

// online waits until the session's device is connected, through this bot's
// provider, and returns its client.
func (b *bot) online() *whatsappwebtest.Client {
	b.t.Helper()
	var c *whatsappwebtest.Client
	fakekit.WaitFor(b.t, "the device to connect", func() bool {
		c = b.net.Online(device())
		return c != nil && c.IsLoggedIn() && b.p.Connected()
	})
	return c
}

// connectedBot is a paired, running, connected bot.
func connectedBot(t *testing.T, tweak func(*whatsappweb.Config)) (*bot, *whatsappwebtest.Client) {
	net := whatsappwebtest.NewNetwork(account)
	net.Register(alice.User)
	b := newBot(t, net, nil, tweak)
	b.pair()
	b.run()
	return b, b.online()
}

func errorIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%s does not say %q:\n%s", what, sub, s)
		}
	}
}
