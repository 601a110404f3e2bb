package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// The seed's configuration table, one test per option (config defaults and
// parsing are in host/config).

func reply(text string) Guest {
	return native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text + ev.Text})
		return err
	})
}

func TestOption_Backend_DefaultMemoryAndUnknownRefused(t *testing.T) {
	cfg := testConfig(t, "")
	if cfg.Durability.Backend != "memory" {
		t.Fatalf("backend = %q", cfg.Durability.Backend)
	}
	b := newTestBot(t, cfg, nil, reply("r: "), newChannel())
	b.stop(t)
	if _, err := parseConfig(t, "[durability]\nbackend = \"redis\""); err == nil || !strings.Contains(err.Error(), "durability.url: missing") {
		t.Fatalf("redis without a url: err = %v", err)
	}
	if _, err := parseConfig(t, "[durability]\nbackend = \"mysql\""); err == nil || !strings.Contains(err.Error(), `unknown backend "mysql" (want one of `+strings.Join(durability.Drivers(), ", ")+`)`) {
		t.Fatalf("unknown backend: err = %v", err)
	}
	cfg.Durability.Options = nil // a program that registers no backend of that name
	_, err := New(context.Background(), cfg, Options{Guest: reply("")})
	if err == nil || !strings.Contains(err.Error(), `has no backend options`) {
		t.Fatalf("err = %v", err)
	}
}

func TestOption_InstanceID_DefaultOwnsTheLeases(t *testing.T) {
	cfg := testConfigRaw(t, "")
	host, _ := os.Hostname()
	if want := host + "/bot/default"; cfg.Durability.InstanceID != want {
		t.Fatalf("default instance_id = %q, want %q", cfg.Durability.InstanceID, want)
	}
	released := make(chan struct{})
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error { <-released; return nil })
	b := newTestBot(t, cfg, memory.New(), h, newChannel())
	b.admit(t, "c1", "m1", "x")
	waitFor(60*time.Second, func() bool { return b.inboxState(t, "web:m1").State == durability.InboxProcessing })
	if r := b.inboxState(t, "web:m1"); r.Owner != host+"/bot/default" {
		t.Fatalf("owner = %q", r.Owner)
	}
	close(released)
	b.stop(t)
}

func TestOption_FailOpen(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("fail_open=", open), func(t *testing.T) {
			cfg := testConfig(t, fmt.Sprintf("[durability]\nfail_open = %v\n", open))
			back := &hooked{Backend: memory.New(), failPut: func() error { return errors.New("disk full") }}
			ch := newChannel()
			b := newTestBot(t, cfg, back, reply("r: "), ch)
			defer b.stop(t)
			_, err := b.admit(t, "c1", "m1", "hi")
			if !open {
				if err == nil {
					t.Fatal("admitted without a journal")
				}
				b.sweeps(t, 3)
				if n := len(ch.texts()); n != 0 {
					t.Fatalf("a message that was not journaled was dispatched (%d sends)", n)
				}
				// The journal recovers and the channel redelivers: it is processed.
				back.failPut = nil
				if _, err := b.admit(t, "c1", "m1", "hi"); err != nil {
					t.Fatal(err)
				}
			} else if err != nil {
				t.Fatalf("fail_open admission: %v", err)
			}
			if !waitFor(60*time.Second, func() bool { return ch.count("c1", "r: hi") == 1 }) {
				t.Fatalf("not processed: %q", ch.texts())
			}
			// Its reply is recorded sent, though no completion carries
			// the MarkSent (left sending, a restart would call it
			// ambiguous).
			if !waitFor(60*time.Second, func() bool { return b.outboxRecord(t, "web:m1:1").State == durability.OutboxSent }) {
				t.Fatalf("the reply is %s, want sent", b.outboxRecord(t, "web:m1:1").State)
			}
		})
	}
}

func TestOption_InboxLease_HeartbeatKeepsALongHandler(t *testing.T) {
	cfg := testConfig(t, "[durability.inbox]\nlease = \"60ms\"\n")
	shared := memory.New()
	ch := newChannel()
	var runs atomic.Int32
	slow := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		runs.Add(1)
		time.Sleep(400 * time.Millisecond) // the slow handler under test: many leases long
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "done"})
		return err
	})
	a := newTestBot(t, cfg, shared, slow, ch)
	defer a.stop(t)
	cfgB := testConfig(t, "[durability.inbox]\nlease = \"60ms\"\n")
	cfgB.Durability.InstanceID = "replica-b"
	b := newTestBot(t, cfgB, shared, slow, ch) // a replica sweeping every 5ms
	defer b.stop(t)
	a.admit(t, "c1", "m1", "x")
	if !a.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	if runs.Load() != 1 || a.Observer().Metrics().StaleLeases != 0 || len(ch.texts()) != 1 {
		t.Fatalf("runs %d, stale %d, sends %q: the live lease was taken", runs.Load(), a.Observer().Metrics().StaleLeases, ch.texts())
	}
}

