package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/discordtest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/coder/websocket"
)

// gatewaySetup runs a gateway-mode provider against a fresh fake until the
// test ends, and waits for its session.
func gatewaySetup(t *testing.T, heartbeat time.Duration) (*Provider, *discordtest.API, *admitter, *httptest.Server) {
	t.Helper()
	api := newFake()
	api.Gateway.HeartbeatInterval = heartbeat
	srv := httptest.NewServer(api)
	a := newAdmitter()
	p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, APIURL: srv.URL}, channel.Env{Admitter: a})
	if err != nil {
		t.Fatal(err)
	}
	short := func() time.Duration { return time.Millisecond }
	p.gw.retry = func(int) time.Duration { return short() }
	p.gw.invalid, p.gw.admitWait, p.gw.fatalWait = short, time.Millisecond, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	fakekit.WaitFor(t, "the Gateway session", api.Gateway.Connected)
	return p, api, a, srv
}

// ids returns the message ids of msgs.
func ids(msgs []channel.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.ID)
	}
	return out
}

// TestGatewayIdentifiesAndAdmits: Identify with the three intents, the URL
// from /gateway/bot, heartbeats acknowledged; messages admitted with their
// text and attachments, under their message id; bots' and webhooks'
// messages ignored.
func TestGatewayIdentifiesAndAdmits(t *testing.T) {
	// Long enough that a loaded machine acknowledges every beat in time (a
	// beat unacknowledged by the next one is a zombie connection).
	_, api, a, srv := gatewaySetup(t, 2*time.Second)
	if got := api.Gateway.Stats().Intents; len(got) != 1 || got[0] != 1<<9|1<<12|1<<15 {
		t.Fatalf("identified with intents %v, want GUILD_MESSAGES|DIRECT_MESSAGES|MESSAGE_CONTENT (%d)", got, 1<<9|1<<12|1<<15)
	}
	if n := api.Calls("gateway/bot"); n != 1 {
		t.Fatalf("GET /gateway/bot called %d times", n)
	}
	file := api.Attachment(srv.URL, chat, "cat.png", "image/png", photo, time.Hour)
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000001", chat, user, false, "hola"))
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000002", chat, "600000000000000009", true, "a bot"))
	webhook := api.MessageCreate("1300000000000000003", chat, user, false, "a webhook's")
	webhook["webhook_id"] = "1400000000000000001"
	api.Gateway.Dispatch("MESSAGE_CREATE", webhook)
	api.Gateway.Dispatch("GUILD_CREATE", map[string]any{"id": "800000000000000001"})
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000004", chat, user, false, "", file))
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000001", chat, user, false, "hola"))
	fakekit.WaitFor(t, "three admissions", func() bool { return len(a.admitted()) == 3 })
	got := a.admitted()
	if !slices.Equal(ids(got), []string{"1300000000000000001", "1300000000000000004", "1300000000000000001"}) {
		t.Fatalf("admitted %v", ids(got))
	}
	if m := got[0]; m.Chat != chat || m.From != user || m.Text != "hola" || m.ReceivedAt.IsZero() {
		t.Fatalf("text message admitted as %+v", m)
	}
	if m := got[1]; len(m.Media) != 1 || m.Media[0].Type != "image" || m.Media[0].Ref != file.URL || m.Media[0].MIME != "image/png" {
		t.Fatalf("attachment admitted as %+v", m)
	}
	fakekit.WaitFor(t, "heartbeats", func() bool { return api.Gateway.Stats().Heartbeats >= 2 })
	if s := api.Gateway.Stats(); s.Identifies != 1 || s.Resumes != 0 {
		t.Fatalf("acknowledged heartbeats made the client reconnect: %+v", s)
	}
}

// TestGatewayResumeAfterDrop: the fake drops the connection in the middle
// of a stream of ten messages; the client resumes the session from the last
// dispatch it handled, and every message is admitted exactly once, in
// order: none lost, none doubled.
func TestGatewayResumeAfterDrop(t *testing.T) {
	_, api, a, _ := gatewaySetup(t, 45*time.Second)
	api.Gateway.DropAfter(3)
	var want []string
	for i := range 10 {
		id := fmt.Sprint(1300000000000000010 + i)
		want = append(want, id)
		api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate(id, chat, user, false, "m"+fmt.Sprint(i)))
	}
	fakekit.WaitFor(t, "ten admissions", func() bool { return len(a.admitted()) >= 10 })
	fakekit.WaitFor(t, "the resumed session", api.Gateway.Connected)
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000099", chat, user, false, "after"))
	want = append(want, "1300000000000000099")
	fakekit.WaitFor(t, "the message after the resume", func() bool { return len(a.admitted()) >= 11 })
	if got := ids(a.admitted()); !slices.Equal(got, want) {
		t.Fatalf("Admit was called for %v; want each message once, in order: %v", got, want)
	}
	s := api.Gateway.Stats()
	if s.Identifies != 1 || s.Resumes != 1 || len(s.ResumedFrom) != 1 {
		t.Fatalf("want one identify and one resume: %+v", s)
	}
	// READY is seq 1 and the messages 2…11: the resume asked for what
	// followed the last message handled, no earlier.
	if from := s.ResumedFrom[0]; from < 1 || from > 4 {
		t.Fatalf("resumed from seq %d; the drop came after seq 4", from)
	}
}

