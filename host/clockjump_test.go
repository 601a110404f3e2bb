package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/host/channel/httpchan/httpchantest"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/soak"
)

// TestClockJumps runs a bot (on SQLite, PostgreSQL, Redis and the file
// journal) on an injected clock that NTP steps forward
// and back by minutes while it works: forward past the lease of a turn in
// flight (the sweeper takes the record over; the fence and the outbox's
// keys keep its reply single), back by 20 minutes (new messages are
// answered at once; a scheduled send is not sent early), then forward to
// the scheduled time (each goes out once). Nothing is sent twice and
// nothing is purged.
func TestClockJumps(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres", "redis", "file"} {
		t.Run(name, func(t *testing.T) { clockJumps(t, name) })
	}
	if soak.On() {
		rng := soak.Rand(t, "./host")
		for _, name := range []string{"sqlite", "postgres", "redis", "file"} {
			t.Run(name+"/random", func(t *testing.T) { clockJumpsRandom(t, name, rng) })
		}
	}
}

// passing makes time pass on fake at about the real rate until t ends
// (the jumps are steps of the wall clock on top): what waits on it (a
// backoff, a heartbeat) comes due, as on a real clock, and the scheduled
// sends (an hour away) stay far off.
func passing(t *testing.T, fake *clock.Fake) {
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				fake.Advance(20 * time.Millisecond)
			}
		}
	}()
}

