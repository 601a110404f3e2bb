package host

import (
	"context"
	"errors"
	"github.com/botrun/botrun/internal/waitfor"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// The seed's "Qué se garantiza" table, one test per row. The crash matrix
// covers each row at every crash point; these name the rows.

// Row 1: the process dies before journaling the inbound message: nothing was
// journaled, and the message is processed when the channel redelivers it.
func TestGuaranteeRow1_DiesBeforeJournalingInbound_RedeliveryIsProcessed(t *testing.T) {
	m := runCrash(t, memoryBackend, crashCase{op: "inbox.put"})
	if m.InboundJournaled != 3 || m.InboundDuplicates != 0 {
		t.Fatalf("the redelivered message was not journaled by the new bot: %+v", m)
	}
}

// Row 2: the process dies after journaling, before or during the handler: the
// message is reprocessed; replies that went out are answered from the outbox,
// the missing ones are sent.
func TestGuaranteeRow2_DiesDuringHandler_ReprocessedAndRepliesAnsweredFromOutbox(t *testing.T) {
	for _, c := range []crashCase{{op: "inbox.put", after: true}, {op: "outbox.put"}} {
		t.Run(c.String(), func(t *testing.T) {
			m := runCrash(t, memoryBackend, c)
			if m.InboundReplayed == 0 {
				t.Fatalf("nothing was reprocessed: %+v", m)
			}
		})
	}
}

// Row 3: the process dies between "about to call the provider" and recording
// "sent": ambiguous. skip marks it unknown (never duplicates, may lose);
// resend sends it again (never loses, may duplicate). Both raise the event.
func TestGuaranteeRow3_DiesBetweenProviderCallAndMarkSent_Ambiguous(t *testing.T) {
	for _, resend := range []bool{false, true} {
		c := crashCase{op: "outbox.markSent", resend: resend}
		t.Run(c.String(), func(t *testing.T) {
			if m := runCrash(t, memoryBackend, c); m.OutboxAmbiguous < 1 {
				t.Fatalf("outbox_ambiguous = %d, want at least 1", m.OutboxAmbiguous)
			}
		})
	}
}

// Row 4: the process dies after recording the send, before confirming the
// inbound message: it is reprocessed and every reply recorded sent is
// answered from the outbox (runCrash checks none went out twice). A
// handler's last reply is recorded sent in the completion's own write, so
// that one is ambiguous (row 3) when the completion is lost; and which other
// messages were in flight at the crash depends on timing, so the count is of
// at least one deduped reply, not of a fixed number.
func TestGuaranteeRow4_DiesAfterSendBeforeComplete_AllRepliesFromOutbox(t *testing.T) {
	m := runCrash(t, memoryBackend, crashCase{op: "inbox.complete"})
	if m.OutboxDeduped < 1 || m.InboundReplayed < 1 {
		t.Fatalf("want the reprocessed message's recorded reply deduped: %+v", m)
	}
}

// Row 6: the process dies while a non-persistent conversation waits (it lived
// in memory): the reprocessed answer goes through normal routing as a new
// message, so the replay's reply differs under the same derived key.
// on_diverged decides: send (a new key, nothing swallowed) or skip (answered
// from the journaled send). Both count outbox_diverged.
func TestGuaranteeRow6_NonPersistentFlowLost_OnDivergedDecides(t *testing.T) {
	for _, policy := range []string{"send", "skip"} {
		t.Run(policy, func(t *testing.T) {
			shared := memory.New()
			crash := crashpoint.New(shared)
			crash.CrashBefore("inbox.complete")
			cfg := testConfig(t, "on_diverged = \""+policy+"\"\n")
			ch := newChannel()
			// The conversation lives in process memory: the first incarnation
			// asked a question, so it reads the answer; a fresh one does not.
			flow := func(asked bool) Guest {
				return native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
					text := "I don't understand " + ev.Text
					if asked {
						text = "Nice to meet you, " + ev.Text
					}
					_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text})
					return err
				})
			}
			a := newTestBot(t, cfg, crash, flow(true), crashProvider{ch: ch, crash: crash})
			a.admit(t, "c1", "m1", "Ana")
			if !waitfor.Every(time.Millisecond, 60*time.Second, crash.Crashed) {
				t.Fatal("no crash")
			}
			a.Kill()
			nextMilli(t)
			b := newTestBot(t, cfg, shared, flow(false), ch)
			defer b.stop(t)
			if !b.quiet(1, 60*time.Second) {
				t.Fatal("did not settle")
			}
			if b.Observer().Metrics().OutboxDiverged != 1 {
				t.Fatalf("outbox_diverged = %d", b.Observer().Metrics().OutboxDiverged)
			}
			got := ch.texts()
			want := []string{"Nice to meet you, Ana"}
			if policy == "send" {
				want = append(want, "I don't understand Ana")
			}
			if len(got) != len(want) || got[0] != want[0] || (len(want) == 2 && got[1] != want[1]) {
				t.Fatalf("delivered %q, want %q", got, want)
			}
		})
	}
}

