package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// hookGuest is a native Guest with send hooks (send.Hooks), recording each
// hook call.
type hookGuest struct {
	native
	before   func(h abi.SendHook) (wasm.BeforeSend, error)
	afterErr func(n int, h abi.SendHook) error

	mu      sync.Mutex
	befores []abi.SendHook
	afters  []abi.SendHook
}

func (g *hookGuest) Hooks() (bool, bool) { return g.before != nil, g.afterErr != nil }

func (g *hookGuest) BeforeSend(_ context.Context, h abi.SendHook) (wasm.BeforeSend, error) {
	g.mu.Lock()
	g.befores = append(g.befores, h)
	g.mu.Unlock()
	return g.before(h)
}

func (g *hookGuest) AfterSend(_ context.Context, h abi.SendHook) error {
	g.mu.Lock()
	g.afters = append(g.afters, h)
	n := 0
	for _, a := range g.afters {
		if a.Key == h.Key {
			n++
		}
	}
	g.mu.Unlock()
	return g.afterErr(n, h)
}

// afterRuns counts the after_send runs of key, and returns the last one.
func (g *hookGuest) afterRuns(key string) (int, abi.SendHook) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, last := 0, abi.SendHook{}
	for _, a := range g.afters {
		if a.Key == key {
			n, last = n+1, a
		}
	}
	return n, last
}

// TestBeforeSendRewritesAndCancels: botrun_before_send runs once per send,
// before journaling, for send, enqueue, post and each chat of a broadcast;
// a rewrite is what goes out, a cancel journals nothing and answers
// cancelled, and a replay of the event (its hook rewriting the same way) is
// deduplicated without counting a diverged send: the fingerprint is the
// content before the hook.
func TestBeforeSendRewritesAndCancels(t *testing.T) {
	var mu sync.Mutex
	var statuses []string
	g := &hookGuest{before: func(h abi.SendHook) (wasm.BeforeSend, error) {
		switch {
		case strings.HasPrefix(h.Text, "secret"):
			return wasm.BeforeSend{Cancel: true}, nil
		case h.Text == "broken":
			return wasm.BeforeSend{}, &wasm.HandlerError{Message: "no"}
		case h.Chat == "c3":
			return wasm.BeforeSend{Cancel: true}, nil
		}
		return wasm.BeforeSend{Rewrite: &abi.SendRequest{Chat: h.Chat, Text: strings.ToUpper(h.Text) + "!"}}, nil
	}}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		note := func(res abi.SendResult, err error) {
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			statuses = append(statuses, string(res.Status))
			mu.Unlock()
		}
		note(env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "a"}))
		note(env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "secret"}))
		note(env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "broken"}))
		note(env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "b"}))
		note(env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "c"}))
		res, err := env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: []string{"c2", "c3"}, Text: "news", KeyPrefix: "n"})
		if err != nil || res.Journaled+res.Existing != 1 || res.Cancelled != 1 {
			t.Errorf("broadcast = %+v, %v; want 1 journaled (existing on the replay), 1 cancelled", res, err)
		}
		return nil
	}
	ch := newChannel()
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, ch)
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the event did not settle")
	}
	want := map[string]int{"c1/A!": 1, "c1/B!": 1, "c1/C!": 1, "c2/NEWS!": 1}
	check := func(when string) {
		t.Helper()
		for k, n := range want {
			chat, text, _ := strings.Cut(k, "/")
			if got := ch.count(chat, text); got != n {
				t.Errorf("%s: %q to %s delivered %d times, want %d: %q", when, text, chat, got, n, ch.texts())
			}
		}
		if got := len(ch.texts()); got != 4 {
			t.Errorf("%s: delivered %q, want 4 messages", when, ch.texts())
		}
	}
	check("first run")
	mu.Lock()
	if got := strings.Join(statuses, " "); got != "sent cancelled dead deferred queued" {
		t.Errorf("statuses %q", got)
	}
	mu.Unlock()
	if rec := b.outboxRecord(t, "web:m1:1"); rec.State != durability.OutboxSent {
		t.Errorf("the rewritten send: %+v", rec)
	}
	for _, key := range []string{"web:m1:2", "web:m1:3", "n:c3"} {
		if _, err := b.outbox.Get(context.Background(), key); !errors.Is(err, durability.ErrNotFound) {
			t.Errorf("%s was journaled (err %v): a cancelled or failed before_send journals nothing", key, err)
		}
	}
	g.mu.Lock()
	if n := len(g.befores); n != 7 {
		t.Errorf("before_send ran %d times, want 7 (4 sends, 1 post, 2 broadcast chats)", n)
	}
	if h := g.befores[0]; h.Key != "web:m1:1" || h.Event != "web:m1" || h.Provider != "web" || h.Chat != "c1" || h.Time == 0 {
		t.Errorf("first hook %+v", h)
	}
	g.mu.Unlock()

	if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.befores) == 14
	}) || !b.quiet(1, 60*time.Second) {
		t.Fatal("the replay did not run the hooks again")
	}
	check("after the replay")
	if m := b.Observer().Metrics(); m.OutboxDiverged != 0 {
		t.Errorf("outbox_diverged = %d: a rewritten send is compared by its content before the hook", m.OutboxDiverged)
	}
}