// A frozen owner (its heartbeat stops) loses the record when the lease
// expires; its late completion is refused and counted in stale_leases.
func TestOption_InboxLease_ExpiredLeaseTakenOverAndLateCompletionRefused(t *testing.T) {
	shared := memory.New()
	ch := newChannel()
	release := make(chan struct{})
	frozen := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		<-release
		return nil
	})
	cfgA := testConfig(t, "[durability.inbox]\nlease = \"50ms\"\n")
	cfgA.Durability.InstanceID = "a"
	a := newTestBot(t, cfgA, &hooked{Backend: shared, frozen: true}, frozen, ch)
	a.admit(t, "c1", "m1", "x")
	waitFor(60*time.Second, func() bool { return a.inboxState(t, "web:m1").State == durability.InboxProcessing })
	cfgB := testConfig(t, "[durability.inbox]\nlease = \"50ms\"\n")
	cfgB.Durability.InstanceID = "b"
	b := newTestBot(t, cfgB, shared, reply("b: "), ch)
	defer b.stop(t)
	if !waitFor(60*time.Second, func() bool { return ch.count("c1", "b: x") == 1 }) {
		t.Fatalf("replica b did not take over the expired lease: %+v; b metrics %+v", b.inboxState(t, "web:m1"), b.Observer().Metrics())
	}
	close(release)
	if !waitFor(60*time.Second, func() bool { return a.Observer().Metrics().StaleLeases == 1 }) {
		t.Fatalf("late completion not counted: %+v", a.Observer().Metrics())
	}
	a.stop(t)
	if r := b.inboxState(t, "web:m1"); r.State != durability.InboxDone || r.Owner != "b" {
		t.Fatalf("record %+v", r)
	}
}

func TestOption_InboxMaxAttempts_And_InboxBackoff(t *testing.T) {
	cfg := testConfig(t, "[durability.inbox]\nmax_attempts = 2\nbackoff = { base = \"40ms\", cap = \"1s\", jitter = 0.0 }\n")
	var waits []int64
	var mu sync.Mutex
	b := newTestBot(t, cfg, memory.New(), native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		return &wasm.FaultError{Kind: wasm.FaultDeadline, Err: errors.New("too slow")}
	}), newChannel())
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	waitFor(60*time.Second, func() bool {
		r := b.inboxState(t, "web:m1")
		if r.State == durability.InboxFailed {
			mu.Lock()
			if len(waits) == 0 {
				waits = append(waits, r.RetryAt-r.UpdatedAt)
			}
			mu.Unlock()
		}
		return r.State == durability.InboxDead
	})
	r := b.inboxState(t, "web:m1")
	if r.State != durability.InboxDead || r.Attempts != 2 {
		t.Fatalf("record %+v, want dead after max_attempts = 2", r)
	}
	if len(waits) != 1 || waits[0] != 40 {
		t.Fatalf("first retry waited %v ms, want inbox.backoff.base = 40", waits)
	}
	if got := rules.NewBackoff(cfg.Durability.Inbox.Backoff); got.Wait(1) != 40*time.Millisecond || got.Wait(2) != 80*time.Millisecond || got.Wait(10) != time.Second {
		t.Fatalf("backoff schedule %v %v %v", got.Wait(1), got.Wait(2), got.Wait(10))
	}
	j := rules.Backoff{Base: 100 * time.Millisecond, Cap: time.Second, Jitter: 0.2}
	for range 100 {
		if w := j.Wait(1); w < 80*time.Millisecond || w > 120*time.Millisecond {
			t.Fatalf("jittered wait %v outside ±20%%", w)
		}
	}
}

func TestOption_OutboxRetries_ThenDead(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\nretries = 2\ninline_max = \"1s\"\nbackoff = { base = \"2ms\", cap = \"5ms\", jitter = 0.0 }\n")
	ch := newChannel()
	ch.fail = func(int, channel.Outbound) error { return errors.New("503 service unavailable") }
	b := newTestBot(t, cfg, memory.New(), reply("r: "), ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	r := b.outboxRecord(t, "web:m1:1")
	if r.State != durability.OutboxDead || r.Attempts != 3 || ch.calls != 3 {
		t.Fatalf("record %+v after %d calls; want dead after 1 + retries(2) = 3 calls", r, ch.calls)
	}
	if m := b.Observer().Metrics(); m.OutboxDead != 1 || m.OutboxRetried != 2 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestOption_OutboxBackoff_RateLimitedRetryAfterHonoured(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\ninline_max = \"10ms\"\nbackoff = { base = \"1ms\", cap = \"5ms\", jitter = 0.0 }\n")
	ch := newChannel()
	ch.fail = func(n int, _ channel.Outbound) error {
		if n == 1 {
			return &channel.RateLimitedError{RetryAfter: 150 * time.Millisecond, Err: errors.New("429")}
		}
		return nil
	}
	b := newTestBot(t, cfg, memory.New(), reply("r: "), ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	var first durability.OutboxRecord
	waitFor(60*time.Second, func() bool {
		r, err := b.outbox.Get(context.Background(), "web:m1:1")
		if err == nil && r.State == durability.OutboxFailed {
			first = r
			return true
		}
		return false
	})
	if first.RetryAt-first.UpdatedAt != 150 {
		t.Fatalf("retry scheduled %d ms after the 429, want retry_after = 150", first.RetryAt-first.UpdatedAt)
	}
	if !b.quiet(1, 60*time.Second) || ch.count("c1", "r: x") != 1 {
		t.Fatalf("not delivered after the wait: %q", ch.texts())
	}
}

// TestOption_OutboxInlineMax_DeferredWithKeyThenSweeperDelivers: a send
// still failing at inline_max answers deferred with its key, and the
// sweeper delivers it. inline_max = "0s" means no inline retry (not the 15s
// default): one failed attempt defers it.
func TestOption_OutboxInlineMax_DeferredWithKeyThenSweeperDelivers(t *testing.T) {
	for _, c := range []struct {
		inline   string
		failures int
	}{{"60ms", 3}, {"0s", 1}} {
		t.Run(c.inline, func(t *testing.T) {
			cfg := testConfig(t, "[durability.outbox]\ninline_max = \""+c.inline+"\"\nbackoff = { base = \"40ms\", cap = \"40ms\", jitter = 0.0 }\n")
			if d := cfg.Durability.Outbox.InlineMax.D(); d != duration(t, c.inline).D() {
				t.Fatalf("inline_max = %q read as %s", c.inline, d)
			}
			ch := newChannel()
			ch.fail = func(n int, _ channel.Outbound) error {
				if n <= c.failures {
					return errors.New("502")
				}
				return nil
			}
			results := make(chan abi.SendResult, 1)
			h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
				res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "hello"})
				results <- res
				return err
			})
			b := newTestBot(t, cfg, memory.New(), h, ch)
			defer b.stop(t)
			b.admit(t, "c1", "m1", "x")
			res := <-results
			if res.Status != abi.SendDeferred || res.Key != "web:m1:1" || res.Error != "502" {
				t.Fatalf("result %+v, want deferred with the key", res)
			}
			if !b.quiet(1, 60*time.Second) || ch.count("c1", "hello") != 1 {
				t.Fatalf("the sweeper did not deliver: %q", ch.texts())
			}
			if m := b.Observer().Metrics(); m.OutboxDeferred != 1 {
				t.Fatalf("outbox_deferred = %d", m.OutboxDeferred)
			}
		})
	}
}

