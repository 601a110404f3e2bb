package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/webchat"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/host/wasm"
)

// transcriptOf reads a chat's webchat transcript through the bot's HTTP API.
func transcriptOf(t *testing.T, b *Bot, chat string) []webchat.Entry {
	t.Helper()
	w := httptest.NewRecorder()
	b.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/webchat/web/messages?chat="+chat+"&after=0", nil))
	var got struct{ Messages []webchat.Entry }
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil {
		t.Fatalf("GET messages of %s: %d %s", chat, w.Code, w.Body)
	}
	return got.Messages
}

// TestWebchatReplyCommitsWithItsRecord: on a backend with a Kv, a webchat
// reply is delivered by the very commit that marks its record sent, and a
// send a crash left in flight was never delivered: the bot sends it again,
// once, under on_ambiguous = skip, and counts it resolved, not ambiguous.
func TestWebchatReplyCommitsWithItsRecord(t *testing.T) {
	cfg := testConfig(t, "on_ambiguous = \"skip\"\n")
	b := newTestBot(t, cfg, memory.New(), echoOnce)
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "hola"); err != nil {
		t.Fatal(err)
	}
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("the message was not handled")
	}
	if r := b.outboxRecord(t, "web:m1:1"); r.State != durability.OutboxSent || r.Ref != "1" {
		t.Fatalf("reply record %+v: want sent with the transcript seq as its ref", r)
	}
	if es := transcriptOf(t, b.Bot, "c1"); len(es) != 1 || es[0].Text != "echo: hola" {
		t.Fatalf("transcript of c1: %+v", es)
	}

	// A send another process began and never finished (it died): its lease
	// runs out, the sweeper finds it ambiguous, and webchat settles it.
	now := time.Now().UnixMilli()
	l := durability.Lease{Owner: "dead-process", Now: now, Until: now + 50}
	if _, _, err := b.outbox.Put(context.Background(), durability.OutboxPut{Key: "k-crash", Provider: "web", Chat: "c2",
		Payload: []byte(`{"text":"left in flight"}`), Fingerprint: "fp"}, now, &l); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return b.outboxRecord(t, "k-crash").State == durability.OutboxSent }) {
		t.Fatalf("the send left in flight was not settled: %+v", b.outboxRecord(t, "k-crash"))
	}
	if es := transcriptOf(t, b.Bot, "c2"); len(es) != 1 || es[0].Text != "left in flight" {
		t.Fatalf("transcript of c2: %+v; want the send exactly once", es)
	}
	if m := b.Observer().Metrics(); m.OutboxAmbiguous != 0 || m.OutboxAmbiguousResolved != 1 {
		t.Fatalf("outbox_ambiguous %d, outbox_ambiguous_resolved %d; want 0 and 1", m.OutboxAmbiguous, m.OutboxAmbiguousResolved)
	}
}

// TestMessageLog: a chat's log holds its admitted messages and its sent
// replies, oldest first, with the channel's ids; other chats' are not in it.
func TestMessageLog(t *testing.T) {
	b := newTestBot(t, testConfig(t, ""), memory.New(), echoOnce)
	defer b.stop(t)
	for _, m := range []struct{ chat, id, text string }{{"c1", "m1", "hola"}, {"c2", "m2", "other"}, {"c1", "m3", "adios"}} {
		if _, err := b.admit(t, m.chat, m.id, m.text); err != nil {
			t.Fatal(err)
		}
		if !b.quiet(1, 60*time.Second) {
			t.Fatal("not handled")
		}
	}
	log, err := b.Operator().MessageLog(context.Background(), "c1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		got = append(got, e.Direction+":"+e.ID+":"+e.Text)
	}
	want := []string{"in:m1:hola", "out:1:echo: hola", "in:m3:adios", "out:2:echo: adios"}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("log of c1:\n%q\nwant\n%q", got, want)
	}
	if last, _ := b.Operator().MessageLog(context.Background(), "c1", 1); len(last) != 1 || last[0].Text != "echo: adios" {
		t.Fatalf("limit 1: %+v", last)
	}
	if _, err := b.Operator().MessageLog(context.Background(), "", 0); err == nil {
		t.Fatal("a log without a chat")
	}
}

// menu posts "Pick one" with buttons yes/no on "menu", and answers a press
// with "you chose <id> (<title>) on <message>".
var menu = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	text := "?"
	switch {
	case ev.Kind == abi.EventInteraction:
		in := ev.Interaction
		text = "you chose " + in.ID + " (" + in.Title + ") on " + in.Message + "; text " + ev.Text
	case ev.Text == "menu":
		_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "Pick one", Buttons: []abi.Button{{ID: "yes", Title: "Yes"}, {ID: "no", Title: "No"}}})
		return err
	}
	_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: text})
	return err
})

