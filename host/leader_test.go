package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// sessionNet is the far side of a leader-only channel: it knows which
// replica's session is connected, and records every send with the replica
// that made it.
type sessionNet struct {
	mu        sync.Mutex
	connected string
	sessions  []string
	overlaps  int
	sent      map[string][]string // key → replicas that sent it
	strays    []string            // sends from a replica without the session
}

func (n *sessionNet) connect(replica string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.connected != "" {
		n.overlaps++
	}
	n.connected = replica
	n.sessions = append(n.sessions, replica)
}

func (n *sessionNet) disconnect(replica string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.connected == replica {
		n.connected = ""
	}
}

func (n *sessionNet) holder() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.connected
}

func (n *sessionNet) delivered(key string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.sent[key]...)
}

// sessionChannel is one replica's end of the leader-only channel
// (channel.SessionRunner).
type sessionChannel struct {
	id, replica string
	net         *sessionNet
}

func (c *sessionChannel) ID() string { return c.id }

func (c *sessionChannel) RunSession(ctx context.Context, fence channel.Fence) {
	c.net.connect(c.replica)
	<-ctx.Done()
	c.net.disconnect(c.replica)
}

func (c *sessionChannel) Send(_ context.Context, out channel.Outbound) (string, error) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if c.net.connected != c.replica {
		c.net.strays = append(c.net.strays, c.replica+" "+out.Key)
		return "", errors.New("not connected")
	}
	if c.net.sent == nil {
		c.net.sent = map[string][]string{}
	}
	c.net.sent[out.Key] = append(c.net.sent[out.Key], c.replica)
	return "ref-" + out.Key, nil
}

// leaderConfig is a bot.toml whose provider "wa" has session = "leader".
func leaderConfig(t *testing.T, instance string) *config.Config {
	t.Helper()
	src := fmt.Sprintf(`[bot]
module = "unused.wasm"
workers = 4
[durability]
instance_id = %q
poll = "5ms"
[durability.inbox]
lease = "2s"
[durability.outbox]
lease = "2s"
inline_max = "60ms"
retries = 1
[[providers]]
id = "wa"
type = "webchat"
session = "leader"
session_lease = "3s"
`, instance)
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// replyOnce answers every event with one send to its chat.
var replyOnce = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "re: " + ev.Text})
	return err
})