// TestAfterSendRunsAfterDelivery: botrun_after_send runs once each send of
// the handler (inline, enqueued, broadcast) was delivered, with the
// channel's ref; a fault runs it again, its own error does not, a dead send
// never runs it, and neither the hook's records nor their failures reach the
// message log or the dead-letter queue.
func TestAfterSendRunsAfterDelivery(t *testing.T) {
	g := &hookGuest{afterErr: func(n int, h abi.SendHook) error {
		switch {
		case h.Text == "x" && n == 1:
			return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("boom")}
		case h.Text == "y":
			return &wasm.HandlerError{Message: "not today"}
		}
		return nil
	}}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, text := range []string{"x", "dead"} {
			if _, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text}); err != nil {
				return err
			}
		}
		for _, text := range []string{"y", "dead later"} {
			if _, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: text}); err != nil {
				return err
			}
		}
		_, err := env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: []string{"c2", "c3"}, Text: "news", KeyPrefix: "n"})
		return err
	}
	ch := newChannel()
	ch.fail = func(_ int, out channel.Outbound) error {
		if strings.HasPrefix(out.Text, "dead") {
			return &channel.PermanentError{Err: errors.New("blocked")}
		}
		return nil
	}
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, ch)
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"web:m1:1": "x", "web:m1:3": "y", "n:c2": "news", "n:c3": "news"}
	if !waitFor(60*time.Second, func() bool {
		for _, key := range append([]string{"web:m1:4"}, mapKeys(keys)...) {
			if rec, err := b.outbox.Get(context.Background(), rules.AfterSendKey(key)); err != nil || rec.State != durability.OutboxSent {
				return false
			}
		}
		return b.quiet(1, time.Millisecond)
	}) {
		recs, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{})
		t.Fatalf("the after_send records did not settle: %+v", recs)
	}
	for key, text := range keys {
		n, h := g.afterRuns(key)
		want := 1
		if text == "x" {
			want = 2 // the fault runs it again
		}
		if n != want {
			t.Errorf("after_send of %s ran %d times, want %d", key, n, want)
		}
		rec := b.outboxRecord(t, key)
		if h.Ref == "" || h.Ref != rec.Ref || h.Text != text || h.Time < rec.CompletedAt {
			t.Errorf("after_send of %s saw %+v; the send is %+v", key, h, rec)
		}
	}
	for _, key := range []string{"web:m1:2", "web:m1:4"} {
		if n, _ := g.afterRuns(key); n != 0 {
			t.Errorf("after_send ran %d times for the dead send %s", n, key)
		}
	}
	// A send dead at once keeps its after_send record, settled without
	// running, for an operator's retry to re-arm.
	if rec, err := b.outbox.Get(context.Background(), rules.AfterSendKey("web:m1:2")); err != nil || rec.State != durability.OutboxSent {
		t.Errorf("the after_send record of a send dead at once: %+v, %v; want settled without running", rec, err)
	}
	dead, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{State: string(durability.OutboxDead)})
	if len(dead) != 2 || dead[0].Key != "web:m1:2" || dead[1].Key != "web:m1:4" {
		t.Errorf("dead-letter queue %+v, want only the two dead sends", dead)
	}
	log, err := b.Operator().MessageLog(context.Background(), "c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		if rules.Internal(e.Provider) {
			t.Errorf("the message log shows a hook record: %+v", e)
		}
	}
}