// TestWebchatButtons: a reply's buttons reach the chat page's API with the
// message, and a press posted back arrives as an interaction event.
func TestWebchatButtons(t *testing.T) {
	b := newTestBot(t, testConfig(t, ""), memory.New(), menu)
	defer b.stop(t)
	post := func(body string) {
		w := httptest.NewRecorder()
		b.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/webchat/web/messages", strings.NewReader(body)))
		if w.Code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", body, w.Code, w.Body)
		}
	}
	post(`{"chat":"c1","text":"menu","id":"m1"}`)
	if !waitFor(60*time.Second, func() bool { return len(transcriptOf(t, b.Bot, "c1")) == 1 }) {
		t.Fatal("no menu")
	}
	m := transcriptOf(t, b.Bot, "c1")[0]
	if m.Text != "Pick one" || len(m.Buttons) != 2 || m.Buttons[0] != (abi.Button{ID: "yes", Title: "Yes"}) || m.Buttons[1].ID != "no" {
		t.Fatalf("menu entry %+v", m)
	}
	post(fmt.Sprintf(`{"chat":"c1","id":"p1","interaction":{"id":"yes","title":"Yes","message":"%d"}}`, m.Seq))
	if !waitFor(60*time.Second, func() bool { return len(transcriptOf(t, b.Bot, "c1")) == 2 }) {
		t.Fatal("no answer to the press")
	}
	if got := transcriptOf(t, b.Bot, "c1")[1].Text; got != "you chose yes (Yes) on 1; text Yes" {
		t.Fatalf("answer %q", got)
	}
	// A press is journaled like a message: the log shows it. (Entries of
	// one millisecond may come in either order: the menu's "out" entry is
	// stamped when its send is recorded, which can be as late as the press.)
	log, _ := b.Operator().MessageLog(context.Background(), "c1", 0)
	if len(log) != 4 || !slices.ContainsFunc(log, func(e ops.LogEntry) bool { return e.Direction == "in" && e.Text == "Yes" && e.ID == "p1" }) {
		t.Fatalf("log %+v", log)
	}
}

// deadlineChannel is a channel whose edits and typing fail when their
// context is already done, as an HTTP call would.
type deadlineChannel struct{ *fakeChannel }

func (deadlineChannel) Edit(ctx context.Context, _, _, _ string) error { return ctx.Err() }

func (deadlineChannel) Typing(ctx context.Context, _, _ string) error { return ctx.Err() }

// TestEditAndTypingThroughTheABI: a handler edits its own reply and shows
// typing on a channel that can; on one that cannot, both are unsupported and
// the event goes on. inline_max = "0s" (no inline retry) bounds them by the
// handler's deadline, not by a zero timeout that fails them before they
// start.
func TestEditAndTypingThroughTheABI(t *testing.T) {
	var editErr, typingErr error
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		ed := env.(wasm.Editor)
		typingErr = ed.Typing(ctx, abi.TypingRequest{Chat: ev.Chat})
		res, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "draft"})
		if err != nil {
			return err
		}
		editErr = ed.Edit(ctx, abi.EditRequest{Chat: ev.Chat, Message: res.Ref, Text: "final"})
		return nil
	})
	// handle runs one event "edit" on a bot of cfg's and provs.
	handle := func(cfg string, provs ...channel.Channel) *testBot {
		b := newTestBot(t, testConfig(t, cfg), memory.New(), h, provs...)
		t.Cleanup(func() { b.stop(t) })
		if _, err := b.admit(t, "c1", "m1", "edit"); err != nil {
			t.Fatal(err)
		}
		if !b.quiet(1, 60*time.Second) {
			t.Fatal("not handled")
		}
		return b
	}
	b := handle("")
	if editErr != nil || typingErr != nil {
		t.Fatalf("edit %v, typing %v", editErr, typingErr)
	}
	if es := transcriptOf(t, b.Bot, "c1"); len(es) != 2 || es[1].Edits != es[0].Seq || es[1].Text != "final" {
		t.Fatalf("transcript %+v", es)
	}
	plain := handle("", newChannel())
	if !errors.Is(editErr, wasm.ErrUnsupported) || !errors.Is(typingErr, wasm.ErrUnsupported) {
		t.Fatalf("on a channel without them: edit %v, typing %v", editErr, typingErr)
	}
	handle("[durability.outbox]\ninline_max = \"0s\"\n", deadlineChannel{newChannel()})
	if editErr != nil || typingErr != nil {
		t.Fatalf("with inline_max = 0s: edit %v, typing %v", editErr, typingErr)
	}
	if r := plain.inboxState(t, "web:m1"); r.State != durability.InboxDone {
		t.Fatalf("the event is %s", r.State)
	}
}