// TestOption_MaxPayloadBytes_ZeroRefused: max_payload_bytes = 0 would take
// every send out of the outbox; it is refused, not read as the default.
func TestOption_MaxPayloadBytes_ZeroRefused(t *testing.T) {
	for _, v := range []string{"0", "\"0B\""} {
		err := parseErr(t, "[durability.outbox]\nmax_payload_bytes = "+v+"\n")
		if err == nil || !strings.Contains(err.Error(), "durability.outbox.max_payload_bytes: 0 would send every payload without the outbox") {
			t.Fatalf("max_payload_bytes = %s: err = %v", v, err)
		}
	}
}

func TestOption_OnAmbiguous_SkipMarksUnknown_ResendSendsAgain(t *testing.T) {
	for _, resend := range []bool{false, true} {
		c := crashCase{op: "channel.send", after: true, resend: resend}
		t.Run(c.String(), func(t *testing.T) {
			runCrash(t, memoryBackend, c) // checkGuarantees asserts unknown vs sent by policy
		})
	}
}

func TestOption_OnDiverged_ExplicitKeysNeverCompared(t *testing.T) {
	shared := memory.New()
	ch := newChannel()
	text := "first"
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text, IdempotencyKey: "invoice:42"})
		return err
	})
	b := newTestBot(t, testConfig(t, ""), shared, h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	b.quiet(1, 60*time.Second)
	text = "second"
	b.admit(t, "c1", "m2", "y")
	b.quiet(2, 60*time.Second)
	if got := ch.texts(); len(got) != 1 || got[0] != "first" || b.Observer().Metrics().OutboxDiverged != 0 || b.Observer().Metrics().OutboxDeduped != 1 {
		t.Fatalf("sends %q, metrics %+v: an explicit key names the send", got, b.Observer().Metrics())
	}
}

func TestOption_MaxPayloadBytes_BypassesTheOutbox(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\nmax_payload_bytes = 100\n")
	ch := newChannel()
	results := make(chan abi.SendResult, 1)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: strings.Repeat("x", 200)})
		results <- res
		return err
	})
	b := newTestBot(t, cfg, memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if res := <-results; res.Status != abi.SendBypassed || res.Ref == "" {
		t.Fatalf("result %+v", res)
	}
	b.quiet(1, 60*time.Second)
	if out, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{}); len(out) != 0 || b.Observer().Metrics().OutboxBypassed != 1 || len(ch.texts()) != 1 {
		t.Fatalf("outbox %v, metrics %+v", out, b.Observer().Metrics())
	}
}

// TestOption_MaxPayloadBytes_BypassSplitsAtTheChannelLimit: a text sent
// without the outbox (over max_payload_bytes) is split at the channel's
// text limit, in order, as a journaled text is.
func TestOption_MaxPayloadBytes_BypassSplitsAtTheChannelLimit(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\nmax_payload_bytes = 100\n")
	ch := newChannel()
	ch.limit = 80
	results := make(chan abi.SendResult, 1)
	text := strings.Repeat("a", 80) + strings.Repeat("b", 80) + strings.Repeat("c", 40)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text})
		results <- res
		return err
	})
	b := newTestBot(t, cfg, memory.New(), h, limited{ch})
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if res := <-results; res.Status != abi.SendBypassed || res.Ref == "" {
		t.Fatalf("result %+v", res)
	}
	b.quiet(1, 60*time.Second)
	got := ch.texts()
	if len(got) != 3 || strings.Join(got, "") != text {
		t.Fatalf("the channel got %d messages %q; want the text in 3 parts of at most 80", len(got), got)
	}
	for _, p := range got {
		if len(p) > 80 {
			t.Errorf("a part of %d characters went to a channel whose limit is 80", len(p))
		}
	}
}

