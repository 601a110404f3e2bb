package host

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/botrun/botrun/internal/waitfor"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	eventsdurability "github.com/botrun/botrun/durability/events"
	"github.com/botrun/botrun/durability/file"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/eventjournal"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/internal/browsertest"
	"github.com/botrun/botrun/internal/testserver"
)

// crashCase is one crash point of the matrix.
type crashCase struct {
	op     string // a journal op or "channel.send"; empty with nth
	nth    int    // crash at the n-th counted write
	after  bool
	resend bool
	// channel is "" (a channel that cannot close the ambiguous window),
	// "idempotent" or "reconciling".
	channel string
}

func (c crashCase) String() string {
	when := "before"
	if c.after {
		when = "after"
	}
	policy := "skip"
	if c.resend {
		policy = "resend"
	}
	if c.channel != "" {
		policy += "/" + c.channel
	}
	if c.op == "" {
		return fmt.Sprintf("write%d/%s/%s", c.nth, when, policy)
	}
	return fmt.Sprintf("%s/%s/%s", c.op, when, policy)
}

var crashMessages = []struct{ chat, id, text string }{
	{"c1", "m1", "a"}, {"c2", "m2", "b"}, {"c1", "m3", "c"},
}

// runCrash drives one crash: bot A on a crashable view of a shared backend
// handles the messages until it dies at the crash point; bot B, a new bot on
// the same backend and instance id, takes over while the channel redelivers
// every message. It then checks the seed's guarantee table and returns B's
// metrics.
func runCrash(t *testing.T, newBackend func(t *testing.T) durability.Backend, c crashCase) observe.Metrics {
	t.Helper()
	shared := newBackend(t)
	defer shared.Close()
	crash := crashpoint.New(shared)
	switch {
	case c.op == "":
		crash.CrashAtWrite(c.nth, c.after)
	case c.after:
		crash.CrashAfter(c.op)
	default:
		crash.CrashBefore(c.op)
	}
	policy := "skip"
	if c.resend {
		policy = "resend"
	}
	cfg := testConfig(t, "on_ambiguous = \""+policy+"\"\n")
	cfg.Bot.ID = uniquePrefix("bot") // a scope of its own on a shared backend
	ch := newChannel()
	ch.dedupe = c.channel == "idempotent"
	a := newTestBot(t, cfg, crash, echoTwice, crashProvider{ch: ch, crash: crash})
	for _, m := range crashMessages {
		a.admit(t, m.chat, m.id, m.text) // an error means "not journaled": the channel redelivers below
	}
	// Until the crash, or the end if the crash point is past the last write.
	waitfor.Every(time.Millisecond, 60*time.Second, func() bool { return crash.Crashed() || a.settled(len(crashMessages)) })
	a.Kill()
	nextMilli(t) // B boots strictly after A's last lease

	var bch channel.Channel = ch
	switch c.channel {
	case "idempotent":
		ch.mu.Lock()
		ch.dedupe = true
		ch.mu.Unlock()
		bch = idempotentChannel{ch}
	case "reconciling":
		bch = reconcilingChannel{ch}
	}
	b := newTestBot(t, cfg, shared, echoTwice, bch)
	defer b.stop(t)
	for _, m := range crashMessages {
		if _, err := b.admit(t, m.chat, m.id, m.text); err != nil {
			t.Fatalf("%s: redelivery of %s: %v", c, m.id, err)
		}
	}
	if !b.quiet(len(crashMessages), 60*time.Second) {
		in, _ := b.Operator().ListInbox(context.Background(), durability.ListFilter{})
		out, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{})
		t.Fatalf("%s: bot B did not settle:\ninbox %+v\noutbox %+v", c, in, out)
	}
	checkGuarantees(t, c, b, ch)
	m := b.Observer().Metrics()
	t.Logf("%s: crashed=%v; bot B: journaled %d, duplicates %d, replayed %d, deduped %d, ambiguous %d, resolved %d; channel got %d sends",
		c, crash.Crashed(), m.InboundJournaled, m.InboundDuplicates, m.InboundReplayed, m.OutboxDeduped, m.OutboxAmbiguous, m.OutboxAmbiguousResolved, len(ch.texts()))
	return m
}