// TestAfterSendAtLeastOnceAfterACrash: a crash while botrun_after_send ran
// leaves its record in flight; when its lease expires, a bot on the same
// backend runs the hook again.
func TestAfterSendAtLeastOnceAfterACrash(t *testing.T) {
	shared := backends["sqlite"](t)
	cfg := testConfig(t, "")
	g := &hookGuest{afterErr: func(int, abi.SendHook) error { return nil }}
	g.native = func(context.Context, abi.Event, wasm.Env) error { return nil }
	b := newTestBot(t, cfg, shared, g, newChannel())
	defer b.stop(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	l := durability.Lease{Owner: "gone", Now: now - 60_000, Until: now - 30_000}
	// The send itself was delivered (its lease is still live while this
	// sets it up, so the sweeper leaves it alone).
	live := durability.Lease{Owner: "gone", Now: now - 60_000, Until: now + 60_000}
	if _, rec, err := b.outbox.Put(ctx, durability.OutboxPut{Key: "k1", Provider: "web", Chat: "c1", Payload: []byte(`{"text":"hi"}`)}, live.Now, &live); err != nil {
		t.Fatal(err)
	} else if err := b.outbox.MarkSent(ctx, "k1", rec.Token, "ref-9", now-50_000); err != nil {
		t.Fatal(err)
	}
	s := send.Spec{Provider: "web", Chat: "c1", Msg: rules.OutboxMessage{Text: "hi"}, Key: "k1", Inbound: "web:m0"}
	// The crashed incarnation had claimed the hook's record: it is put in
	// flight at once (no sweep can take it first), its lease expired.
	put, err := send.AfterPut(s, []string{"k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.outbox.Put(ctx, put, l.Now, &l); err != nil {
		t.Fatal(err)
	}
	b.wake.Notify()
	if !waitFor(60*time.Second, func() bool { n, _ := g.afterRuns("k1"); return n > 0 }) {
		t.Fatalf("after_send never ran again: %+v", b.outboxRecord(t, rules.AfterSendKey("k1")))
	}
	if _, h := g.afterRuns("k1"); h.Ref != "ref-9" || h.Event != "web:m0" || h.Text != "hi" {
		t.Errorf("after_send saw %+v", h)
	}
	if !waitFor(60*time.Second, func() bool { return b.outboxRecord(t, rules.AfterSendKey("k1")).State == durability.OutboxSent }) {
		t.Fatalf("record %+v, want sent", b.outboxRecord(t, rules.AfterSendKey("k1")))
	}
	if m := b.Observer().Metrics(); m.OutboxAmbiguous != 0 {
		t.Errorf("outbox_ambiguous = %d: a hook's record is run again, not counted ambiguous", m.OutboxAmbiguous)
	}
}

func mapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// TestSignatureExample runs examples/signature, a real module with both send
// hooks, behind the webchat channel: each reply is signed by its
// before-send hook, a reply that mentions a password is cancelled (never
// sent), and the after-send hook logs each delivered reply with its id.
func TestSignatureExample(t *testing.T) {
	base, logs := startBot(t, wasmbuild.Go(t, "../examples/signature"), "")
	if code := postMessage(t, base, "s", "hi", "s1"); code != 202 {
		t.Fatalf("POST: %d", code)
	}
	if got := replies(t, base, "s", 1, 30*time.Second); len(got) != 1 || got[0] != "echo: hi\n-- botrun" {
		t.Fatalf("replies %q", got)
	}
	// The chat's messages are handled in order: once "bye" is answered,
	// the password message was handled, and its reply cancelled.
	for i, text := range []string{"my password is 1234", "bye"} {
		if code := postMessage(t, base, "s", text, fmt.Sprint("s", i+2)); code != 202 {
			t.Fatalf("POST: %d", code)
		}
	}
	got := replies(t, base, "s", 2, 30*time.Second)
	if len(got) != 2 || got[1] != "echo: bye\n-- botrun" {
		t.Fatalf("replies %q, want the password's reply cancelled", got)
	}
	if !waitFor(60*time.Second, func() bool {
		return strings.Contains(logs.String(), "delivered web:s3:1 to s as message ")
	}) {
		t.Fatalf("the after-send hook did not log the delivery of web:s3:1:\n%s", logs.String())
	}
}

// TestHookReplayAndOperatorActions: a replay whose before_send now cancels
// a send journaled before answers from the journal (what was journaled goes
// out once, and its after_send runs); an operator's retry of a send that
// died re-arms its after_send, which runs once it is delivered; a discard
// drops the after_send record with the send.
func TestHookReplayAndOperatorActions(t *testing.T) {
	var mu sync.Mutex
	cancel, down := false, true
	var results []abi.SendStatus
	g := &hookGuest{
		before: func(h abi.SendHook) (wasm.BeforeSend, error) {
			mu.Lock()
			defer mu.Unlock()
			return wasm.BeforeSend{Cancel: cancel && h.Text == "x"}, nil
		},
		afterErr: func(int, abi.SendHook) error { return nil },
	}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "x"})
		mu.Lock()
		results = append(results, res.Status)
		mu.Unlock()
		if err != nil {
			return err
		}
		_, err = env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "flaky"})
		return err
	}
	ch := newChannel()
	ch.fail = func(_ int, out channel.Outbound) error {
		mu.Lock()
		defer mu.Unlock()
		if out.Text == "flaky" && down {
			return &channel.PermanentError{Err: errors.New("blocked for now")}
		}
		return nil
	}
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, ch)
	defer b.stop(t)
	ctx := context.Background()
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	settled := func(key string) bool {
		rec, err := b.outbox.Get(ctx, rules.AfterSendKey(key))
		return err == nil && rec.State == durability.OutboxSent
	}
	if !waitFor(60*time.Second, func() bool { return settled("web:m1:1") && settled("web:m1:2") }) {
		t.Fatal("the after_send records did not settle")
	}
	if n, _ := g.afterRuns("web:m1:2"); n != 0 {
		t.Fatalf("after_send ran for a dead send")
	}
	mu.Lock()
	cancel, down = true, false
	mu.Unlock()
	if err := b.Operator().ReplayInbound(ctx, "web:m1"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(results) == 2 }) || !b.quiet(1, 60*time.Second) {
		t.Fatal("the replay did not run")
	}
	mu.Lock()
	if results[1] != abi.SendDeduped {
		t.Errorf("the replay's send answered %q, want deduped from the journal (the hook now cancels it)", results[1])
	}
	mu.Unlock()
	if n := ch.count("c1", "x"); n != 1 {
		t.Errorf("x delivered %d times", n)
	}
	if err := b.Operator().RetrySend(ctx, "web:m1:2"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { n, _ := g.afterRuns("web:m1:2"); return n == 1 && settled("web:m1:2") }) {
		t.Fatalf("after_send did not run once the retried send was delivered: %+v", b.outboxRecord(t, rules.AfterSendKey("web:m1:2")))
	}
	if n, _ := g.afterRuns("web:m1:1"); n != 1 {
		t.Errorf("after_send of web:m1:1 ran %d times, want 1", n)
	}
	if err := b.Operator().Discard(ctx, "web:m1:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.outbox.Get(ctx, rules.AfterSendKey("web:m1:1")); !errors.Is(err, durability.ErrNotFound) {
		t.Errorf("the discarded send's after_send record is still there (err %v)", err)
	}
}