func TestOption_OutboxLease_MinimumAndHeartbeat(t *testing.T) {
	if err := parseErr(t, "[durability.outbox]\nlease = \"19ms\"\n"); err == nil || !strings.Contains(err.Error(), "durability.outbox.lease: 19ms is below the 20ms minimum") {
		t.Fatalf("err = %v", err)
	}
	// A slow provider call several times longer than the lease is never
	// taken for abandoned. The lease leaves the heartbeat (a third of it)
	// more than a second of slack: a loaded machine under -race stalls
	// goroutines for tens of milliseconds, which a 40 ms lease did not
	// survive.
	cfg := testConfig(t, "[durability.outbox]\nlease = \"2s\"\n")
	shared := memory.New()
	ch := newChannel()
	ch.fail = func(n int, _ channel.Outbound) error { time.Sleep(5 * time.Second); return nil } // the slow call under test
	a := newTestBot(t, cfg, shared, reply("r: "), ch)
	defer a.stop(t)
	cfgB := testConfig(t, "[durability.outbox]\nlease = \"2s\"\n")
	cfgB.Durability.InstanceID = "replica-b"
	b := newTestBot(t, cfgB, shared, reply("r: "), ch)
	defer b.stop(t)
	a.admit(t, "c1", "m1", "x")
	if !a.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	if m := b.Observer().Metrics(); m.OutboxAmbiguous != 0 || ch.count("c1", "r: x") != 1 {
		t.Fatalf("replica b took a live send as ambiguous: %+v, %q", m, ch.texts())
	}
}

func TestOption_Poll_SweeperPeriod(t *testing.T) {
	for _, poll := range []string{"10ms", "1h"} {
		t.Run(poll, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.Durability.Poll = duration(t, poll)
			b := newTestBot(t, cfg, memory.New(), native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
				if ev.Attempt == 1 {
					return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("x")}
				}
				return nil
			}), newChannel())
			defer b.stop(t)
			b.admit(t, "c1", "m1", "x")
			// A short poll retries (however slow the machine); an hour's poll
			// does not within the window (a slow machine only retries later).
			window := 300 * time.Millisecond
			if poll == "10ms" {
				window = 60 * time.Second
			}
			retried := waitFor(window, func() bool { return b.inboxState(t, "web:m1").State == durability.InboxDone })
			if retried != (poll == "10ms") {
				t.Fatalf("poll %s: retried within %s = %v", poll, window, retried)
			}
		})
	}
}

func TestOption_Retention_PurgesSettledRecords(t *testing.T) {
	for _, retention := range []string{"30ms", "0"} {
		t.Run(retention, func(t *testing.T) {
			cfg := testConfig(t, "")
			r := duration(t, retention)
			cfg.Durability.Retention = &r
			b := newTestBot(t, cfg, memory.New(), reply("r: "), newChannel())
			defer b.stop(t)
			b.admit(t, "c1", "m1", "x")
			b.quiet(1, 60*time.Second)
			window := 500 * time.Millisecond // "0" must keep them this long at least
			if retention != "0" {
				window = 60 * time.Second
			}
			purged := waitFor(window, func() bool {
				in, _ := b.Operator().ListInbox(context.Background(), durability.ListFilter{})
				out, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{})
				return len(in) == 0 && len(out) == 0
			})
			if purged != (retention != "0") {
				t.Fatalf("retention %s: purged = %v", retention, purged)
			}
		})
	}
}

func TestKeys_ExplicitDerivedAndRandom(t *testing.T) {
	ch := newChannel()
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "one"})
		env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "two", IdempotencyKey: "invoice:42"})
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "three"})
		return err
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	b.quiet(1, 60*time.Second)
	for key, text := range map[string]string{"web:m1:1": "one", "invoice:42": "two", "web:m1:3": "three"} {
		var m rules.OutboxMessage
		json.Unmarshal(b.outboxRecord(t, key).Payload, &m)
		if m.Text != text {
			t.Fatalf("key %s holds %q, want %q", key, m.Text, text)
		}
	}
	res, err := b.Send(context.Background(), "web", "c9", "from the host", "")
	if err != nil || res.Status != abi.SendSent || !strings.HasPrefix(res.Key, "rnd:") {
		t.Fatalf("random-key send: %+v %v", res, err)
	}
	res2, _ := b.Send(context.Background(), "web", "c9", "from the host", "")
	if res2.Key == res.Key || ch.count("c9", "from the host") != 2 {
		t.Fatal("a second call with a random key is a new send")
	}
}

func TestEnqueue_ReturnsAtOnce_SecondEnqueueOfAKeyDoesNothing(t *testing.T) {
	ch := newChannel()
	results := make(chan abi.SendResult, 2)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		res, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "your appointment is tomorrow", IdempotencyKey: "reminder:1"})
		results <- res
		return err
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if r := <-results; r.Status != abi.SendDeferred || r.Key != "reminder:1" {
		t.Fatalf("first enqueue %+v", r)
	}
	b.quiet(1, 60*time.Second)
	b.admit(t, "c1", "m2", "y")
	if r := <-results; r.Status != abi.SendDeduped {
		t.Fatalf("second enqueue %+v, want deduped", r)
	}
	b.quiet(2, 60*time.Second)
	if n := ch.count("c1", "your appointment is tomorrow"); n != 1 {
		t.Fatalf("sent %d times", n)
	}
}