// checkGuarantees asserts the seed's table after a crash and a restart: every
// message is processed, and every reply goes out exactly once except the sends
// counted ambiguous, which skip may lose and resend may duplicate.
func checkGuarantees(t *testing.T, c crashCase, b *testBot, ch *fakeChannel) {
	t.Helper()
	ctx := context.Background()
	for _, m := range crashMessages {
		if r := b.inboxState(t, "web:"+m.id); r.State != durability.InboxDone {
			t.Fatalf("%s: inbound %s is %s, want done", c, m.id, r.State)
		}
	}
	ambiguous := map[string]bool{}
	for len(b.events) > 0 {
		if e := <-b.events; e.Name == observe.AlertAmbiguous {
			ambiguous[e.Key] = true
		}
	}
	if n := b.Observer().Metrics().OutboxAmbiguous; int(n) != len(ambiguous) {
		t.Fatalf("%s: outbox_ambiguous = %d but %d ambiguous events", c, n, len(ambiguous))
	}
	if c.channel != "" && len(ambiguous) > 0 {
		t.Fatalf("%s: a channel that closes the window left %d sends ambiguous", c, len(ambiguous))
	}
	out, _ := b.Operator().ListOutbox(ctx, durability.ListFilter{})
	byText := map[string]durability.OutboxRecord{}
	for _, r := range out {
		var m rules.OutboxMessage
		json.Unmarshal(r.Payload, &m)
		byText[r.Chat+"|"+m.Text] = r
	}
	for _, m := range crashMessages {
		for _, reply := range []string{"echo: " + m.text, "bye: " + m.text} {
			n := ch.count(m.chat, reply)
			rec, ok := byText[m.chat+"|"+reply]
			if !ok {
				t.Fatalf("%s: reply %q to %s was never journaled", c, reply, m.id)
			}
			switch {
			case ambiguous[rec.Key] && !c.resend:
				if n > 1 || rec.State != durability.OutboxUnknown {
					t.Fatalf("%s: ambiguous %q under skip: sent %d times, state %s (want at most once, unknown)", c, reply, n, rec.State)
				}
			case ambiguous[rec.Key] && c.resend:
				if n < 1 || n > 2 || rec.State != durability.OutboxSent {
					t.Fatalf("%s: ambiguous %q under resend: sent %d times, state %s (want 1 or 2, sent)", c, reply, n, rec.State)
				}
			default:
				if n != 1 || rec.State != durability.OutboxSent {
					t.Fatalf("%s: %q sent %d times, state %s; want exactly once (key %s, delivered %q)", c, reply, n, rec.State, rec.Key, ch.texts())
				}
			}
		}
	}
}

var crashOps = []string{
	"inbox.put", "inbox.complete",
	"outbox.put", "outbox.markSent", "channel.send",
	"outbox.claimDue", "inbox.claimDue",
}

func memoryBackend(*testing.T) durability.Backend { return memory.New() }