// Row 7: a message whose handling kills the process every time is
// reprocessed until inbox.max_attempts runs are charged, then goes to the DLQ
// (durability:dead) instead of killing the next start.
func TestGuaranteeRow7_PoisonMessageDeadAfterMaxAttempts(t *testing.T) {
	shared := memory.New()
	cfg := testConfig(t, "") // max_attempts = 3
	ch := newChannel()
	runs := 0
	for start := 0; ; start++ {
		crash := crashpoint.New(shared)
		killer := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
			runs++
			crash.CrashBefore("outbox.put") // the handler takes the process down
			_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "never"})
			return err
		})
		b := newTestBot(t, cfg, crash, killer, crashProvider{ch: ch, crash: crash})
		if start == 0 {
			b.admit(t, "c1", "poison", "boom")
		}
		waitfor.Every(time.Millisecond, 60*time.Second, func() bool { return crash.Crashed() || b.settled(1) })
		if !crash.Crashed() {
			if r := b.inboxState(t, "web:poison"); r.State != durability.InboxDead || r.Attempts != 4 {
				t.Fatalf("after %d runs: record %+v, want dead after the 4th claim", runs, r)
			}
			var dead bool
			for len(b.events) > 0 {
				e := <-b.events
				dead = dead || e.Name == observe.AlertDead && e.Kind == "inbox" && e.ID == "web:poison"
			}
			if !dead || b.Observer().Metrics().InboundDead != 1 {
				t.Fatalf("no durability:dead event or inbound_dead count: %+v", b.Observer().Metrics())
			}
			b.stop(t)
			break
		}
		b.Kill()
		nextMilli(t)
		if start > 5 {
			t.Fatal("the poison message never went dead")
		}
	}
	if runs != 3 {
		t.Fatalf("the handler ran %d times, want max_attempts = 3", runs)
	}
	if len(ch.texts()) != 0 {
		t.Fatalf("sent %q", ch.texts())
	}
}

// A guest fault (trap, deadline, out of memory) is retried like a crash with
// inbox.backoff, counts as an attempt, and is dead after max_attempts; an
// operator replays it once a fixed module is deployed.
func TestGuestFaultRetriedThenDeadThenReplayed(t *testing.T) {
	cfg := testConfig(t, "")
	ch := newChannel()
	var mu sync.Mutex
	broken := true
	var attempts []int
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		mu.Lock()
		attempts = append(attempts, ev.Attempt)
		fail := broken
		mu.Unlock()
		if fail {
			return &wasm.FaultError{Kind: wasm.FaultTrap, Err: errors.New("unreachable")}
		}
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "fixed"})
		return err
	})
	b := newTestBot(t, cfg, memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	r := b.inboxState(t, "web:m1")
	if r.State != durability.InboxDead || r.Attempts != 3 || r.Error == "" {
		t.Fatalf("record %+v, want dead after 3 attempts", r)
	}
	mu.Lock()
	if len(attempts) != 3 || attempts[0] != 1 || attempts[2] != 3 {
		t.Fatalf("attempts seen by the guest: %v", attempts)
	}
	broken = false
	mu.Unlock()
	if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
		t.Fatal(err)
	}
	waitFor(60*time.Second, func() bool { return b.inboxState(t, "web:m1").State == durability.InboxDone })
	if got := ch.texts(); len(got) != 1 || got[0] != "fixed" {
		t.Fatalf("after replay: %q", got)
	}
	if m := b.Observer().Metrics(); m.InboundDead != 1 || m.InboundReplayed < 1 {
		t.Fatalf("metrics %+v", m)
	}
}

// A handler that returns an error is not retried: its sends already happened.
// The message is confirmed and the error reported.
func TestHandlerErrorConfirmedNotRetried(t *testing.T) {
	ch := newChannel()
	runs := 0
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		runs++
		env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "partial"})
		return &wasm.HandlerError{Message: "business rule failed"}
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "x")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	b.sweeps(t, 3) // nothing runs it again
	if r := b.inboxState(t, "web:m1"); r.State != durability.InboxDone || runs != 1 {
		t.Fatalf("record %+v after %d runs", r, runs)
	}
}

// Row 5: the process dies while a persistent flow waits for an answer: the
// flow goes on from its checkpoint, the pending question is not repeated, and
// the next message is taken as its answer. The flow is examples/flow (Go SDK);
// its checkpoint is conversation state committed with each message.
func TestGuaranteeRow5_PersistentFlowResumesWithoutRepeatingTheQuestion(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/flow")
	for _, c := range []crashCase{{op: "inbox.complete"}, {op: "inbox.complete", after: true}, {op: "channel.send", after: true}} {
		t.Run(c.String(), func(t *testing.T) {
			shared := memory.New()
			crash := crashpoint.New(shared)
			if c.after {
				crash.CrashAfter(c.op)
			} else {
				crash.CrashBefore(c.op)
			}
			cfg := testConfig(t, "on_ambiguous = \""+map[bool]string{true: "resend", false: "skip"}[c.resend]+"\"\n")
			cfg.Bot.Module = module
			ch := newChannel()
			a := newTestBot(t, cfg, crash, nil, crashProvider{ch: ch, crash: crash})
			a.admit(t, "c1", "m1", "/signup")
			if !waitFor(60*time.Second, crash.Crashed) {
				t.Fatal("no crash")
			}
			a.Kill()
			nextMilli(t)
			b := newTestBot(t, cfg, shared, nil, ch)
			defer b.stop(t)
			b.admit(t, "c1", "m1", "/signup") // the channel redelivers
			if !b.quiet(1, 60*time.Second) {
				t.Fatal("did not settle after the restart")
			}
			b.say(t, 2, "m2", "Ana")
			b.say(t, 3, "m3", "Lima")
			if got, want := ch.texts(), signupTranscript("Ana", "Lima"); !reflect.DeepEqual(got, want) {
				t.Fatalf("the flow did not resume with the next message as the answer, each reply once:\n%q\nwant\n%q", got, want)
			}
		})
	}
}