// clockJumpsRandom is make soak's clock schedule: 40 rounds of two
// messages, each followed by a step of the wall clock drawn from rng
// (forward up to 3 h, back up to 30 min); then the clock is set past every
// scheduled send. Each message is answered once, each scheduled send goes
// out once and never before its time by the bot's clock, and no record is
// purged.
func clockJumpsRandom(t *testing.T, backend string, rng *rand.Rand) {
	fake := clock.NewFake(time.Now())
	handler := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		due := ev.ReceivedAt + time.Hour.Milliseconds()
		if _, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: fmt.Sprintf("later: %s @%d", ev.Text, due), At: due}); err != nil {
			return err
		}
		_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		return err
	})
	// Retention 1 h: the steps forward (up to 3 h each) must purge
	// nothing.
	cfg := testConfig(t, "[durability]\nretention = \"1h\"")
	cfg.Bot.ID = uniquePrefix("clockr")
	ch := newChannel()
	// dues are the scheduled sends' keys and times: each must be claimed
	// (its lease's start, by the bot's clock) at or after its time. (Not
	// judged at the channel: a send claimed when due may reach it after
	// the clock stepped back.)
	dues := map[string]int64{}
	var maxDue int64
	ch.fail = func(_ int, out channel.Outbound) error {
		var id string
		var due int64
		if n, _ := fmt.Sscanf(out.Text, "later: %s @%d", &id, &due); n == 2 {
			dues[out.Key] = due
		}
		return nil
	}
	tb := newTestBotWith(t, cfg, Options{Backend: backends[backend](t), Guest: handler, Channels: []channel.Channel{ch}, Clock: fake})
	defer tb.stop(t)
	passing(t, fake)
	var ids, steps []string
	for round := range 40 {
		for _, x := range []string{"a", "b"} {
			id := fmt.Sprintf("r%d%s", round, x)
			ids = append(ids, id)
			if _, err := tb.admit(t, "c-"+id, id, id); err != nil {
				t.Fatalf("admit %s: %v", id, err)
			}
			maxDue = max(maxDue, fake.Now().Add(time.Hour).UnixMilli())
		}
		if !waitFor(time.Minute, func() bool {
			return ch.count("c-"+ids[len(ids)-1], "echo: "+ids[len(ids)-1]) > 0 && ch.count("c-"+ids[len(ids)-2], "echo: "+ids[len(ids)-2]) > 0
		}) {
			t.Fatalf("round %d (after %v): not answered: %v", round, steps, ch.texts())
		}
		step := time.Duration(rng.Int64N(int64(3*time.Hour))) + time.Minute
		if rng.IntN(2) == 0 {
			step = -time.Duration(rng.Int64N(int64(30*time.Minute))) - time.Minute
		}
		steps = append(steps, step.Round(time.Second).String())
		fake.Step(step)
		tb.sweeper.Purge(context.Background())
		tb.sweeps(t, 2)
	}
	// Past every scheduled send (each was due an hour after its message,
	// by the clock then).
	if now := fake.Now().UnixMilli(); now <= maxDue {
		fake.Step(time.Duration(maxDue-now)*time.Millisecond + time.Minute)
	}
	later := func(id string) int {
		n := 0
		for _, text := range ch.texts() {
			var got string
			var due int64
			if k, _ := fmt.Sscanf(text, "later: %s @%d", &got, &due); k == 2 && got == id {
				n++
			}
		}
		return n
	}
	if !waitFor(2*time.Minute, func() bool {
		for _, id := range ids {
			if later(id) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("steps %v: scheduled sends missing: %v", steps, ch.texts())
	}
	tb.sweeps(t, 3)
	t.Logf("steps %v", steps)
	for _, id := range ids {
		if n := ch.count("c-"+id, "echo: "+id); n != 1 {
			t.Errorf("steps %v: echo %s sent %d times, want once", steps, id, n)
		}
		if n := later(id); n != 1 {
			t.Errorf("steps %v: the scheduled send of %s went out %d times, want once", steps, id, n)
		}
		if _, err := tb.inbox.Get(context.Background(), "web:"+id); err != nil {
			t.Errorf("steps %v: %s's record: %v (purged?)", steps, id, err)
		}
	}
	ch.mu.Lock()
	claimed := maps.Clone(dues)
	ch.mu.Unlock()
	for key, due := range claimed {
		if r := tb.outboxRecord(t, key); r.LeasedAt < due {
			t.Errorf("steps %v: %s claimed %d ms before its time", steps, key, due-r.LeasedAt)
		}
	}
}

func clockJumps(t *testing.T, backend string) {
	fake := clock.NewFake(time.Now())
	entered := make(chan string, 16)
	gate := make(chan struct{})
	handler := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		if ev.Text == "slow" {
			entered <- ev.ID
			<-gate
		}
		if _, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "later: " + ev.Text, At: ev.ReceivedAt + time.Hour.Milliseconds()}); err != nil {
			return err
		}
		_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		return err
	})
	// Retention 1 h: the steps forward (2 h) must purge nothing.
	cfg := testConfig(t, "[durability]\nretention = \"1h\"")
	cfg.Bot.ID = uniquePrefix("clock")
	ch := newChannel()
	tb := newTestBotWith(t, cfg, Options{Backend: backends[backend](t), Guest: handler, Channels: []channel.Channel{ch}, Clock: fake})
	defer tb.stop(t)
	passing(t, fake)
	admit := func(id, text string) {
		t.Helper()
		if _, err := tb.admit(t, "c-"+id, id, text); err != nil {
			t.Fatalf("admit %s: %v", id, err)
		}
	}
	once := func(texts ...string) {
		t.Helper()
		for _, text := range texts {
			id := text[len("echo: "):]
			if text[:6] == "later:" {
				id = text[len("later: "):]
			}
			if n := ch.count("c-"+id, text); n != 1 {
				t.Errorf("%q sent %d times, want once (sent: %v)", text, n, ch.texts())
			}
		}
	}

	for i := range 3 {
		admit(fmt.Sprint("m", i), fmt.Sprint("m", i))
	}
	answered := func(ids ...string) bool {
		for _, id := range ids {
			if ch.count("c-"+id, "echo: "+id) == 0 {
				return false
			}
		}
		return true
	}
	if !waitFor(time.Minute, func() bool { return answered("m0", "m1", "m2") }) {
		t.Fatalf("the first messages were not answered: %v", ch.texts())
	}
	once("echo: m0", "echo: m1", "echo: m2")

	// Forward 10 minutes while a turn is in flight: its lease looks
	// expired; the record may be taken over and run again.
	admit("slow", "slow")
	<-entered
	fake.Step(10 * time.Minute)
	tb.sweeps(t, 3)
	// Either the sweeper saw the lease expired and took the record over,
	// or the turn's heartbeat (its timer fired by the jump) extended the
	// lease first: both are right, and the reply is single either way.
	// (TestClockSkewBetweenReplicas forces the takeover.)
	takenOver := tb.inboxState(t, "web:slow").Attempts > 1
	close(gate)
	if !waitFor(time.Minute, func() bool { return answered("slow") }) {
		t.Fatalf("the slow message was not answered after the jump forward: %v", ch.texts())
	}
	if takenOver {
		// The takeover's run (queued behind the chat's turn in flight)
		// enters the handler once that one ends.
		if !waitFor(time.Minute, func() bool { return len(entered) > 0 }) {
			t.Fatal("the record was taken over but never run again")
		}
	}
	tb.sweeps(t, 3)
	once("echo: slow")
	t.Logf("jump forward with a turn in flight: taken over %v", takenOver)

	// Back 20 minutes: new messages are answered at once, and the
	// scheduled sends (due an hour after their message) stay held.
	fake.Step(-20 * time.Minute)
	for i := 3; i < 6; i++ {
		admit(fmt.Sprint("m", i), fmt.Sprint("m", i))
	}
	if !waitFor(time.Minute, func() bool { return answered("m3", "m4", "m5") }) {
		out, _ := tb.Operator().ListOutbox(context.Background(), durability.ListFilter{})
		in, _ := tb.Operator().ListInbox(context.Background(), durability.ListFilter{})
		t.Fatalf("messages after the jump back were not answered: %v\nclock %d\noutbox %+v\ninbox %+v", ch.texts(), fake.Now().UnixMilli(), out, in)
	}
	tb.sweeps(t, 3)
	for _, text := range ch.texts() {
		if len(text) > 6 && text[:6] == "later:" {
			t.Errorf("%q was sent before its time", text)
		}
	}

	// Forward past every scheduled time: each goes out once.
	fake.Step(2 * time.Hour)
	if !tb.quiet(7, time.Minute) {
		t.Fatalf("not settled after the jump past the scheduled times: %v", ch.texts())
	}
	once("echo: m0", "echo: m1", "echo: m2", "echo: slow", "echo: m3", "echo: m4", "echo: m5")
	once("later: m0", "later: m1", "later: m2", "later: slow", "later: m3", "later: m4", "later: m5")
	// Nothing was purged (a purge now, on the clock stepped 2 h past the
	// 1 h retention): every message is still in the inbox.
	tb.sweeper.Purge(context.Background())
	for _, id := range []string{"m0", "m1", "m2", "slow", "m3", "m4", "m5"} {
		tb.inboxState(t, "web:"+id)
	}
}