// backends are the backends the crash matrix runs on: each test gets a fresh
// one, closed at its end.
var backends = map[string]func(t *testing.T) durability.Backend{
	"memory": memoryBackend,
	"sqlite": func(t *testing.T) durability.Backend {
		b, _ := sqliteAt(t)
		return b
	},
	"postgres": func(t *testing.T) durability.Backend {
		// One table for the test process; each run is its own bot (scope).
		b, err := postgres.Open(context.Background(), postgres.Options{URL: testserver.Postgres(t), TablePrefix: processPrefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
	"redis": func(t *testing.T) durability.Backend {
		b, err := redis.Open(context.Background(), redis.Options{URL: testserver.Redis(t), Prefix: processPrefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
	"redis-cluster": func(t *testing.T) durability.Backend {
		b, err := redis.Open(context.Background(), redis.Options{Cluster: testserver.RedisCluster(t), Prefix: processPrefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
	"file": func(t *testing.T) durability.Backend {
		b, err := file.Open(context.Background(), file.Options{Path: filepath.Join(t.TempDir(), "bot.journal"), AppendLog: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	},
	"events": func(t *testing.T) durability.Backend {
		j, err := eventjournal.OpenFile(filepath.Join(t.TempDir(), "events.json"), &eventjournal.FileOptions{Lock: true, AppendLog: true})
		return eventsBackend(t, j, err, nil)
	},
	"events-shared": func(t *testing.T) durability.Backend {
		j, err := eventjournal.OpenShared(filepath.Join(t.TempDir(), "events.json"), &eventjournal.SharedOptions{AppendLog: true})
		return eventsBackend(t, j, err, nil)
	},
	"events-pg-outbox": func(t *testing.T) durability.Backend {
		j, err := eventjournal.OpenFile(filepath.Join(t.TempDir(), "events.json"), &eventjournal.FileOptions{Lock: true, AppendLog: true})
		if err != nil {
			t.Fatal(err)
		}
		outbox, err := postgres.OpenStore(context.Background(), postgres.Options{URL: testserver.Postgres(t), TablePrefix: processPrefix + "ev_"})
		return eventsBackend(t, j, err, outbox)
	},
}

// eventsBackend is the events backend over j (opened with err) and outbox,
// closed at the test's end.
func eventsBackend(t *testing.T, j eventsdurability.Journal, err error, outbox durability.Kv) durability.Backend {
	if err != nil {
		t.Fatal(err)
	}
	b, err := eventsdurability.New(j, outbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestCrashMatrix crashes at every crash point, before and after it, under both
// ambiguity policies, on every backend.
func TestCrashMatrix(t *testing.T) {
	for name, nb := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the backends wait on their disks and servers: two at a time
			for _, op := range crashOps {
				for _, after := range []bool{false, true} {
					for _, resend := range []bool{false, true} {
						c := crashCase{op: op, after: after, resend: resend}
						t.Run(c.String(), func(t *testing.T) { runCrash(t, nb, c) })
					}
				}
			}
		})
	}
}

// TestCrashMatrixClosedWindow crashes at the points that leave a send in
// flight (around the channel call and the MarkSent), under both policies, on
// every backend, with a channel that deduplicates on the send's key and one
// that reconciles: every reply goes out exactly once and none is ambiguous.
func TestCrashMatrixClosedWindow(t *testing.T) {
	for name, nb := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, kind := range []string{"idempotent", "reconciling"} {
				var resolved, ran int64
				for _, op := range []string{"channel.send", "outbox.markSent", "inbox.complete"} {
					for _, after := range []bool{false, true} {
						for _, resend := range []bool{false, true} {
							c := crashCase{op: op, after: after, resend: resend, channel: kind}
							t.Run(c.String(), func(t *testing.T) {
								m := runCrash(t, nb, c)
								if m.OutboxAmbiguous != 0 {
									t.Fatalf("%s: outbox_ambiguous = %d", c, m.OutboxAmbiguous)
								}
								resolved += m.OutboxAmbiguousResolved
								ran++
							})
						}
					}
				}
				// The points above leave sends in flight: the channel, not a
				// policy, must have settled some of them.
				if ran > 0 && resolved == 0 { // ran is 0 when the backend's server is absent (skipped)
					t.Errorf("%s: no crash left a send for the %s channel to settle", name, kind)
				}
			}
		})
	}
}

// TestCrashMatrixRandom crashes at every write of a clean run (make soak: at
// 1,000 seeded random writes) on every backend.
func TestCrashMatrixRandom(t *testing.T) {
	for name, nb := range backends {
		if name == "events-shared" || name == "events-pg-outbox" || name == "redis-cluster" {
			if os.Getenv("BOTRUN_SOAK") == "" {
				continue // the store they share with "events" or "redis" has its random run; their own runs are in make soak
			}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crashRandom(t, nb)
		})
	}
}

func crashRandom(t *testing.T, nb func(t *testing.T) durability.Backend) {
	// A clean run counts the writes the messages cause.
	clean := crashpoint.New(nb(t))
	cfg := testConfig(t, "")
	cfg.Bot.ID = uniquePrefix("bot")
	ch := newChannel()
	a := newTestBot(t, cfg, clean, echoTwice, crashProvider{ch: ch, crash: clean})
	for _, m := range crashMessages {
		a.admit(t, m.chat, m.id, m.text)
	}
	if !a.quiet(len(crashMessages), 60*time.Second) {
		t.Fatal("clean run did not settle")
	}
	a.stop(t)
	writes := len(clean.Writes())
	t.Logf("a clean run makes %d counted writes: %s", writes, strings.Join(clean.Writes(), " "))

	// make test crashes once at each of the clean run's writes (and two
	// past them), before or after it and under either policy as the seed
	// draws; make soak at 1,000 seeded random writes.
	runs, soak := writes+2, os.Getenv("BOTRUN_SOAK") != ""
	if soak {
		runs = 1000
	}
	rng := rand.New(rand.NewPCG(20261129, 1))
	var ambiguous int64
	for i := range runs {
		nth := 1 + i
		if soak {
			nth = 1 + rng.IntN(writes+2)
		}
		c := crashCase{nth: nth, after: rng.IntN(2) == 1, resend: rng.IntN(2) == 1}
		m := runCrash(t, nb, c)
		ambiguous += m.OutboxAmbiguous
		if t.Failed() {
			t.Fatalf("run %d (%s) failed", i, c)
		}
	}
	t.Logf("%d random crashes, %d ambiguous sends settled by policy", runs, ambiguous)
}

var prefixes atomic.Int64

// processPrefix is this test process's table or key prefix on a shared server.
var processPrefix = fmt.Sprintf("crash%d_", os.Getpid())

// uniquePrefix names a fresh table or key space on a shared server.
func uniquePrefix(p string) string {
	return fmt.Sprintf("%s%d_%d_", p, os.Getpid(), prefixes.Add(1))
}

// TestMain stops the servers and the browser the tests started.
func TestMain(m *testing.M) {
	code := testserver.Run(m)
	browsertest.Stop()
	os.Exit(code)
}