// TestLeaderOnlySession runs two replicas of a bot on one backend with a
// leader-only channel: only the leader runs the session, admits and sends;
// the standby's sends (inline, from a handler it runs, and from its
// sweeper) are handed to the leader, delivered once, never charged as
// attempts and never dead; when the leader stops, the standby takes over.
func TestLeaderOnlySession(t *testing.T) {
	shared := memory.New()
	net := &sessionNet{}
	a := newTestBot(t, leaderConfig(t, "replica-a"), shared, replyOnce, &sessionChannel{id: "wa", replica: "replica-a", net: net})
	if !waitFor(60*time.Second, func() bool { return net.holder() == "replica-a" }) {
		t.Fatal("replica-a never led the session")
	}
	b := newTestBot(t, leaderConfig(t, "replica-b"), shared, replyOnce, &sessionChannel{id: "wa", replica: "replica-b", net: net})
	defer b.stop(t)
	ctx := context.Background()

	// The standby admits nothing: the channel redelivers to the leader.
	if _, err := b.Admit(ctx, "wa", channel.Message{ID: "m0", Chat: "c0", From: "u", Text: "hi"}); !errors.Is(err, lease.ErrNotLeader) || !strings.Contains(err.Error(), "ProviderNotLeader") {
		t.Fatalf("the standby admitted a message of the leader's channel: %v", err)
	}
	// An inline send on the standby is journaled for the leader: deferred.
	res, err := b.Send(ctx, "wa", "c1", "inline", "k-inline")
	if err != nil || res.Status != abi.SendDeferred || !strings.Contains(res.Error, "ProviderNotLeader") {
		t.Fatalf("an inline send on the standby: %+v, %v", res, err)
	}
	// An operator's send the standby journals, which its sweeper claims
	// first.
	if _, err := b.Operator().SendLater(ctx, "wa", "c2", "later", "k-later", 0); err != nil {
		t.Fatal(err)
	}
	// A message the leader journaled, handled on the standby (as after a
	// failover): the handler's send is deferred to the leader.
	payload, _ := json.Marshal(rules.Journaled{Event: abi.Event{ID: "wa:m1", Provider: "wa", Chat: "c3", From: "u", Text: "m1", ReceivedAt: nowMs()}})
	l := b.leases.Lease(b.policy.inboxLease)
	if _, _, err := b.inbox.Put(ctx, durability.InboxPut{ID: "wa:m1", Provider: "wa", Chat: "c3", Payload: payload}, l.Now, &l); err != nil {
		t.Fatal(err)
	}
	rec, _ := b.inbox.Get(ctx, "wa:m1")
	b.dispatch.Submit(dispatch.Job{ChatKey: dispatch.ChatKey("wa", "c3"), ID: rec.ID, Claimed: &rec})

	keys := []string{"k-inline", "k-later", "wa:m1:1"}
	for _, k := range keys {
		if !waitFor(60*time.Second, func() bool { return len(net.delivered(k)) > 0 }) {
			t.Fatalf("%s was never delivered: %+v", k, b.outboxRecord(t, k))
		}
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the records never settled")
	}
	for _, k := range keys {
		r := b.outboxRecord(t, k)
		if got := net.delivered(k); len(got) != 1 || got[0] != "replica-a" {
			t.Errorf("%s delivered by %v, want once by replica-a", k, got)
		}
		if r.State != durability.OutboxSent || r.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts, want sent after the leader's one", k, r.State, r.Attempts)
		}
	}
	if m := b.Observer().Metrics(); m.ProviderNotLeader < 3 || m.OutboxDead != 0 {
		t.Errorf("the standby's metrics: provider_not_leader %d (want at least 3), outbox_dead %d", m.ProviderNotLeader, m.OutboxDead)
	}
	if m := a.Observer().Metrics(); m.ProviderNotLeader != 0 || m.OutboxDead != 0 {
		t.Errorf("the leader's metrics: provider_not_leader %d, outbox_dead %d", m.ProviderNotLeader, m.OutboxDead)
	}
	st, err := b.Operator().Status(ctx)
	if err != nil || len(st.Sessions) != 1 || st.Sessions[0].Leader != "replica-a" || st.Sessions[0].Token != 1 {
		t.Fatalf("status: %+v, %v", st, err)
	}

	// The leader stops: the standby takes the session over (the lease is
	// given up on a clean stop), admits and sends.
	a.stop(t)
	if !waitFor(60*time.Second, func() bool { return net.holder() == "replica-b" }) {
		t.Fatal("replica-b never took the session over")
	}
	if _, err := b.Admit(ctx, "wa", channel.Message{ID: "m2", Chat: "c4", From: "u", Text: "m2"}); err != nil {
		t.Fatalf("the new leader refused a message: %v", err)
	}
	if !waitFor(60*time.Second, func() bool { return len(net.delivered("wa:m2:1")) == 1 }) {
		t.Fatal("the new leader never answered")
	}
	if got := net.delivered("wa:m2:1"); got[0] != "replica-b" {
		t.Fatalf("wa:m2:1 delivered by %v", got)
	}
	if st, _ := b.Operator().Status(ctx); st.Sessions[0].Leader != "replica-b" || st.Sessions[0].Token != 2 {
		t.Fatalf("status after the failover: %+v", st.Sessions)
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	if net.overlaps != 0 || len(net.strays) != 0 {
		t.Fatalf("sessions overlapped %d times; sends without the session: %v", net.overlaps, net.strays)
	}
}

// TestLeaderSessionRefusals: what cannot work is refused when the bot is
// built, with the way out.
func TestLeaderSessionRefusals(t *testing.T) {
	// A channel whose background work runs on every replica.
	_, err := New(context.Background(), leaderConfig(t, "r"), Options{Logger: slog.New(slog.DiscardHandler), Backend: memory.New(), Guest: replyOnce,
		Channels: []channel.Channel{runnerChannel{newChannel()}}})
	if err == nil || !strings.Contains(err.Error(), "cannot follow a leader") {
		t.Fatalf("a Runner without a session under session = leader: %v", err)
	}
	// A shared backend without a Kv.
	cfg := leaderConfig(t, "r")
	cfg.Durability.Shared = true
	_, err = New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: noKv{memory.New()}, Guest: replyOnce,
		Channels: []channel.Channel{&sessionChannel{id: "wa", net: &sessionNet{}}}})
	if err == nil || !strings.Contains(err.Error(), "needs a backend that keeps a Kv") {
		t.Fatalf("session = leader on a shared backend without a Kv: %v", err)
	}
}

// TestLeaderSessionWithoutAKvRunsHere: on a backend one process uses and
// that keeps no Kv, the one process leads.
func TestLeaderSessionWithoutAKvRunsHere(t *testing.T) {
	net := &sessionNet{}
	b := newTestBot(t, leaderConfig(t, "r"), noKv{memory.New()}, replyOnce, &sessionChannel{id: "wa", replica: "r", net: net})
	defer b.stop(t)
	if !waitFor(60*time.Second, func() bool { return net.holder() == "r" }) {
		t.Fatal("the session never ran")
	}
	if res, err := b.Send(context.Background(), "wa", "c", "hi", "k"); err != nil || res.Status != abi.SendSent {
		t.Fatalf("a send: %+v, %v", res, err)
	}
}

// runnerChannel is a channel with background work (channel.Runner).
type runnerChannel struct{ *fakeChannel }

func (r runnerChannel) ID() string            { return "wa" }
func (runnerChannel) Run(ctx context.Context) { <-ctx.Done() }

// noKv hides a backend's Kv.
type noKv struct{ durability.Backend }
