package dryrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/inputs"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestEnvAnswersFromTheRecord: state reads come from the turn's own writes,
// then the record; a key the original did not read is unknown, not guessed;
// media outcomes are the recorded ones.
func TestEnvAnswersFromTheRecord(t *testing.T) {
	ctx := context.Background()
	ev := abi.Event{ID: "web:1", Chat: "c1", Media: []abi.Media{{Type: "image"}, {Type: "image"}, {Type: "audio"}}}
	rec := inputs.Record{V: 1, State: []inputs.StateRead{{Key: "step", Value: []byte("2"), Found: true}, {Key: "gone"}},
		Media: []inputs.MediaLoad{{Index: 0, Len: 3, SHA256: "x"}, {Index: 1, Reason: abi.MediaNotDurable}}}
	e := newEnv(ev, rec, 5, 5)
	if v, ok, _ := e.StateGet(ctx, "step"); !ok || string(v) != "2" {
		t.Fatalf("recorded key: %q %v", v, ok)
	}
	if _, ok, _ := e.StateGet(ctx, "gone"); ok {
		t.Fatal("a key recorded absent is present")
	}
	e.StateSet(ctx, "step", []byte("3"))
	if v, _, _ := e.StateGet(ctx, "step"); string(v) != "3" {
		t.Fatalf("own write: %q", v)
	}
	if e.unknown != "" {
		t.Fatalf("unknown after recorded reads: %s", e.unknown)
	}
	if b, err := e.LoadMedia(ctx, 0); err != nil || len(b) != 3 || !e.standIn {
		t.Fatalf("media 0: %d bytes, %v", len(b), err)
	}
	var mu *abi.MediaUnavailableError
	if _, err := e.LoadMedia(ctx, 1); !errors.As(err, &mu) || mu.Reason != abi.MediaNotDurable {
		t.Fatalf("media 1: %v", err)
	}
	if _, err := e.LoadMedia(ctx, 7); !errors.Is(err, wasm.ErrNoMedia) {
		t.Fatalf("media 7: %v", err)
	}
	e.StateGet(ctx, "other")
	if e.unknown != `state key "other"` {
		t.Fatalf("unknown read: %q", e.unknown)
	}
	for range 5 {
		e.Send(ctx, abi.SendRequest{Chat: "c1", Text: "x"})
	}
	if _, err := e.Send(ctx, abi.SendRequest{Chat: "c1"}); !errors.Is(err, rules.ErrSendCap) {
		t.Fatalf("sixth send: %v", err)
	}
	if e.sends[0].Key != "web:1:1" || !e.sends[0].Derived {
		t.Fatalf("first send %+v", e.sends[0])
	}
}

// TestOutboxByInboundJoinsParts: a split text's parts are one send; sends
// are grouped by their inbound record.
func TestOutboxByInboundJoinsParts(t *testing.T) {
	ctx := context.Background()
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, prev, inbound, text string, at int64) {
		p, _ := json.Marshal(OutboxMessage{Text: text})
		if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: key, Chat: "c1", Payload: p, PreviousPart: prev, Inbound: inbound}, at, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("web:1:1", "", "web:1", "hello ", 1)
	put("web:1:1#2", "web:1:1", "web:1", "world", 2)
	put("web:1:2", "", "web:1", "bye", 3)
	put("web:2:1", "", "web:2", "other", 4)
	put("cron", "", "", "not a turn's", 5)
	got, err := outboxByInbound(ctx, j.Outbox, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s := got["web:1"]; len(s) != 2 || s[0].Text != "hello world" || s[1].Text != "bye" || !s[0].Derived {
		t.Fatalf("web:1: %+v", s)
	}
	if len(got) != 2 || len(got["web:2"]) != 1 {
		t.Fatalf("grouped: %+v", got)
	}
}

func TestDiffAndKeyOrder(t *testing.T) {
	if d := diff([]string{"a", "b", "c"}, []string{"a", "x", "c"}); d != " a\n-b\n+x\n c\n" {
		t.Fatalf("diff: %q", d)
	}
	if d := diff([]string{"a"}, []string{"a"}); d != "" {
		t.Fatalf("equal diff: %q", d)
	}
	if !keyLess("web:1:2", "web:1:10") || keyLess("web:1:10", "web:1:2") {
		t.Fatal("numeric suffixes")
	}
}