// TestAfterSendAfterAnInlineDeadSendIsRetried: a send that went dead inline
// (the channel refused it while the handler waited) gets its after_send
// once an operator retries it and it is delivered, through the admin API's
// retry (Bot.RetrySend) and the CLI's (RetrySend, from another process).
func TestAfterSendAfterAnInlineDeadSendIsRetried(t *testing.T) {
	var mu sync.Mutex
	down := true
	g := &hookGuest{afterErr: func(int, abi.SendHook) error { return nil }}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, text := range []string{"api", "cli"} {
			if res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text}); err != nil || res.Status != abi.SendDead {
				t.Errorf("send %q = %+v, %v; want dead inline", text, res, err)
			}
		}
		return nil
	}
	ch := newChannel()
	ch.fail = func(int, channel.Outbound) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return &channel.PermanentError{Err: errors.New("blocked for now")}
		}
		return nil
	}
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, ch)
	defer b.stop(t)
	ctx := context.Background()
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the event did not settle")
	}
	mu.Lock()
	down = false
	mu.Unlock()
	if err := b.Operator().RetrySend(ctx, "web:m1:1"); err != nil {
		t.Fatal(err)
	}
	if err := cliOperator(b.Bot).RetrySend(ctx, "web:m1:2"); err != nil {
		t.Fatal(err)
	}
	b.wake.Notify()
	for _, key := range []string{"web:m1:1", "web:m1:2"} {
		if !waitFor(60*time.Second, func() bool { n, _ := g.afterRuns(key); return n == 1 }) {
			t.Errorf("after_send of %s did not run once the retried send was delivered (after_send record: %+v)", key, b.outboxRecord(t, rules.AfterSendKey(key)))
		}
	}
}

