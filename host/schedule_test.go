package host

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/wasm"
)

// remind enqueues "later: <text>" for event time + 1.5 s and replies "ok".
var remind = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	res, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "later: " + ev.Text, At: ev.ReceivedAt + 1500})
	if err != nil {
		return err
	}
	if res.Status != abi.SendScheduled {
		return &wasm.HandlerError{Message: "enqueue at answered " + string(res.Status)}
	}
	_, err = env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "ok"})
	return err
})

// TestScheduledSendSurvivesRestart: a send enqueued for later is held in the
// outbox (shown as scheduled), survives the bot's crash, and a new bot on
// the same backend sends it once, when it is due.
func TestScheduledSendSurvivesRestart(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			shared := backends[name](t)
			cfg := testConfig(t, "")
			cfg.Bot.ID = uniquePrefix("sched")
			ch := newChannel()
			a := newTestBot(t, cfg, shared, remind, ch)
			start := time.Now()
			if _, err := a.admit(t, "c1", "m1", "tea"); err != nil {
				t.Fatal(err)
			}
			var key string
			if !waitFor(60*time.Second, func() bool {
				recs, _ := a.Operator().ListOutbox(context.Background(), durability.ListFilter{State: string(durability.OutboxScheduled)})
				if len(recs) == 1 {
					key = recs[0].Key
				}
				return len(recs) == 1
			}) {
				t.Fatal("the reminder was not listed as scheduled")
			}
			if n := ch.count("c1", "ok"); n > 1 {
				t.Fatalf("ok sent %d times", n)
			}
			if ch.count("c1", "later: tea") != 0 {
				t.Fatal("the reminder went out before its time")
			}
			a.Kill()

			b := newTestBot(t, cfg, shared, remind, ch)
			defer b.stop(t)
			if !waitFor(60*time.Second, func() bool { return ch.count("c1", "later: tea") > 0 }) {
				t.Fatalf("the reminder was never sent: %+v", b.outboxRecord(t, key))
			}
			if since := time.Since(start); since < 1500*time.Millisecond {
				t.Fatalf("the reminder went out %s after the message, before its 1.5 s", since)
			}
			if !waitFor(60*time.Second, func() bool { return b.outboxRecord(t, key).State == durability.OutboxSent }) {
				t.Fatalf("reminder record %+v: want sent", b.outboxRecord(t, key))
			}
			if rec := b.outboxRecord(t, key); rec.CompletedAt < start.UnixMilli()+1500 {
				t.Fatalf("reminder sent at %d, before its time %d", rec.CompletedAt, start.UnixMilli()+1500)
			}
			// Held, then sent once: a later sweep sends nothing more.
			b.sweeps(t, 3)
			if n := ch.count("c1", "later: tea"); n != 1 {
				t.Fatalf("the reminder went out %d times: %q", n, strings.Join(ch.texts(), " | "))
			}
		})
	}
}

// TestSendLaterAndDiscard: an operator's send (admin API, botrun send) can
// be scheduled and cancelled before it is due.
func TestSendLaterAndDiscard(t *testing.T) {
	cfg := testConfig(t, "")
	ch := newChannel()
	b := newTestBot(t, cfg, backends["sqlite"](t), remind, ch)
	defer b.stop(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).UnixMilli()
	res, err := b.Operator().SendLater(ctx, "web", "c9", "cancel me", "op:1", at)
	if err != nil || res.Status != abi.SendScheduled || res.Key != "op:1" {
		t.Fatalf("SendLater: %+v %v", res, err)
	}
	if err := b.Operator().Discard(ctx, "op:1"); err != nil {
		t.Fatal(err)
	}
	// A send under the key of a scheduled one waits with it: it is not sent
	// before its time.
	if _, err := b.Operator().SendLater(ctx, "web", "c9", "held", "op:3", at); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Send(ctx, "web", "c9", "held", "op:3"); err != nil || res.Status != abi.SendScheduled {
		t.Fatalf("a send with a scheduled key: %+v %v", res, err)
	}
	if _, err := b.Operator().SendLater(ctx, "_alerts", "c9", "x", "", 0); err == nil {
		t.Fatal("SendLater accepted the internal alerts channel")
	}
	res, err = b.Operator().SendLater(ctx, "web", "c9", "now", "op:2", 0)
	if err != nil || res.Status != abi.SendDeferred {
		t.Fatalf("SendLater now: %+v %v", res, err)
	}
	if !waitFor(60*time.Second, func() bool { return ch.count("c9", "now") == 1 }) {
		t.Fatal("the operator's send was not delivered")
	}
	if ch.count("c9", "cancel me") != 0 || ch.count("c9", "held") != 0 {
		t.Fatal("a discarded scheduled send went out")
	}
	if _, err := b.Operator().SendLater(ctx, "nope", "c9", "x", "", 0); err == nil {
		t.Fatal("SendLater accepted an unknown provider")
	}
}