// BenchmarkDryRun10k replays 10,000 journaled records (a SQLite journal,
// opened read-only) through the C echo guest: the figure in docs/performance.md.
// make bench-dryrun runs it.
func BenchmarkDryRun10k(b *testing.B) {
	const n = 10_000
	ctx := context.Background()
	module := wasmbuild.C(b, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
	wasmBytes, err := os.ReadFile(module)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "bot.db")
	w, err := sqlite.Open(ctx, sqlite.Options{Path: path, Synchronous: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	scope := durability.Scope{Bot: "bench"}
	j, err := w.Open(ctx, scope)
	if err != nil {
		b.Fatal(err)
	}
	// The journal of n echoed messages, written concurrently (group commit).
	errs := make(chan error, 32)
	for g := range 32 {
		go func() {
			var err error
			for i := g; i < n && err == nil; i += 32 {
				err = journalEcho(ctx, j, i)
			}
			errs <- err
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	cfg := &config.Config{}
	cfg.Bot.HandlerTimeout = config.Duration(10 * time.Second)
	cfg.Bot.MaxMemory = 64 << 20
	cfg.Bot.MaxSends, cfg.Bot.MaxBroadcast, cfg.Bot.DataDir = 100, 10000, dir
	r, err := sqlite.Open(ctx, sqlite.Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	jr, err := r.Open(ctx, scope)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		rep, err := Run(ctx, Options{Journals: jr, Config: cfg, Module: wasmBytes, ModuleName: "c-echo.wasm"})
		if err != nil {
			b.Fatal(err)
		}
		s := rep.Summary()
		if s.Replayed != n || s.Identical != n {
			b.Fatalf("summary %+v", s)
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
		b.ReportMetric(time.Since(start).Seconds(), "s/10k")
	}
}

// journalEcho journals message i as the echo bot ran it: done, its inputs
// recorded, its echo sent.
func journalEcho(ctx context.Context, j durability.Journals, i int) error {
	id := fmt.Sprintf("web:%d", i)
	chat := fmt.Sprintf("c%d", i%100)
	now := time.Now().UnixMilli()
	payload, _ := json.Marshal(abi.Event{ID: id, Provider: "web", Chat: chat, From: "u", Text: fmt.Sprint("message ", i), ReceivedAt: now})
	l := durability.Lease{Owner: "bench", Now: now, Until: now + 60_000}
	if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: chat, Payload: payload}, now, &l); err != nil {
		return err
	}
	msg, _ := json.Marshal(OutboxMessage{Text: fmt.Sprint("echo: message ", i)})
	if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: id + ":1", Provider: "web", Chat: chat, Payload: msg, Inbound: id}, now, &l); err != nil {
		return err
	}
	cs := j.Inbox.(durability.CompleteSender)
	return cs.CompleteWithSent(ctx, id, 1, durability.Completion{Module: "c-echo", Inputs: []byte(`{"v":1}`), Now: now},
		[]durability.SentMark{{Key: id + ":1", Token: 1, Ref: "r", Now: now}})
}

// dryRunConfig is the configuration of the dry runs of these tests.
func dryRunConfig(t testing.TB) *config.Config {
	cfg := &config.Config{}
	cfg.Bot.HandlerTimeout = config.Duration(10 * time.Second)
	cfg.Bot.MaxMemory = 64 << 20
	cfg.Bot.MaxSends, cfg.Bot.MaxBroadcast, cfg.Bot.DataDir = 100, 10000, t.TempDir()
	return cfg
}

// TestMediaReferencesCannotReplay: an event whose media the host journaled
// as the channel's durable references (its own blanked) is not replayed
// with references the live guest did not see.
func TestMediaReferencesCannotReplay(t *testing.T) {
	ctx := context.Background()
	module, err := os.ReadFile(wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, id := range []string{"web:1", "web:2"} {
		payload := fmt.Sprintf(`{"id":%q,"provider":"web","chat":"c1","from":"u","text":"look","received_at":%d,"media":[{"type":"image"}]`, id, now)
		if id == "web:1" {
			payload += `,"durable_media":[{"provider":"web","stored":{"v":1,"data":"eA=="}}]`
		}
		payload += "}"
		l := durability.Lease{Owner: "t", Now: now, Until: now + 60_000}
		if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: "c1", Payload: []byte(payload)}, now, &l); err != nil {
			t.Fatal(err)
		}
		if err := j.Inbox.Complete(ctx, id, 1, durability.Completion{Module: "m", Inputs: []byte(`{"v":1}`), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Run(ctx, Options{Journals: j, Config: dryRunConfig(t), Module: module, ModuleName: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Results[0]; r.ID != "web:1" || r.Outcome != CannotReplay || reasonKind(r.Reason) != "media references" {
		t.Fatalf("durable media: %+v", r)
	}
	if r := rep.Results[1]; r.Outcome == CannotReplay {
		t.Fatalf("media without durable references: %+v", r)
	}
}

// budgetedInbox is an inbox whose chat-filtered List finds nothing, as a
// real one's does when the chat's records are past its scan budget.
type budgetedInbox struct{ durability.InboxJournal }

func (b budgetedInbox) List(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
	if f.Chat != "" {
		return nil, nil
	}
	return b.InboxJournal.List(ctx, f)
}

// TestSelectRecordsFiltersChatItself: the chat filter does not rely on a
// filtered List (bounded by its scan budget): every record of the chat is
// selected, in admission order.
func TestSelectRecordsFiltersChatItself(t *testing.T) {
	ctx := context.Background()
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		chat := "other"
		if i%10 == 9 {
			chat = "c1"
		}
		id := fmt.Sprintf("web:%d", i)
		if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: chat, Payload: []byte("{}")}, int64(1000+i), nil); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := selectRecords(ctx, budgetedInbox{j.Inbox}, Filter{Chat: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if fmt.Sprint(ids) != "[web:9 web:19 web:29]" {
		t.Fatalf("chat c1: %v", ids)
	}
}

// TestOriginalFaultKind: the original fault's kind is read from the
// record's error, so a new fault of another kind is not hidden by it.
func TestOriginalFaultKind(t *testing.T) {
	for _, tc := range []struct {
		state durability.InboxState
		err   string
		want  wasm.FaultKind
	}{
		{durability.InboxDead, "attempt 3: guest fault (trap): wasm error: unreachable", wasm.FaultTrap},
		{durability.InboxFailed, "guest fault (host-error): outbox journal: down", wasm.FaultHost},
		{durability.InboxDead, "handler error: no", ""},
		{durability.InboxDone, "guest fault (trap): x", ""},
	} {
		if got := originalFault(&durability.InboxRecord{State: tc.state, Error: tc.err}); got != tc.want {
			t.Errorf("%s %q: %q, want %q", tc.state, tc.err, got, tc.want)
		}
	}
}

// TestScheduledTimeCompared: a scheduled send's hold time is compared while
// the journal knows it (not yet tried), not once it was tried.
func TestScheduledTimeCompared(t *testing.T) {
	ctx := context.Background()
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(OutboxMessage{Text: "later"})
	if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "web:1:1", Chat: "c1", Payload: p, Inbound: "web:1", NotBefore: 5000}, 100, nil); err != nil {
		t.Fatal(err)
	}
	l := durability.Lease{Owner: "t", Now: 100, Until: 60_000}
	if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "web:2:1", Chat: "c1", Payload: p, Inbound: "web:2"}, 100, &l); err != nil {
		t.Fatal(err)
	}
	if err := j.Outbox.MarkSent(ctx, "web:2:1", 1, "r", 5001); err != nil {
		t.Fatal(err)
	}
	got, err := outboxByInbound(ctx, j.Outbox, 0)
	if err != nil {
		t.Fatal(err)
	}
	sent1, sent2 := got["web:1"], got["web:2"]
	if len(sent1) != 1 || sent1[0].At != 5000 || len(sent2) != 1 || !sent2[0].atUnknown {
		t.Fatalf("sent %+v %+v", sent1, sent2)
	}
	would := []Send{{Key: "web:1:1", Chat: "c1", At: 9000}}
	compareAt(sent1, would, 50)
	if diff(lines(sent1), lines(would)) == "" {
		t.Fatal("another hold time is no change")
	}
	would = []Send{{Key: "web:2:1", Chat: "c1", At: 9000, OutboxMessage: OutboxMessage{Text: "later"}}}
	compareAt(sent2, would, 50)
	if d := diff(lines(sent2), lines(would)); d != "" {
		t.Fatalf("an unknown hold time compared: %s", d)
	}
}