// TestBroadcastHooksShareTheEventsBudget: a broadcast to 50 chats whose
// botrun_before_send spins is cut at the event's one hook budget (its
// handler_timeout): the hook runs once per attempt of the event, every
// chat's send is refused (cancelled, fail-closed: none goes out unhooked),
// and the event itself completes, its handler told so.
func TestBroadcastHooksShareTheEventsBudget(t *testing.T) {
	base, logs := startBot(t, wasmbuild.Go(t, "wasm/testdata/guests/slowhook"), "handler_timeout = \"3s\"\n")
	if code := postMessage(t, base, "s", "spin", "s1"); code != 202 {
		t.Fatalf("POST: %d", code)
	}
	if !waitFor(120*time.Second, func() bool { return strings.Contains(logs.String(), "broadcast journaled=") }) {
		t.Fatalf("the handler did not finish its broadcast:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "broadcast journaled=0 cancelled=50") {
		t.Errorf("want every chat's send refused once the event's hook budget is spent:\n%s", logs.String())
	}
	// A loaded machine may cut the handler itself and retry the event: its
	// hooks get one budget per attempt, never one per chat.
	attempts := 1 + strings.Count(logs.String(), "msg=\"event failed")
	if n := strings.Count(logs.String(), "hook ran for"); n < 1 || n > attempts {
		t.Errorf("the spinning hook ran %d times in %d attempts of one event, want once per attempt", n, attempts)
	}
}

// TestOperatorSendsRunTheSendHooks: a send made outside any handler runs
// the module's botrun_before_send as it is delivered, and its
// botrun_after_send once delivered, wherever it was journaled from: the
// admin API's send and broadcast (Bot.SendLater, Bot.BroadcastLater) and
// botrun send and broadcast, which journal from another process (Enqueue,
// Broadcast). A hook used as a filter filters them all: a cancelled send
// is dead, never delivered.
func TestOperatorSendsRunTheSendHooks(t *testing.T) {
	g := &hookGuest{
		before: func(h abi.SendHook) (wasm.BeforeSend, error) {
			if strings.Contains(h.Text, "secret") {
				return wasm.BeforeSend{Cancel: true}, nil
			}
			return wasm.BeforeSend{Rewrite: &abi.SendRequest{Chat: h.Chat, Text: strings.ToUpper(h.Text) + "!"}}, nil
		},
		afterErr: func(int, abi.SendHook) error { return nil },
	}
	g.native = func(context.Context, abi.Event, wasm.Env) error { return nil }
	ch := newChannel()
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, ch)
	defer b.stop(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Operator().SendLater(ctx, "web", "c1", "secret admin", "k1", 0)
	must(err)
	_, err = b.Operator().SendLater(ctx, "web", "c1", "hello admin", "k2", 0)
	must(err)
	cli := cliOperator(b.Bot)
	_, err = cli.SendLater(ctx, "web", "c1", "secret cli", "k3", 0)
	must(err)
	_, err = cli.SendLater(ctx, "web", "c1", "hello cli", "k4", 0)
	must(err)
	_, err = b.Operator().BroadcastLater(ctx, "web", abi.BroadcastRequest{Chats: []string{"c2", "c3"}, Text: "secret news", KeyPrefix: "a"})
	must(err)
	_, err = cli.BroadcastLater(ctx, "web", abi.BroadcastRequest{Chats: []string{"c4"}, Text: "cli news", KeyPrefix: "b"})
	must(err)
	b.wake.Notify()
	keys := []string{"k1", "k2", "k3", "k4", "a:c2", "a:c3", "b:c4"}
	if !waitFor(60*time.Second, func() bool {
		for _, k := range keys {
			if rec, err := b.outbox.Get(ctx, k); err != nil || !rec.State.Terminal() {
				return false
			}
		}
		return b.settled(0)
	}) {
		t.Fatal("the operator's sends did not settle")
	}
	if len(ch.texts()) != 3 {
		t.Errorf("delivered %q; want only the hooked rewrites of the sends the hook let through", ch.texts())
	}
	for _, text := range []string{"HELLO ADMIN!", "HELLO CLI!", "CLI NEWS!"} {
		if n := len(slices.DeleteFunc(ch.texts(), func(s string) bool { return s != text })); n != 1 {
			t.Errorf("%q delivered %d times, want once", text, n)
		}
	}
	for _, k := range []string{"k1", "k3", "a:c2", "a:c3"} {
		if rec := b.outboxRecord(t, k); rec.State != durability.OutboxDead || !strings.Contains(rec.Error, "botrun_before_send") {
			t.Errorf("%s: %s %q; want dead, cancelled by botrun_before_send", k, rec.State, rec.Error)
		}
	}
	for _, k := range []string{"k2", "k4", "b:c4"} {
		if n, h := g.afterRuns(k); n != 1 || h.Text != strings.ToUpper(h.Text) {
			t.Errorf("after_send of %s ran %d times (%+v), want once with the rewritten text", k, n, h)
		}
	}
}

// TestBroadcastAfterSendHooksShareTheEventsBudget: the botrun_after_send
// calls of one event's broadcast share one budget too (the outbox runs them
// several at a time): hooks that spin are cut at the event's bound, at most
// one per send worker running at once, and the other chats' after_send
// records are refused without running: dead, for an operator to see.
func TestBroadcastAfterSendHooksShareTheEventsBudget(t *testing.T) {
	const workers = 8
	base, logs := startBot(t, wasmbuild.Go(t, "wasm/testdata/guests/slowhook"), fmt.Sprintf("handler_timeout = \"3s\"\nworkers = %d\n", workers))
	if code := postMessage(t, base, "s", "spin after", "s1"); code != 202 {
		t.Fatalf("POST: %d", code)
	}
	if !waitFor(180*time.Second, func() bool {
		return strings.Count(logs.String(), "msg=dead-lettered") >= 50
	}) {
		t.Fatalf("the after_send records were not all settled dead:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "broadcast journaled=50 cancelled=0") {
		t.Errorf("the broadcast did not journal its 50 chats:\n%s", logs.String())
	}
	// Hooks that started before the first was cut each ran to what was
	// left: at most one per send worker (half the workers).
	if n := strings.Count(logs.String(), "after ran for"); n < 1 || n > workers/2 {
		t.Errorf("the spinning after_send ran %d times for one event, want 1 to %d (the send workers)", n, workers/2)
	}
}

// TestBroadcastAfterSendHooksRunOncePerChat: a botrun_after_send that
// returns at once runs for each of a broadcast's 50 chats, though the
// outbox runs several at a time on the event's one budget: no hook is
// refused because another of its event was running.
func TestBroadcastAfterSendHooksRunOncePerChat(t *testing.T) {
	base, logs := startBot(t, wasmbuild.Go(t, "wasm/testdata/guests/slowhook"), "handler_timeout = \"3s\"\n")
	if code := postMessage(t, base, "s", "quick after", "s1"); code != 202 {
		t.Fatalf("POST: %d", code)
	}
	if !waitFor(180*time.Second, func() bool {
		return strings.Count(logs.String(), "after quick for") >= 50 || strings.Contains(logs.String(), "msg=dead-lettered")
	}) {
		t.Fatalf("the after_send hooks did not all run:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "after quick for"); n != 50 || strings.Contains(logs.String(), "msg=dead-lettered") {
		t.Errorf("after_send ran %d times for a broadcast to 50 chats (want 50, none dead-lettered):\n%s", n, logs.String())
	}
}

// TestOperatorBroadcastHooksShareABudget: an operator's broadcast (the
// admin API's, botrun broadcast) to 20 chats whose botrun_before_send
// spins shares one hook budget (bot.handler_timeout) across its chats and
// their attempts, as an event's do: the hook runs at most once per send
// worker running at once, and every chat's send is refused, dead (fail
// closed: none goes out unhooked).
func TestOperatorBroadcastHooksShareABudget(t *testing.T) {
	const workers = 8
	b, _, logs := runBot(t, wasmbuild.Go(t, "wasm/testdata/guests/slowhook"), fmt.Sprintf("handler_timeout = \"3s\"\nworkers = %d\n", workers))
	ctx := context.Background()
	chats := make([]string, 20)
	for i := range chats {
		chats[i] = fmt.Sprint("c", i)
	}
	if _, err := b.Operator().BroadcastLater(ctx, "web", abi.BroadcastRequest{Chats: chats, Text: "spin", KeyPrefix: "op"}); err != nil {
		t.Fatal(err)
	}
	ran := func() int { return strings.Count(logs.String(), "hook ran for") }
	if !waitFor(180*time.Second, func() bool {
		if ran() > workers/2 {
			return true
		}
		for _, c := range chats {
			if rec, err := b.outbox.Get(ctx, "op:"+c); err != nil || !rec.State.Terminal() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the broadcast's sends did not settle:\n%s", logs.String())
	}
	if n := ran(); n < 1 || n > workers/2 {
		t.Errorf("the spinning hook ran %d times for one broadcast of 20 chats, want 1 to %d (the send workers)", n, workers/2)
	}
	for _, c := range chats {
		if rec, err := b.outbox.Get(ctx, "op:"+c); err != nil || rec.State != durability.OutboxDead {
			t.Errorf("op:%s: %s (%v); want dead, refused for want of its hook", c, rec.State, err)
		}
	}
}

// TestPostGrownPastMaxEventBytesIsDead: a posted send that
// botrun_before_send rewrites past the event's bot.max_event_bytes is
// refused (dead, never journaled) when the posted sends are made; it is
// not a fault: the event's other posts are made and the event completes.
func TestPostGrownPastMaxEventBytesIsDead(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Bot.MaxEventBytes = 1 << 20
	g := &hookGuest{before: func(h abi.SendHook) (wasm.BeforeSend, error) {
		if h.Text == "grow" {
			return wasm.BeforeSend{Rewrite: &abi.SendRequest{Chat: h.Chat, Text: strings.Repeat("x", 1<<20+1)}}, nil
		}
		return wasm.BeforeSend{}, nil
	}}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, text := range []string{"grow", "ok"} {
			if _, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: text}); err != nil {
				return err
			}
		}
		return nil
	}
	ch := newChannel()
	b := newTestBot(t, cfg, backends["sqlite"](t), g, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !waitFor(60*time.Second, func() bool {
		rec := b.inboxState(t, "web:m1")
		return rec.State == durability.InboxDone || rec.Error != ""
	}) {
		t.Fatal("the event did not settle")
	}
	if rec := b.inboxState(t, "web:m1"); rec.State != durability.InboxDone || rec.Error != "" {
		t.Errorf("the event is %s (%q): a post refused for bot.max_event_bytes fails it; want it done", rec.State, rec.Error)
	}
	if !waitFor(60*time.Second, func() bool { return slices.Contains(ch.texts(), "ok") }) {
		t.Errorf("the event's other post was not made: %q", ch.texts())
	}
	if _, err := b.outbox.Get(context.Background(), "web:m1:1"); !errors.Is(err, durability.ErrNotFound) {
		t.Errorf("the grown post: %v; want it never journaled", err)
	}
}

// TestAfterSendRecordsCountInMaxEventBytes: each after_send record copies
// its send's content, so it is charged to the event's bot.max_event_bytes
// with the send: a broadcast whose copies and records pass it is refused,
// and what the event journals, records included, stays under the bound.
func TestAfterSendRecordsCountInMaxEventBytes(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Bot.MaxEventBytes = 1 << 20
	big := strings.Repeat("x", 100<<10)
	var mu sync.Mutex
	var got []string
	g := &hookGuest{afterErr: func(int, abi.SendHook) error { return nil }}
	g.native = func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, n := range []int{8, 4} {
			chats := make([]string, n)
			for i := range chats {
				chats[i] = fmt.Sprint("c", i)
			}
			_, err := env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: chats, Text: big, KeyPrefix: fmt.Sprint("b", n)})
			mu.Lock()
			got = append(got, fmt.Sprintf("%d:%v", n, errors.Is(err, wasm.ErrTooLarge)))
			mu.Unlock()
		}
		return nil
	}
	b := newTestBot(t, cfg, backends["sqlite"](t), g, newChannel())
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the event did not settle")
	}
	mu.Lock()
	if s := strings.Join(got, " "); s != "8:true 4:false" {
		t.Errorf("broadcasts refused (true) and taken: %s; want 8:true 4:false (8 copies and their after_send records pass 1 MiB)", s)
	}
	mu.Unlock()
	if n, total := b.journaled(t); total > 1<<20 {
		t.Errorf("the event journaled %d records, %d bytes with their after_send records: over bot.max_event_bytes", n, total)
	}
}