// broadcaster broadcasts "news" to chats b0..b<n-1> under prefix "news:<id>".
func broadcaster(n int) native {
	return native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		chats := make([]string, n)
		for i := range chats {
			chats[i] = fmt.Sprintf("b%d", i)
		}
		_, err := env.(wasm.Broadcaster).Broadcast(ctx, abi.BroadcastRequest{Chats: chats, Text: "news", KeyPrefix: "news:" + ev.ID})
		return err
	})
}

// TestBroadcastSendsEachChatOnce: a handler's broadcast journals one send per
// chat (a chat listed twice once), the sweeper delivers each once, a replay
// of the event journals nothing new, and bot.max_broadcast bounds it.
func TestBroadcastSendsEachChatOnce(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Bot.MaxBroadcast, cfg.Bot.MaxSends = 300, 1
	ch := newChannel()
	b := newTestBot(t, cfg, backends["sqlite"](t), broadcaster(250), ch)
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the broadcast did not settle")
	}
	for i := range 250 {
		if n := ch.count(fmt.Sprintf("b%d", i), "news"); n != 1 {
			t.Fatalf("chat b%d got %d copies", i, n)
		}
	}
	if r := b.inboxState(t, "web:m1"); r.State != durability.InboxDone {
		t.Fatalf("a broadcast counts once against max_sends = 1: the event is %s (%s)", r.State, r.Error)
	}
	// A replay journals nothing new and sends nothing again.
	if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Minute, func() bool { return b.inboxState(t, "web:m1").Attempts == 1 && b.quiet(1, time.Millisecond) }) {
		t.Fatal("the replay did not settle")
	}
	if len(ch.texts()) != 250 {
		t.Fatalf("after a replay the channel got %d sends, want 250", len(ch.texts()))
	}

	// Over max_broadcast: TOO_LARGE to the guest, the event fails.
	bigCfg := testConfig(t, "")
	bigCfg.Bot.MaxBroadcast = 10
	big := newTestBot(t, bigCfg, memoryBackend(t), broadcaster(11), newChannel())
	defer big.stop(t)
	if _, err := big.admit(t, "c1", "m2", "go"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return big.inboxState(t, "web:m2").State == durability.InboxDead }) {
		t.Fatalf("a broadcast over max_broadcast: %+v", big.inboxState(t, "web:m2"))
	}
	if r := big.inboxState(t, "web:m2"); !strings.Contains(r.Error, "max_broadcast") {
		t.Fatalf("error %q does not name max_broadcast", r.Error)
	}
}

// choiceLimited holds 1000 characters of text, 100 with choices.
type choiceLimited struct{ *fakeChannel }

func (choiceLimited) TextLimits(msg channel.Outbound) (chars, bytes int) {
	if len(msg.Buttons) > 0 || msg.List != nil {
		return 100, 0
	}
	return 1000, 0
}

// TestChoicesSplitToFit: a text with buttons is split by the channel's
// smaller limit for messages with choices, so the part that carries them
// fits.
func TestChoicesSplitToFit(t *testing.T) {
	ch := newChannel()
	long := strings.Repeat("word ", 50) // 250 characters
	texts := sendParts(t, choiceLimited{ch}, ch, abi.SendRequest{Text: long, Buttons: []abi.Button{{ID: "ok", Title: "OK"}}})
	if len(texts) != 3 {
		t.Fatalf("%d parts, want 3 of at most 100 characters: %q", len(texts), texts)
	}
	for _, p := range texts {
		if len(p) > 100 {
			t.Fatalf("a part of %d characters, over the 100 a message with choices holds", len(p))
		}
	}
}

// sendParts has a bot send req (its chat the event's) through prov, which
// delivers to ch, and returns the texts ch got.
func sendParts(t *testing.T, prov channel.Channel, ch *fakeChannel, req abi.SendRequest) []string {
	t.Helper()
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		req.Chat = ev.Chat
		_, err := env.Send(ctx, req)
		return err
	})
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, prov)
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "go"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("not handled")
	}
	return ch.texts()
}

// byteLimited holds 100 bytes of UTF-8 a text (Instagram's kind of limit).
type byteLimited struct{ *fakeChannel }

func (byteLimited) TextLimits(channel.Outbound) (chars, bytes int) { return 0, 100 }

// TestBytesSplitToFit: a channel that limits texts in bytes gets parts of at
// most that many bytes, cut on character boundaries, that join into the text.
func TestBytesSplitToFit(t *testing.T) {
	ch := newChannel()
	long := strings.Repeat("ñandú 🦜 ", 30) // 240 characters, 390 bytes
	texts := sendParts(t, byteLimited{ch}, ch, abi.SendRequest{Text: long})
	if len(texts) < 4 || strings.Join(texts, "") != long {
		t.Fatalf("%d parts that join into %q", len(texts), strings.Join(texts, ""))
	}
	for _, p := range texts {
		if len(p) > 100 || !utf8.ValidString(p) {
			t.Fatalf("a part of %d bytes (valid UTF-8: %v), over the channel's 100", len(p), utf8.ValidString(p))
		}
	}
}