func TestPerChatOrderKeptWhileASendRetriesInline(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\ninline_max = \"1s\"\nbackoff = { base = \"30ms\", cap = \"30ms\", jitter = 0.0 }\n")
	ch := newChannel()
	ch.fail = func(n int, out channel.Outbound) error {
		if out.Text == "r: 1" && n == 1 {
			return errors.New("timeout")
		}
		return nil
	}
	b := newTestBot(t, cfg, memory.New(), reply("r: "), ch)
	defer b.stop(t)
	for i := 1; i <= 3; i++ {
		b.admit(t, "c1", fmt.Sprint("m", i), fmt.Sprint(i))
	}
	b.quiet(3, 60*time.Second)
	if got := strings.Join(ch.texts(), ","); got != "r: 1,r: 2,r: 3" {
		t.Fatalf("order %s", got)
	}
}

func TestSplit_PartsInOrder_WaitingIsRefunded(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\ninline_max = \"10ms\"\nbackoff = { base = \"60ms\", cap = \"60ms\", jitter = 0.0 }\n")
	ch := newChannel()
	ch.limit = 10
	ch.fail = func(n int, _ channel.Outbound) error {
		if n == 1 {
			return errors.New("flaky")
		}
		return nil
	}
	text := "aaaaaaaaa bbbbbbbbb ccccc"
	b := newTestBot(t, cfg, memory.New(), native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text})
		return err
	}), limited{ch})
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	if got := strings.Join(ch.texts(), "|"); got != "aaaaaaaaa |bbbbbbbbb |ccccc" {
		t.Fatalf("parts delivered as %q", got)
	}
	p2 := b.outboxRecord(t, "web:m1:1#2")
	if p2.PreviousPart != "web:m1:1" || p2.Attempts != 1 || b.outboxRecord(t, "web:m1:1#3").PreviousPart != "web:m1:1#2" {
		t.Fatalf("part 2 %+v: want linked to part 1 with 1 attempt (waiting refunded)", p2)
	}
}

func TestSplit_SweeperSplitsAnOversizedJournaledRecord(t *testing.T) {
	ch := newChannel()
	ch.limit = 10
	shared := memory.New()
	j, _ := shared.Open(context.Background(), durability.Scope{Bot: "bot", Connection: "default"})
	payload, _ := json.Marshal(rules.OutboxMessage{Text: "aaaaaaaaa bbbbbbbbb ccccc"})
	j.Outbox.Put(context.Background(), durability.OutboxPut{Key: "old", Provider: "web", Chat: "c1", Payload: payload}, nowMs(), nil)
	b := newTestBot(t, testConfig(t, ""), shared, reply(""), limited{ch})
	defer b.stop(t)
	if !waitFor(60*time.Second, func() bool { return len(ch.texts()) == 3 && b.settled(0) }) {
		t.Fatalf("delivered %q", ch.texts())
	}
	if got := strings.Join(ch.texts(), "|"); got != "aaaaaaaaa |bbbbbbbbb |ccccc" {
		t.Fatalf("parts %q", got)
	}
	if r := b.outboxRecord(t, "old#3"); r.PreviousPart != "old#2" || r.State != durability.OutboxSent {
		t.Fatalf("part 3 %+v", r)
	}
}

func TestPermanentErrorsGoStraightToTheDLQ(t *testing.T) {
	for _, perm := range []error{channel.ErrUnsupportedContent, channel.ErrPayloadTooLarge, channel.ErrOutsideSessionWindow, channel.ErrRecipientUnreachable, &channel.PermanentError{Err: errors.New("retryable=false")}} {
		t.Run(perm.Error(), func(t *testing.T) {
			ch := newChannel()
			ch.fail = func(int, channel.Outbound) error { return fmt.Errorf("channel: %w", perm) }
			b := newTestBot(t, testConfig(t, ""), memory.New(), reply(""), ch)
			defer b.stop(t)
			b.admit(t, "c1", "m1", "x")
			b.quiet(1, 60*time.Second)
			if r := b.outboxRecord(t, "web:m1:1"); r.State != durability.OutboxDead || ch.calls != 1 {
				t.Fatalf("record %+v after %d calls", r, ch.calls)
			}
			var e observe.Alert
			for len(b.events) > 0 {
				if ev := <-b.events; ev.Name == observe.AlertDead {
					e = ev
				}
			}
			if e.Kind != "outbox" || e.Key != "web:m1:1" || e.Chat != "c1" || !strings.Contains(e.Error, perm.Error()) {
				t.Fatalf("dead event %+v", e)
			}
		})
	}
}

// The first sweep after a restart recovers the leases of the dead incarnation
// (same instance id) at once, without waiting for them to expire.
func TestRestartRecoversEarlierLeasesAtOnce(t *testing.T) {
	shared := memory.New()
	cfg := testConfig(t, "[durability.inbox]\nlease = \"1h\"\n")
	ch := newChannel()
	hang := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error { <-ctx.Done(); return ctx.Err() })
	crash := crashpoint.New(shared)
	a := newTestBot(t, cfg, crash, hang, ch)
	a.admit(t, "c1", "m1", "x")
	waitFor(60*time.Second, func() bool { return a.inboxState(t, "web:m1").State == durability.InboxProcessing })
	crash.CrashBefore("inbox.fail")
	a.Kill()
	nextMilli(t)
	b := newTestBot(t, cfg, shared, reply("r: "), ch)
	defer b.stop(t)
	if !waitFor(60*time.Second, func() bool { return ch.count("c1", "r: x") == 1 }) {
		t.Fatal("the dead incarnation's record was not recovered")
	}
	if r := b.inboxState(t, "web:m1"); r.Attempts != 2 {
		t.Fatalf("record %+v", r)
	}
}