// TestGatewayResumesWhatWasNotAdmitted: a message the journal refuses is not
// handled: the client drops the connection and resumes before it, and
// Discord's replay brings it back.
func TestGatewayResumesWhatWasNotAdmitted(t *testing.T) {
	_, api, a, _ := gatewaySetup(t, 45*time.Second)
	a.mu.Lock()
	a.fail = 1
	a.mu.Unlock()
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000021", chat, user, false, "first"))
	fakekit.WaitFor(t, "the replayed message", func() bool { return len(a.admitted()) == 1 })
	fakekit.WaitFor(t, "the resumed session", api.Gateway.Connected)
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000022", chat, user, false, "second"))
	fakekit.WaitFor(t, "the next message", func() bool { return len(a.admitted()) == 2 })
	if got := ids(a.admitted()); !slices.Equal(got, []string{"1300000000000000021", "1300000000000000022"}) {
		t.Fatalf("admitted %v", got)
	}
	if s := api.Gateway.Stats(); s.Resumes != 1 || s.ResumedFrom[0] != 1 {
		t.Fatalf("want a resume from READY (seq 1): %+v", s)
	}
}

// TestGatewayReconnectAndInvalidSession: op 7 is answered with a resume;
// a non-resumable op 9 with a new Identify; a missed heartbeat
// acknowledgement with a resume.
func TestGatewayReconnectAndInvalidSession(t *testing.T) {
	_, api, a, _ := gatewaySetup(t, 45*time.Second)
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000031", chat, user, false, "one"))
	fakekit.WaitFor(t, "one admission", func() bool { return len(a.admitted()) == 1 })

	api.Gateway.Reconnect()
	fakekit.WaitFor(t, "the resume", func() bool { return api.Gateway.Stats().Resumes == 1 && api.Gateway.Connected() })
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000032", chat, user, false, "two"))
	fakekit.WaitFor(t, "two admissions", func() bool { return len(a.admitted()) == 2 })

	api.Gateway.InvalidSession(false)
	fakekit.WaitFor(t, "a new identify", func() bool { return api.Gateway.Stats().Identifies == 2 && api.Gateway.Connected() })
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000033", chat, user, false, "three"))
	fakekit.WaitFor(t, "three admissions", func() bool { return len(a.admitted()) == 3 })
	if s := api.Gateway.Stats(); s.Resumes != 1 {
		t.Fatalf("a non-resumable invalid session was resumed: %+v", s)
	}
	if got := ids(a.admitted()); !slices.Equal(got, []string{"1300000000000000031", "1300000000000000032", "1300000000000000033"}) {
		t.Fatalf("admitted %v", got)
	}
}

// TestGatewayZombieConnection: heartbeats that are not acknowledged mean a
// dead connection: the client drops it and resumes.
func TestGatewayZombieConnection(t *testing.T) {
	_, api, _, _ := gatewaySetup(t, 45*time.Second)
	api.Gateway.Lock()
	api.Gateway.NoACK, api.Gateway.HeartbeatInterval = true, 10*time.Millisecond
	api.Gateway.Unlock()
	api.Gateway.Reconnect() // the next Hello has the short interval
	fakekit.WaitFor(t, "a resume after unacknowledged heartbeats", func() bool { return api.Gateway.Stats().Resumes >= 2 })
}

// TestGatewayInteractions: a command and a button press over the Gateway
// are admitted, then acknowledged with the callback (5, 6), never before;
// the reply to the command goes out as its follow-up.
func TestGatewayInteractions(t *testing.T) {
	p, api, a, _ := gatewaySetup(t, 45*time.Second)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "Pick", Buttons: []abi.Button{{ID: "yes", Title: "Yes"}}})
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.hook = func(m channel.Message) {
		if n := len(api.CallbackList()); n != len(a.calls)-1 {
			t.Errorf("%d callbacks made before %s was admitted", n, m.ID)
		}
	}
	a.mu.Unlock()
	var cmd, press map[string]any
	json.Unmarshal(api.Command(discordtest.Command{Channel: chat, User: user, Name: "ask", Text: "hola"}), &cmd)
	json.Unmarshal(api.Press(discordtest.Press{Channel: chat, User: user, Message: ref, CustomID: "yes"}), &press)
	api.Gateway.Dispatch("INTERACTION_CREATE", cmd)
	api.Gateway.Dispatch("INTERACTION_CREATE", press)
	fakekit.WaitFor(t, "two callbacks", func() bool { return len(api.CallbackList()) == 2 })
	got := a.admitted()
	if len(got) != 2 || got[0].Text != "hola" || got[1].Interaction == nil ||
		*got[1].Interaction != (abi.Interaction{ID: "yes", Title: "Yes", Message: ref}) {
		t.Fatalf("admitted %+v", got)
	}
	if cb := api.CallbackList(); cb[0] != (discordtest.Callback{ID: cmd["id"].(string), Type: 5}) || cb[1].Type != 6 {
		t.Fatalf("callbacks %+v", cb)
	}
	reply, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "echo: hola", Key: "dc:" + cmd["id"].(string) + ":1"})
	if err != nil {
		t.Fatal(err)
	}
	if m := api.Message(reply); m == nil || m.Interaction != cmd["id"] {
		t.Fatalf("the reply went out as %+v, want the command's follow-up", m)
	}
}