// TestClockSkewBetweenReplicas runs two replicas on one PostgreSQL journal,
// the second's clock ahead of the first's, while the first runs a slow
// turn. A skew under the lease's remaining time (here a quarter of the
// 2 s lease) is tolerated: the second never takes the record. A skew
// beyond the lease (two leases) makes the second see the first's lease
// expired and run the record again: work is repeated, but the fence and
// the outbox's key keep the reply single.
func TestClockSkewBetweenReplicas(t *testing.T) {
	for _, c := range []struct {
		name     string
		skew     time.Duration
		takeover bool
	}{{"under the lease", 500 * time.Millisecond, false}, {"beyond the lease", 4 * time.Second, true}} {
		t.Run(c.name, func(t *testing.T) {
			shared := backends["postgres"](t)
			id := uniquePrefix("skew")
			start := time.Now()
			ch := newChannel()
			gate := make(chan struct{})
			entered := make(chan string, 16)
			var bots []*testBot
			for i, skew := range []time.Duration{0, c.skew} {
				name := fmt.Sprint("replica-", i)
				handler := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
					entered <- name
					<-gate
					_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
					return err
				})
				cfg := testConfig(t, "")
				cfg.Bot.ID = id
				cfg.Durability.InstanceID = name
				b, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: shared, Guest: handler,
					Channels: []channel.Channel{ch}, Clock: clock.NewFake(start.Add(skew))})
				if err != nil {
					t.Fatal(err)
				}
				tb := &testBot{Bot: b}
				b.Start()
				t.Cleanup(func() { tb.stop(t) })
				bots = append(bots, tb)
			}
			if _, err := bots[0].admit(t, "c1", "m1", "slow"); err != nil {
				t.Fatal(err)
			}
			var who string
			select {
			case who = <-entered:
			case <-time.After(time.Minute):
				t.Fatal("the admitted message was not run within a minute")
			}
			// Two leases ahead, the second replica sees the new lease
			// expired at once and may run the message first.
			if who != "replica-0" && !c.takeover {
				t.Fatalf("%s ran the message first, want replica-0 (it admitted it)", who)
			}
			if c.takeover {
				// The second replica sees the lease expired at one of its
				// sweeps.
				if !waitFor(time.Minute, func() bool { return bots[0].inboxState(t, "web:m1").Attempts > 1 }) {
					t.Fatalf("skew %s: the second replica did not take the record over within a minute", c.skew)
				}
			} else {
				bots[1].sweeps(t, 5)
			}
			close(gate)
			if !waitFor(time.Minute, func() bool { return ch.count("c1", "echo: slow") > 0 }) {
				t.Fatalf("not answered: %v", ch.texts())
			}
			bots[0].sweeps(t, 3)
			bots[1].sweeps(t, 3)
			if n := ch.count("c1", "echo: slow"); n != 1 {
				t.Errorf("the reply was sent %d times, want once", n)
			}
			attempts := bots[0].inboxState(t, "web:m1").Attempts
			if took := attempts > 1; took != c.takeover {
				t.Errorf("skew %s: the second replica took the record over: %v (attempts %d), want %v", c.skew, took, attempts, c.takeover)
			}
		})
	}
}

