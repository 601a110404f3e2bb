package host

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/provider"
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