func TestOperations_ListRetryDiscard(t *testing.T) {
	ch := newChannel()
	ch.fail = func(int, channel.Outbound) error { return channel.ErrRecipientUnreachable }
	b := newTestBot(t, testConfig(t, ""), memory.New(), reply("r: "), ch)
	defer b.stop(t)
	ctx := context.Background()
	b.admit(t, "c1", "m1", "x")
	b.quiet(1, 60*time.Second)
	dead, _ := b.Operator().ListOutbox(ctx, durability.ListFilter{State: "dead"})
	if len(dead) != 1 {
		t.Fatalf("outbound DLQ %v", dead)
	}
	ch.mu.Lock()
	ch.fail = nil
	ch.mu.Unlock()
	if err := b.Operator().RetrySend(ctx, dead[0].Key); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return ch.count("c1", "r: x") == 1 }) {
		t.Fatal("retry did not send")
	}
	if err := b.Operator().RetrySend(ctx, dead[0].Key); !errors.Is(err, durability.ErrInvalidState) {
		t.Fatalf("retry of a sent record: %v", err)
	}
	if err := b.Operator().Discard(ctx, dead[0].Key); err != nil {
		t.Fatal(err)
	}
	// The discarded key sends again on a replay.
	if err := b.Operator().ReplayInbound(ctx, "web:m1"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return ch.count("c1", "r: x") == 2 }) {
		t.Fatalf("replay after discard did not send again: %q", ch.texts())
	}
	// The reply goes out before the record completes: wait for the completion.
	if !waitFor(60*time.Second, func() bool {
		in, _ := b.Operator().ListInbox(ctx, durability.ListFilter{State: "done", Chat: "c1"})
		return len(in) == 1
	}) {
		in, _ := b.Operator().ListInbox(ctx, durability.ListFilter{})
		t.Fatalf("inbox list %v", in)
	}
}

// codecChannel journals its media as {v:1, data:{"file":…}} without the secret
// part of the live token ("<file>?sig=<secret>").
type codecChannel struct{ *fakeChannel }

func (codecChannel) SerializeMediaRef(m channel.Media) (channel.StoredRef, bool) {
	file, _, _ := strings.Cut(m.Ref, "?")
	if file == "view-once" {
		return channel.StoredRef{}, false
	}
	if file == "corrupt" {
		file = "" // a stored form that will not validate
	}
	data, _ := json.Marshal(map[string]string{"file": file})
	return channel.StoredRef{V: 1, Data: data}, true
}

// LoadMedia serves "bytes of <ref>"; the channel no longer has "gone", and
// "huge" is over the size limit.
func (codecChannel) LoadMedia(_ context.Context, m channel.Media, _ int64) ([]byte, error) {
	if strings.HasPrefix(m.Ref, "gone") {
		return nil, fmt.Errorf("%w: HTTP 404", channel.ErrMediaUnavailable)
	}
	if strings.HasPrefix(m.Ref, "huge") {
		return nil, channel.ErrMediaTooLarge
	}
	return []byte("bytes of " + m.Ref), nil
}

// TestMediaLoad_Reasons: the first run loads through the channel's live
// references; a replay loads through the rehydrated ones, and otherwise gets
// the reason: not-durable (nothing journaled), rehydrate-failed (the stored
// form does not validate, or the channel no longer has the file) and,
// replayed where the provider no longer reads references, provider-mismatch.
// The message is handled every time.
func TestMediaLoad_Reasons(t *testing.T) {
	loads := make(chan []string, 2)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		var out []string
		for i := range ev.Media {
			b, err := env.LoadMedia(ctx, i)
			var u *abi.MediaUnavailableError
			switch {
			case err == nil:
				out = append(out, string(b))
			case errors.As(err, &u):
				out = append(out, u.Reason)
			case errors.Is(err, wasm.ErrMediaTooLarge):
				out = append(out, "too large")
			default:
				out = append(out, "error: "+err.Error())
			}
		}
		if _, err := env.LoadMedia(ctx, len(ev.Media)); !errors.Is(err, wasm.ErrNoMedia) {
			out = append(out, fmt.Sprint("past the end: ", err))
		}
		loads <- out
		return nil
	})
	cfg := testConfig(t, "")
	backend := memory.New()
	b := newTestBot(t, cfg, backend, h, codecChannel{newChannel()})
	_, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", Media: []channel.Media{
		{Type: "image", Ref: "photo-1?sig=SECRET"}, {Type: "image", Ref: "view-once?sig=SECRET"},
		{Type: "image", Ref: "gone?sig=SECRET"}, {Type: "image", Ref: "corrupt?sig=SECRET"},
		{Type: "video", Ref: "huge?sig=SECRET"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The first run has the channel's live references.
	want := []string{"bytes of photo-1?sig=SECRET", "bytes of view-once?sig=SECRET", "rehydrate-failed", "bytes of corrupt?sig=SECRET", "too large"}
	if got := <-loads; !slices.Equal(got, want) {
		t.Fatalf("live, media_load gave %q, want %q", got, want)
	}
	b.quiet(1, 60*time.Second)
	// A replay has the journaled ones.
	if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
		t.Fatal(err)
	}
	want = []string{"bytes of photo-1?sig=fresh", "not-durable", "rehydrate-failed", "rehydrate-failed", "too large"}
	if got := <-loads; !slices.Equal(got, want) {
		t.Fatalf("replayed, media_load gave %q, want %q", got, want)
	}
	b.quiet(1, 60*time.Second)
	b.stop(t)

	// The same journal under a provider "web" that no longer stores refs.
	b2 := newTestBot(t, cfg, backend, h, newChannel())
	defer b2.stop(t)
	if err := b2.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
		t.Fatal(err)
	}
	want = []string{"provider-mismatch", "not-durable", "provider-mismatch", "provider-mismatch", "provider-mismatch"}
	if got := <-loads; !slices.Equal(got, want) {
		t.Fatalf("replayed, media_load gave %q, want %q", got, want)
	}
}