// TestGatewayRefusalNeedsTheOperator: the close codes that only the
// operator can mend (a bad token, intents not enabled) wait long and end
// the session; the others resume.
func TestGatewayRefusalNeedsTheOperator(t *testing.T) {
	p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	g := p.gw
	for _, c := range []struct {
		code         websocket.StatusCode
		fatal, fresh bool
	}{{4004, true, true}, {4014, true, true}, {4009, false, true}, {4007, false, true}, {4000, false, false}, {4001, false, false}} {
		g.sessionID = "s"
		g.seq.Store(5)
		out := g.closed(websocket.CloseError{Code: c.code}, true)
		if c.fatal != (out.wait == g.fatalWait) || c.fresh != (g.sessionID == "") {
			t.Errorf("close %d: %+v, session %q; want fatal %v, a new session %v", c.code, out, g.sessionID, c.fatal, c.fresh)
		}
	}
}

// TestGatewayResumesAcrossRestart: botrun stops (closing the connection so
// the session stays resumable) and keeps the session in the backend's Kv;
// messages sent while it is down are replayed to the next run, which
// resumes the session: nothing lost, nothing doubled.
func TestGatewayResumesAcrossRestart(t *testing.T) {
	api := newFake()
	api.Gateway.HeartbeatInterval = 45 * time.Second
	srv := httptest.NewServer(api)
	defer srv.Close()
	kv := memory.NewKv()
	start := func(a *admitter) (stop func()) {
		p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, APIURL: srv.URL}, channel.Env{Admitter: a, Kv: kv, KeyPrefix: "bot/"})
		if err != nil {
			t.Fatal(err)
		}
		p.gw.retry = func(int) time.Duration { return time.Millisecond }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			p.Run(ctx)
			close(done)
		}()
		return func() { cancel(); <-done }
	}
	first := newAdmitter()
	stop := start(first)
	fakekit.WaitFor(t, "the Gateway session", api.Gateway.Connected)
	for i := range 2 {
		api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate(fmt.Sprint(1300000000000000100+i), chat, user, false, "before"))
	}
	fakekit.WaitFor(t, "two admissions", func() bool { return len(first.admitted()) == 2 })
	stop()
	fakekit.WaitFor(t, "the connection closed", func() bool { return !api.Gateway.Connected() })
	for i := range 2 {
		api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate(fmt.Sprint(1300000000000000200+i), chat, user, false, "while down"))
	}
	second := newAdmitter()
	defer start(second)()
	fakekit.WaitFor(t, "the missed messages", func() bool { return len(second.admitted()) >= 2 })
	if got := ids(second.admitted()); !slices.Equal(got, []string{"1300000000000000200", "1300000000000000201"}) {
		t.Fatalf("the restarted run admitted %v; want the two sent while it was down, once each", got)
	}
	if s := api.Gateway.Stats(); s.Identifies != 1 || s.Resumes != 1 {
		t.Fatalf("want one identify and one resume across the restart: %+v", s)
	}
}

// panickyKv is a Kv whose Commit panics: the session saver's writes.
type panickyKv struct{ *memory.Kv }

func (panickyKv) Commit(context.Context, []durability.Write) error {
	var m map[string]int
	m["boom"]++
	return nil
}

// A panic in the goroutine that saves the Gateway session does not take
// the process down: it is counted, and the Gateway admits on.
func TestAPanicSavingTheSessionIsRecovered(t *testing.T) {
	api := newFake()
	api.Gateway.HeartbeatInterval = 45 * time.Second
	srv := httptest.NewServer(api)
	defer srv.Close()
	a := newAdmitter()
	var panics atomic.Int32
	p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, APIURL: srv.URL},
		channel.Env{Admitter: a, Kv: panickyKv{memory.NewKv()}, KeyPrefix: "bot/", Panicked: func() { panics.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	fakekit.WaitFor(t, "the Gateway session", api.Gateway.Connected)
	fakekit.WaitFor(t, "the saver's panic", func() bool { return panics.Load() == 1 })
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000301", chat, user, false, "after"))
	fakekit.WaitFor(t, "the message after", func() bool { return len(a.admitted()) == 1 })
}