// TestOperatorSendRefusedByAHookErrorIsADeadLetter: an operator's send
// that botrun_before_send fails (its error, or its budget spent) is a dead
// letter like a failed send's: counted in outbox_dead, with the
// outbox:dead alert. One the hook cancels (a filter's choice) is dead
// without an alert.
func TestOperatorSendRefusedByAHookErrorIsADeadLetter(t *testing.T) {
	g := &hookGuest{before: func(h abi.SendHook) (wasm.BeforeSend, error) {
		switch h.Text {
		case "bad":
			return wasm.BeforeSend{}, &wasm.HandlerError{Message: "hook says no"}
		case "secret":
			return wasm.BeforeSend{Cancel: true}, nil
		}
		return wasm.BeforeSend{}, nil
	}}
	g.native = func(context.Context, abi.Event, wasm.Env) error { return nil }
	b := newTestBot(t, testConfig(t, ""), backends["sqlite"](t), g, newChannel())
	defer b.stop(t)
	ctx := context.Background()
	for key, text := range map[string]string{"k-bad": "bad", "k-secret": "secret"} {
		if _, err := b.Operator().SendLater(ctx, "web", "c1", text, key, 0); err != nil {
			t.Fatal(err)
		}
	}
	b.wake.Notify()
	if !waitFor(60*time.Second, func() bool {
		for _, k := range []string{"k-bad", "k-secret"} {
			if rec, err := b.outbox.Get(ctx, k); err != nil || rec.State != durability.OutboxDead {
				return false
			}
		}
		// The metric is counted once the dead letter is journaled.
		return b.metrics.OutboxDead.Load() > 0
	}) {
		t.Fatal("the operator's sends were not settled dead")
	}
	b.sweeps(t, 3)
	if n := b.metrics.OutboxDead.Load(); n != 1 {
		t.Errorf("outbox_dead = %d, want 1 (the hook's error; not the cancel)", n)
	}
	var dead []string
	waitFor(60*time.Second, func() bool {
		for len(b.events) > 0 {
			if al := <-b.events; al.Name == observe.AlertDead {
				dead = append(dead, al.Key)
			}
		}
		return slices.Contains(dead, "k-bad")
	})
	if !slices.Equal(dead, []string{"k-bad"}) {
		t.Errorf("outbox:dead alerts for %q, want for k-bad only", dead)
	}
}

// cliOperator is an operator over b's journals alone, as botrun's CLI
// builds one from another process.
func cliOperator(b *Bot) *ops.Operator {
	return NewOperator(b.cfg, durability.Journals{Inbox: b.inbox, Outbox: b.outbox, State: b.state}, b.kv)
}
