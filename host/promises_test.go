package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// downChannel is a channel that answers 503 until down is set to false.
func downChannel() (*fakeChannel, *atomic.Bool) {
	down := &atomic.Bool{}
	down.Store(true)
	ch := newChannel()
	ch.fail = func(int, channel.Outbound) error {
		if down.Load() {
			return errors.New("503 service unavailable")
		}
		return nil
	}
	return ch, down
}

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
		{"handler_timeout<inline_max", time.Second, 3 * time.Second, `{ base = "100ms", cap = "200ms", jitter = 0.0 }`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "retries = 1000\nbackoff = "+c.backoff+"\n")
			cfg.Bot.Module = module
			cfg.Bot.HandlerTimeout = config.Duration(c.handler)
			inline := config.Duration(c.inline)
			cfg.Durability.Outbox.InlineMax = &inline
			ch, down := downChannel()
			b := newTestBot(t, cfg, memory.New(), nil, ch)
			defer b.stop(t)
			b.admit(t, "c1", "m1", "hola")
			if !waitFor(120*time.Second, func() bool { return b.inboxState(t, "web:m1").State.Terminal() }) {
				t.Fatal("the inbound record did not settle during the outage")
			}
			if st := b.inboxState(t, "web:m1").State; st != durability.InboxDone {
				t.Fatalf("inbound record is %s during the outage, want done", st)
			}
			if m := b.Observer().Metrics(); m.OutboxDeferred != 1 || m.InboundDead != 0 {
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
	ch.fail = func(_ int, out channel.Outbound) error {
		if out.Text == "to nobody" {
			return channel.ErrRecipientUnreachable
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
	if !waitFor(60*time.Second, func() bool {
		in, err1 := b.inbox.Get(context.Background(), "web:m1")
		out, err2 := b.outbox.Get(context.Background(), "web:m2:1")
		return err1 == nil && err2 == nil && in.State == durability.InboxDead && out.State == durability.OutboxDead && ch.count("c3", "ok") == 1
	}) {
		t.Fatal("the dead letters and the reply did not settle")
	}
	if !waitFor(60*time.Second, func() bool {
		b.sweeper.Purge(b.baseCtx)
		_, err := b.inbox.Get(context.Background(), "web:m3")
		return errors.Is(err, durability.ErrNotFound)
	}) {
		t.Fatal("retention never purged the done record")
	}
	b.sweeper.Purge(b.baseCtx)
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

// TestScopeSeparatesTenantsAndEnvironments: [bot] tenant, environment and
// connection complete the namespace, so two environments of one bot (or two
// tenants) share one PostgreSQL without seeing each other's records.
func TestScopeSeparatesTenantsAndEnvironments(t *testing.T) {
	shared := backends["postgres"](t)
	run := func(tenant, env, conn string) (*testBot, *fakeChannel) {
		src := fmt.Sprintf("[bot]\nmodule = \"unused.wasm\"\nid = \"shop\"\ntenant = %q\nenvironment = %q\nconnection = %q\n"+fastDurability+"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", tenant, env, conn)
		cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		cfg.Durability.InstanceID = "i-" + tenant + "-" + env + "-" + conn
		ch := newChannel()
		h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
			_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "reminder", IdempotencyKey: "reminder:1"})
			return err
		})
		return newTestBot(t, cfg, shared, h, ch), ch
	}
	suffix := send.RandomID()
	bots := []struct{ tenant, env, conn string }{
		{"acme-" + suffix, "prod", "default"},
		{"acme-" + suffix, "staging", "default"},
		{"globex-" + suffix, "prod", "default"},
		{"acme-" + suffix, "prod", "second-number"},
	}
	for _, s := range bots {
		b, ch := run(s.tenant, s.env, s.conn)
		defer b.stop(t)
		if adm, err := b.admit(t, "c1", "m1", "hi"); err != nil || adm.Duplicate {
			t.Fatalf("%+v: the same message id in another scope is not new: %+v %v", s, adm, err)
		}
		if !b.quiet(1, 60*time.Second) {
			t.Fatalf("%+v: did not settle", s)
		}
		if n := ch.count("c1", "reminder"); n != 1 {
			t.Fatalf("%+v: the explicit key reminder:1 was sent %d times in its own scope, want 1", s, n)
		}
		in, err := b.Operator().ListInbox(context.Background(), durability.ListFilter{})
		if err != nil || len(in) != 1 {
			t.Fatalf("%+v: sees %d inbox records (%v), want only its own", s, len(in), err)
		}
	}
}

