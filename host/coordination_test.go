package host

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// appendLog is a conversation that spans messages: it appends the text to
// the chat's state and replies with everything so far. A chat whose turns
// run one at a time, in order, gets "m0", "m0,m1", "m0,m1,m2", …; two turns
// of one chat at once lose an answer or repeat one.
var appendLog = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	log, _, err := env.StateGet(ctx, "log")
	if err != nil {
		return err
	}
	next := ev.Text
	if len(log) > 0 {
		next = string(log) + "," + ev.Text
	}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // widen the window: the guest's work under test, not a wait
	if err := env.StateSet(ctx, "log", []byte(next)); err != nil {
		return err
	}
	_, err = env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: next})
	return err
})

// coordinatedReplicas starts n bots on one backend with coordination, each
// its own instance id, sharing the channel ch.
func coordinatedReplicas(t *testing.T, n int, backend durability.Backend, ch *fakeChannel) []*testBot {
	var bots []*testBot
	for i := range n {
		cfg := testConfig(t, "")
		cfg.Bot.Workers = 4
		cfg.Durability.InstanceID = fmt.Sprintf("replica-%d", i)
		cfg.Durability.Coordination = true
		b := newTestBot(t, cfg, backend, appendLog, ch)
		t.Cleanup(func() { b.stop(t) })
		bots = append(bots, b)
	}
	return bots
}

// wantLog is what appendLog replies to a chat's messages m0..m(n-1).
func wantLog(n int) []string {
	var out, so []string
	for i := range n {
		so = append(so, fmt.Sprintf("m%d", i))
		out = append(out, strings.Join(so, ","))
	}
	return out
}

// chatTexts returns what ch delivered to chat, in order.
func (c *fakeChannel) chatTexts(chat string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, d := range c.delivered {
		if d.Chat == chat {
			out = append(out, d.Text)
		}
	}
	return out
}