// TestClockJumpsSignedWebhooks steps the wall clock of a bot with a signed
// webhook channel (the generic HTTP channel, a 5-minute signature window,
// retention 1 h): the window is judged by the bot's clock, so a request
// signed at the real time is refused while the clock is off by more than
// the window; and a clock stepped 2 h forward purges nothing early, so a
// request captured before the step and replayed once the clock is back
// (its signature in the window again) is still known and not answered
// twice.
func TestClockJumpsSignedWebhooks(t *testing.T) {
	const secret = "a-gateway-secret-of-32-bytes-...."
	gw := httpchantest.New(secret, "c1", "c2")
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	src := "[bot]\nmodule = \"unused.wasm\"\nworkers = 2\n" + mergeTOML(fastDurability, "[durability]\nretention = \"1h\"") +
		fmt.Sprintf("\n[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\n", gwSrv.URL, secret)
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"), src, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Bot.DataDir = filepath.Dir(testCacheDir)
	cfg.Bot.ID = uniquePrefix("clocksig")
	fake := clock.NewFake(time.Now())
	handler := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		return err
	})
	tb := newTestBotWith(t, cfg, Options{Backend: backends["sqlite"](t), Guest: handler, Clock: fake})
	defer tb.stop(t)
	passing(t, fake)
	srv := httptest.NewServer(tb.Handler())
	defer srv.Close()
	// signed is a webhook as the gateway sends it: signed by its (real)
	// clock at when; post posts one (a captured one again and again).
	type webhook struct {
		body   []byte
		header http.Header
	}
	signed := func(id, chat string, when time.Time) webhook {
		body, _ := json.Marshal(httpchan.Inbound{ID: id, Chat: chat, From: "u", Text: id})
		h := http.Header{"Content-Type": {"application/json"}}
		httpchan.SignRequest(h, []byte(secret), body, when)
		return webhook{body, h}
	}
	post := func(w webhook) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/gw", bytes.NewReader(w.body))
		req.Header = w.header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	echoes := func(chat, text string) int {
		n := 0
		for _, s := range gw.Texts(chat) {
			if s == "echo: "+text {
				n++
			}
		}
		return n
	}

	captured := signed("m1", "c1", time.Now())
	if got := post(captured); got/100 != 2 {
		t.Fatalf("a webhook signed now: %d, want 2xx", got)
	}
	if !waitFor(time.Minute, func() bool { return echoes("c1", "m1") == 1 }) {
		t.Fatalf("m1 was not answered: %v", gw.Texts("c1"))
	}

	// The clock is stepped 2 h forward: the retention purge (1 h) runs
	// and deletes nothing (2 h of wall clock, seconds of real time); a
	// request signed at the real time is outside the window by the bot's
	// clock and refused, as the captured one is.
	fake.Step(2 * time.Hour)
	tb.sweeper.Purge(context.Background())
	if _, err := tb.inbox.Get(context.Background(), "gw:m1"); err != nil {
		t.Errorf("m1's record after the purge on a clock stepped 2 h forward: %v, want kept (retention 1 h, seconds old)", err)
	}
	if got := post(signed("m2", "c2", time.Now())); got != http.StatusUnauthorized {
		t.Errorf("a webhook signed at the real time, the bot's clock 2 h ahead: %d, want 401", got)
	}
	if got := post(captured); got != http.StatusUnauthorized {
		t.Errorf("the captured webhook, the bot's clock 2 h ahead: %d, want 401", got)
	}

	// Stepped back: the captured request's signature is in the window
	// again, and its record is still there: a duplicate, not answered.
	fake.Step(-2 * time.Hour)
	if got := post(captured); got/100 != 2 {
		t.Errorf("the captured webhook replayed once the clock is back: %d, want 2xx (a duplicate)", got)
	}
	if got := post(signed("m3", "c2", time.Now())); got/100 != 2 {
		t.Errorf("a new webhook once the clock is back: %d, want 2xx", got)
	}
	if !waitFor(time.Minute, func() bool { return echoes("c2", "m3") == 1 }) {
		t.Fatalf("m3 was not answered: %v", gw.Texts("c2"))
	}
	tb.sweeps(t, 3)
	if n := echoes("c1", "m1"); n != 1 {
		t.Errorf("m1 answered %d times, want once: the replay after the clock came back was taken as new", n)
	}
	if n := echoes("c2", "m2"); n != 0 {
		t.Errorf("m2 (refused as stale) answered %d times", n)
	}

	// A clock stepped back 20 min: a request signed at the real time is
	// 20 min in the future by the bot's clock and refused.
	fake.Step(-20 * time.Minute)
	if got := post(signed("m4", "c2", time.Now())); got != http.StatusUnauthorized {
		t.Errorf("a webhook signed at the real time, the bot's clock 20 min behind: %d, want 401", got)
	}
}