// TestControlCharactersRejected: an id, chat or sender with a NUL or another
// control character is refused at admission with ErrInvalidMessage (final:
// no redelivery makes it valid) and nothing is journaled.
func TestControlCharactersRejected(t *testing.T) {
	b := newTestBot(t, testConfig(t, ""), memory.New(), reply("r: "), newChannel())
	defer b.stop(t)
	for _, m := range []channel.Message{
		{ID: "n\x00x", Chat: "c1", From: "u", Text: "x"},
		{ID: "m1", Chat: "n\x00x", From: "u", Text: "x"},
		{ID: "m2", Chat: "c1", From: "u\x1b[31m", Text: "x"},
		{ID: "m3\n", Chat: "c1", From: "u", Text: "x"},
	} {
		if _, err := b.Admit(context.Background(), "web", m); !errors.Is(err, channel.ErrInvalidMessage) {
			t.Fatalf("admit %#v: %v, want ErrInvalidMessage", m, err)
		}
	}
	if in, err := b.Operator().ListInbox(context.Background(), durability.ListFilter{}); err != nil || len(in) != 0 {
		t.Fatalf("journaled %d records (%v), want none", len(in), err)
	}
	// Text may hold any character.
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "ok", Chat: "c1", From: "u", Text: "a\x00b\nc"}); err != nil {
		t.Fatal(err)
	}
}

// TestStateKeysUnambiguous: chat "v/x" with key "a" is not chat "v" with key
// "x/a" (nor is a sender "v/x" the sender "v").
func TestStateKeysUnambiguous(t *testing.T) {
	seen := make(chan string, 10)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		switch ev.Text {
		case "write":
			if err := env.StateSet(ctx, "a", []byte("chat v/x")); err != nil {
				return err
			}
			return env.StateSet(ctx, "user/a", []byte("sender v/x"))
		default:
			_, chatHit, err := env.StateGet(ctx, "x/a")
			if err != nil {
				return err
			}
			_, userHit, err := env.StateGet(ctx, "user/x/a")
			seen <- fmt.Sprint(chatHit, userHit)
			return err
		}
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, newChannel())
	defer b.stop(t)
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "w", Chat: "v/x", From: "v/x", Text: "write"}); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "r", Chat: "v", From: "v", Text: "read"}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "false false" {
		t.Fatalf("chat v read another chat's or sender's state (chat, user hit = %s)", got)
	}
}

// TestChannelOutageDefersLaterSendsWithoutWaiting: once a send of an event is
// deferred, the event's later sends to that channel are journaled for the
// sweeper without waiting inline again (an outage costs a handler one
// outbox.inline_max, not one per send), and all go out once when it is back.
func TestChannelOutageDefersLaterSendsWithoutWaiting(t *testing.T) {
	cfg := testConfig(t, "retries = 1000\ninline_max = \"300ms\"\nbackoff = { base = \"50ms\", cap = \"100ms\", jitter = 0.0 }\n")
	ch, down := downChannel()
	results := make(chan abi.SendResult, 3)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, text := range []string{"one", "two", "three"} {
			res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text})
			if err != nil {
				return err
			}
			results <- res
		}
		return nil
	})
	b := newTestBot(t, cfg, memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	for i, want := range []string{"web:m1:1", "web:m1:2", "web:m1:3"} {
		res := <-results
		if res.Status != abi.SendDeferred || res.Key != want {
			t.Fatalf("send %d: %+v, want deferred %s", i+1, res, want)
		}
		if i > 0 && !strings.Contains(res.Error, "not tried") {
			t.Fatalf("send %d waited inline again: %+v", i+1, res)
		}
	}
	if m := b.Observer().Metrics(); m.OutboxDeferred != 3 {
		t.Fatalf("outbox_deferred = %d, want 3", m.OutboxDeferred)
	}
	down.Store(false)
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("not delivered after the outage")
	}
	for _, text := range []string{"one", "two", "three"} {
		if n := ch.count("c1", text); n != 1 {
			t.Fatalf("%q delivered %d times: %q", text, n, ch.texts())
		}
	}
}