func (codecChannel) RehydrateMediaRef(s channel.StoredRef) (channel.Media, error) {
	var d struct{ File string }
	if s.V != 1 || json.Unmarshal(s.Data, &d) != nil || d.File == "" {
		return channel.Media{}, errors.New("bad stored ref")
	}
	return channel.Media{Ref: d.File + "?sig=fresh"}, nil
}

func TestOption_InboxMediaRefs(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("media_refs=", on), func(t *testing.T) {
			cfg := testConfig(t, fmt.Sprintf("[durability.inbox]\nmedia_refs = %v\n", on))
			refs := make(chan []string, 1)
			h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
				var rs []string
				for _, m := range ev.Media {
					rs = append(rs, m.Ref)
				}
				refs <- rs
				return nil
			})
			b := newTestBot(t, cfg, memory.New(), h, codecChannel{newChannel()})
			defer b.stop(t)
			_, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", Media: []channel.Media{
				{Type: "image", Ref: "photo-1?sig=SECRET"}, {Type: "image", Ref: "view-once?sig=SECRET"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			if live := <-refs; live[0] != "photo-1?sig=SECRET" || live[1] != "view-once?sig=SECRET" {
				t.Fatalf("the first run saw refs %q, want the channel's live ones", live)
			}
			b.quiet(1, 60*time.Second)
			if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
				t.Fatal(err)
			}
			got := <-refs
			b.quiet(1, 60*time.Second)
			payload := string(b.inboxState(t, "web:m1").Payload)
			if on {
				if strings.Contains(payload, "SECRET") || !strings.Contains(payload, `"data":{"file":"photo-1"}`) {
					t.Fatalf("journaled %s", payload)
				}
				if got[0] != "photo-1?sig=fresh" || got[1] != "" {
					t.Fatalf("a replay saw refs %q, want the rehydrated one and none for the view-once media", got)
				}
			} else if !strings.Contains(payload, "photo-1?sig=SECRET") || got[0] != "photo-1?sig=SECRET" {
				t.Fatalf("media_refs = false journals the raw token: %s, guest saw %q", payload, got)
			}
		})
	}
}

// Conversation state is per chat, buffered during the handler (it reads its
// own writes), committed with the completion, and a handler that faults
// commits nothing.
func TestConversationState(t *testing.T) {
	seen := make(chan string, 10)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		v, ok, err := env.StateGet(ctx, "count")
		if err != nil {
			return err
		}
		n := 0
		if ok {
			n, _ = strconv.Atoi(string(v))
		}
		n++
		env.StateSet(ctx, "count", []byte(strconv.Itoa(n)))
		back, _, _ := env.StateGet(ctx, "count") // reads its own write
		seen <- ev.Chat + "=" + string(back)
		if ev.Text == "boom" {
			return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("after the write")}
		}
		return nil
	})
	cfg := testConfig(t, "[durability.inbox]\nmax_attempts = 1\n")
	b := newTestBot(t, cfg, memory.New(), h, newChannel())
	defer b.stop(t)
	for i, m := range []struct{ chat, text string }{{"a", "x"}, {"a", "x"}, {"b", "x"}, {"a", "boom"}, {"a", "x"}} {
		b.admit(t, m.chat, fmt.Sprint("m", i), m.text)
		b.quiet(i+1, 60*time.Second)
	}
	var got []string
	for len(seen) > 0 {
		got = append(got, <-seen)
	}
	if strings.Join(got, " ") != "a=1 a=2 b=1 a=3 a=3" {
		t.Fatalf("state seen %q: want per-chat counts, and the faulted write (a=3) not committed", got)
	}
}

// State keys starting with "user/" belong to the sender across chats.
func TestConversationStatePerUser(t *testing.T) {
	seen := make(chan string, 10)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		v, _, _ := env.StateGet(ctx, "user/visits")
		n, _ := strconv.Atoi(string(v))
		env.StateSet(ctx, "user/visits", []byte(strconv.Itoa(n+1)))
		seen <- fmt.Sprintf("%s@%s=%d", ev.From, ev.Chat, n+1)
		return nil
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, newChannel())
	defer b.stop(t)
	for i, m := range []struct{ chat, from string }{{"a", "ana"}, {"b", "ana"}, {"a", "bob"}} {
		b.Admit(context.Background(), "web", channel.Message{ID: fmt.Sprint("m", i), Chat: m.chat, From: m.from, Text: "x"})
		b.quiet(i+1, 60*time.Second)
	}
	var got []string
	for len(seen) > 0 {
		got = append(got, <-seen)
	}
	if strings.Join(got, " ") != "ana@a=1 ana@b=2 bob@a=1" {
		t.Fatalf("per-user state %q", got)
	}
}