// TestCoordinationAcrossReplicas (issue 19, item 1): three replicas share a
// backend and every message of a chat goes to the next replica in turn, as a
// round-robin balancer sends them. Each chat's conversation still sees its
// messages one at a time and in order, and every reply goes out once.
func TestCoordinationAcrossReplicas(t *testing.T) {
	ch := newChannel()
	bots := coordinatedReplicas(t, 3, memory.New(), ch)
	const chats, messages = 12, 8
	var wg sync.WaitGroup
	for c := range chats {
		wg.Go(func() {
			for m := range messages {
				b := bots[(c+m)%len(bots)]
				if _, err := b.admit(t, fmt.Sprint("chat-", c), fmt.Sprintf("c%d-m%d", c, m), fmt.Sprint("m", m)); err != nil {
					t.Errorf("admit: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if !bots[0].quiet(chats*messages, 2*time.Minute) {
		t.Fatal("the replicas did not settle")
	}
	want := wantLog(messages)
	for c := range chats {
		chat := fmt.Sprint("chat-", c)
		if got := ch.chatTexts(chat); strings.Join(got, " | ") != strings.Join(want, " | ") {
			t.Errorf("%s got\n  %q\nwant\n  %q", chat, got, want)
		}
	}
}

// TestCoordinationOlderRecordFirst: a chat's older message held by a replica
// that died runs before the chat's next message, once its lease expires, on
// the replica that received the next one; the dead replica's turn is taken
// over when it expires.
func TestCoordinationOlderRecordFirst(t *testing.T) {
	ch := newChannel()
	backend := memory.New()
	bots := coordinatedReplicas(t, 1, backend, ch)
	b := bots[0]
	ctx := context.Background()
	// A replica that died holding the chat's turn and its first message.
	until := time.Now().Add(500 * time.Millisecond)
	l := durability.Lease{Owner: "dead-replica", Now: nowMs(), Until: until.UnixMilli()}
	payload, _ := json.Marshal(rules.Journaled{Event: abi.Event{ID: "web:old", Provider: "web", Chat: "c", From: "u", Text: "m0"}})
	if _, _, err := b.inbox.Put(ctx, durability.InboxPut{ID: "web:old", Provider: "web", Chat: "c", Payload: payload}, l.Now, &l); err != nil {
		t.Fatal(err)
	}
	// The dead replica's boot is 1 ns past the epoch: its owner is
	// "dead-replica#1"; its turn expires with the record's lease.
	deadReplica := lease.NewChatTurns(b.kv, Scope(b.cfg).ID(), "dead-replica", time.Unix(0, 1), time.Until(until), clock.Real)
	if dead, holder, err := deadReplica.Acquire(ctx, "web", "c"); err != nil || dead == nil {
		t.Fatalf("acquire: %v (held by %s)", err, holder)
	}
	if _, err := b.admit(t, "c", "new", "m1"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(2, time.Minute) {
		t.Fatal("the chat did not settle")
	}
	if got, want := ch.chatTexts("c"), wantLog(2); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if r := b.inboxState(t, "web:old"); r.Owner != "replica-0" || r.Attempts != 2 {
		t.Errorf("the old record was not taken over: owner %q, attempts %d", r.Owner, r.Attempts)
	}
}

// TestCoordinationConcurrentAdmissions: messages of one chat admitted at the
// same moment on different replicas have no order between them, but their
// turns still run one at a time: each reply extends the one before by one
// message, and every message is answered exactly once.
func TestCoordinationConcurrentAdmissions(t *testing.T) {
	ch := newChannel()
	bots := coordinatedReplicas(t, 3, memory.New(), ch)
	const chats, messages = 8, 6
	var wg sync.WaitGroup
	for c := range chats {
		for m := range messages {
			wg.Go(func() {
				b := bots[rand.IntN(len(bots))]
				if _, err := b.admit(t, fmt.Sprint("chat-", c), fmt.Sprintf("c%d-m%d", c, m), fmt.Sprint("m", m)); err != nil {
					t.Errorf("admit: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if !bots[0].quiet(chats*messages, 2*time.Minute) {
		t.Fatal("the replicas did not settle")
	}
	for c := range chats {
		got := ch.chatTexts(fmt.Sprint("chat-", c))
		if len(got) != messages {
			t.Errorf("chat-%d: %d replies, want %d: %q", c, len(got), messages, got)
			continue
		}
		seen := map[string]bool{}
		for i, r := range got {
			parts := strings.Split(r, ",")
			if len(parts) != i+1 || i > 0 && !strings.HasPrefix(r, got[i-1]+",") || seen[parts[i]] {
				t.Errorf("chat-%d: reply %d %q does not extend %q by one new message: two turns of the chat ran at once", c, i, r, got[max(i-1, 0)])
				break
			}
			seen[parts[i]] = true
		}
	}
}

// TestCoordinationStatusShowsTurns: botrun status counts the chat turns each
// replica holds, and a released turn is gone.
func TestCoordinationStatusShowsTurns(t *testing.T) {
	b := coordinatedReplicas(t, 1, memory.New(), newChannel())[0]
	ctx := context.Background()
	turns := func() int {
		t.Helper()
		st, err := b.Operator().Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range st.Replicas {
			if r.Owner == "replica-0" {
				n += r.Held["turn"].Count
			} else if r.Held["turn"].Count > 0 {
				t.Fatalf("turns held by %q", r.Owner)
			}
		}
		return n
	}
	t1, _, err := b.coord.Turns.Acquire(ctx, "web", "a")
	if err != nil || t1 == nil {
		t.Fatal(err)
	}
	t2, _, err := b.coord.Turns.Acquire(ctx, "web", "b/c")
	if err != nil || t2 == nil {
		t.Fatal(err)
	}
	if n := turns(); n != 2 {
		t.Fatalf("status shows %d turns held, want 2", n)
	}
	if again, holder, _ := b.coord.Turns.Acquire(ctx, "web", "a"); again != nil || holder == "" {
		t.Fatal("a held turn was taken again")
	}
	t1.Release(ctx)
	t2.Release(ctx)
	if n := turns(); n != 0 {
		t.Fatalf("status shows %d turns after release, want 0", n)
	}
}
