package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestChannelOutageDefersNotDeadLetters: a channel down for longer than both
// bot.handler_timeout and outbox.inline_max must not fault the guest. The
// send ends in "deferred", the inbound record is done, and the sweeper
// delivers the send exactly once when the channel is back.
func TestChannelOutageDefersNotDeadLetters(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/echo")
	for _, c := range []struct {
		name            string
		handler, inline time.Duration
		backoff         string
	}{
		{"defaults", 10 * time.Second, 15 * time.Second, `{ base = "1s", cap = "2s", jitter = 0.0 }`},
		{"handler_timeout<inline_max", 300 * time.Millisecond, 2 * time.Second, `{ base = "100ms", cap = "200ms", jitter = 0.0 }`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "retries = 1000\nbackoff = "+c.backoff+"\n")
			cfg.Bot.Module = module
			cfg.Bot.DataDir = filepath.Join(os.TempDir(), "botrun-test-data")
			cfg.Bot.HandlerTimeout = config.Duration(c.handler)
			cfg.Durability.Outbox.InlineMax = config.Duration(c.inline)
			var down atomic.Bool
			down.Store(true)
			ch := newChannel()
			ch.fail = func(int, provider.Outbound) error {
				if down.Load() {
					return errors.New("503 service unavailable")
				}
				return nil
			}
			b := newTestBot(t, cfg, memory.New(), nil, ch)
			defer b.stop(t)
			b.admit(t, "c1", "m1", "hola")
			if !waitFor(120*time.Second, func() bool { return b.inboxState(t, "web:m1").State.Terminal() }) {
				t.Fatal("the inbound record did not settle during the outage")
			}
			if st := b.inboxState(t, "web:m1").State; st != durability.InboxDone {
				t.Fatalf("inbound record is %s during the outage, want done", st)
			}
			if m := b.Metrics(); m.OutboxDeferred != 1 || m.InboundDead != 0 {
				t.Fatalf("outbox_deferred = %d, inbound_dead = %d; want 1 and 0", m.OutboxDeferred, m.InboundDead)
			}
			if n := ch.count("c1", "echo: hola"); n != 0 {
				t.Fatalf("delivered %d times while the channel was down", n)
			}
			down.Store(false)
			if !b.quiet(1, 60*time.Second) {
				t.Fatal("the send was not delivered after the channel came back")
			}
			if n := ch.count("c1", "echo: hola"); n != 1 {
				t.Fatalf("delivered %d times, want exactly once: %q", n, ch.texts())
			}
			if r := b.outboxRecord(t, "web:m1:1"); r.State != durability.OutboxSent {
				t.Fatalf("send is %s, want sent", r.State)
			}
		})
	}
}

// TestRetentionKeepsDeadLetters: retention purges done and sent records only;
// a dead letter (inbound or outbound) and an unknown send stay until an
// operator retries or discards them.
func TestRetentionKeepsDeadLetters(t *testing.T) {
	cfg := testConfig(t, "[durability]\nretention = \"1ms\"\n")
	ch := newChannel()
	ch.fail = func(_ int, out provider.Outbound) error {
		if out.Text == "to nobody" {
			return provider.ErrRecipientUnreachable
		}
		return nil
	}
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		switch ev.Text {
		case "poison":
			return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("unreachable")}
		case "dead send":
			_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "to nobody"})
			return err
		}
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "ok"})
		return err
	})
	b := newTestBot(t, cfg, memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "poison")
	b.admit(t, "c2", "m2", "dead send")
	b.admit(t, "c3", "m3", "fine")
	if !waitFor(30*time.Second, func() bool {
		in, err1 := b.inbox.Get(context.Background(), "web:m1")
		out, err2 := b.outbox.Get(context.Background(), "web:m2:1")
		return err1 == nil && err2 == nil && in.State == durability.InboxDead && out.State == durability.OutboxDead && ch.count("c3", "ok") == 1
	}) {
		t.Fatal("the dead letters and the reply did not settle")
	}
	if !waitFor(30*time.Second, func() bool {
		b.purge()
		_, err := b.inbox.Get(context.Background(), "web:m3")
		return errors.Is(err, durability.ErrNotFound)
	}) {
		t.Fatal("retention never purged the done record")
	}
	b.purge()
	if r := b.inboxState(t, "web:m1"); r.State != durability.InboxDead {
		t.Fatalf("inbound dead letter is %s", r.State)
	}
	if r := b.outboxRecord(t, "web:m2:1"); r.State != durability.OutboxDead {
		t.Fatalf("outbound dead letter is %s", r.State)
	}
	if _, err := b.outbox.Get(context.Background(), "web:m3:1"); !errors.Is(err, durability.ErrNotFound) {
		t.Fatalf("the sent record was not purged: %v", err)
	}
}