// A guest that floods send hits bot.max_sends: the host function fails, the
// event's attempt faults, and after max_attempts it is dead; other chats are
// served throughout. The sends made before the cap go out once; a flood of
// posts (Reply) sends nothing, since a faulted event's posted sends are not
// made.
func TestSandbox_SendFloodIsCapped(t *testing.T) {
	module := wasmbuild.Go(t, "wasm/testdata/guests/faulty")
	cfg := testConfig(t, "[durability.inbox]\nmax_attempts = 2\n")
	cfg.Bot.Module, cfg.Bot.MaxSends = module, 5
	ch := newChannel()
	b := newTestBot(t, cfg, memory.New(), nil, ch)
	defer b.stop(t)
	b.admit(t, "flooder", "f1", "flood")
	b.admit(t, "poster", "p1", "postflood")
	b.admit(t, "other", "o1", "hello")
	if !b.quiet(3, 60*time.Second) {
		t.Fatal("did not settle")
	}
	for _, id := range []string{"web:f1", "web:p1"} {
		r := b.inboxState(t, id)
		if r.State != durability.InboxDead || r.Attempts != 2 || !strings.Contains(r.Error, "bot.max_sends") {
			t.Fatalf("flooding record %+v", r)
		}
	}
	if n := ch.count("flooder", "flood 0"); n != 1 {
		t.Fatalf("the capped sends went out %d times; replays must dedupe them", n)
	}
	if n := ch.count("poster", "postflood 0"); n != 0 {
		t.Fatalf("a faulted event's posted sends went out %d times", n)
	}
	if ch.count("other", "echo: hello") != 1 {
		t.Fatalf("the other chat was not served: %q", ch.texts())
	}
}

// TestOption_MaxEventBytes_BoundsWhatOneEventSends: one event's sends and
// each chat's copy of its broadcasts draw on bot.max_event_bytes: a
// broadcast whose copies would pass it is refused whole (TOO_LARGE, nothing
// journaled), as is a send or a post past it, and what the event journals
// stays under the bound.
func TestOption_MaxEventBytes_BoundsWhatOneEventSends(t *testing.T) {
	src := "[bot]\nmodule = \"unused.wasm\"\nmax_event_bytes = \"64KiB\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"
	if _, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), "bot.max_event_bytes") {
		t.Fatalf("a max_event_bytes under 1MiB: err = %v", err)
	}
	cfg := testConfig(t, "")
	if cfg.Bot.MaxEventBytes != 16<<20 {
		t.Errorf("bot.max_event_bytes defaults to %d, want 16MiB", cfg.Bot.MaxEventBytes)
	}
	cfg.Bot.MaxEventBytes = 1 << 20
	big := strings.Repeat("x", 100<<10)
	chats := make([]string, 200)
	for i := range chats {
		chats[i] = fmt.Sprint("c", i)
	}
	var mu sync.Mutex
	var got []string
	note := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s:%v", what, errors.Is(err, wasm.ErrTooLarge)))
	}
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: chats, Text: big, KeyPrefix: "big"})
		note("broadcast", err)
		_, err = env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: chats[:5], Text: big, KeyPrefix: "small"})
		note("broadcast5", err)
		for i := 0; i < 5; i++ {
			_, err = env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: big})
			note("enqueue", err)
		}
		_, err = env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: big})
		note("post", err)
		return nil
	})
	b := newTestBot(t, cfg, memory.New(), h, newChannel())
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the event did not settle")
	}
	mu.Lock()
	// 1 MiB holds 10 copies of 100 KiB (and their JSON): 5 for the small
	// broadcast, 5 enqueues; the big broadcast and the post are refused.
	want := "broadcast:true broadcast5:false enqueue:false enqueue:false enqueue:false enqueue:false enqueue:false post:true"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("refused (true) and taken: %s\nwant %s", s, want)
	}
	mu.Unlock()
	n, total := b.journaled(t)
	if n != 10 || total > 1<<20 {
		t.Errorf("the event journaled %d sends, %d bytes; want 10, within bot.max_event_bytes", n, total)
	}
	if st := b.inboxState(t, "web:m1").State; st != durability.InboxDone {
		t.Errorf("the event is %s: a refused send is the guest's to handle, not a fault", st)
	}
}

// journaled counts the outbox's records (up to 1,000) and the bytes of
// their payloads.
func (b *testBot) journaled(t *testing.T) (records, bytes int) {
	t.Helper()
	out, err := b.Operator().ListOutbox(context.Background(), durability.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		bytes += len(r.Payload)
	}
	return len(out), bytes
}

// TestStopDuringAnInlineRetry: a send the channel keeps refusing is retried
// inline (outbox.inline_max = 5m); the bot told to stop does not wait for
// the retries: the send stays journaled for the sweeper after the restart,
// and Stop returns long before inline_max (or its own grace) would end.
func TestStopDuringAnInlineRetry(t *testing.T) {
	cfg := testConfig(t, "[durability.outbox]\nretries = 1000\ninline_max = \"5m\"\nbackoff = { base = \"200ms\", cap = \"1s\", jitter = 0.0 }\n")
	ch := newChannel()
	ch.fail = func(int, channel.Outbound) error { return errors.New("503 service unavailable") }
	b := newTestBot(t, cfg, memory.New(), reply("r: "), ch)
	b.admit(t, "c1", "m1", "x")
	if !waitFor(60*time.Second, func() bool { ch.mu.Lock(); defer ch.mu.Unlock(); return ch.calls >= 2 }) {
		t.Fatal("the send was not retried")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("Stop took %s: it waited for the inline retries", took)
	}
	if r := b.outboxRecord(t, "web:m1:1"); r.State.Terminal() {
		t.Fatalf("the send retried at the stop is %s: it must stay journaled for the next start", r.State)
	}
}
