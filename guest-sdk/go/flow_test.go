//go:build !wasip1

package bot

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// fakeHost is a host for native tests: it keeps the chat's state, numbers each
// event's sends as the host does (<event id>:<n>), and delivers a key once,
// as the outbox does.
type fakeHost struct {
	state     map[string][]byte
	event     string
	n         int
	keys      []string        // every send's key, in order
	delivered []string        // what reached the chat
	seen      map[string]bool // keys already delivered
	logs      []string
}

func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{state: map[string][]byte{}, seen: map[string]bool{}}
	native = h
	t.Cleanup(func() { native, pending = nil, nil })
	return h
}

func (h *fakeHost) send(req []byte, enqueue bool) []byte {
	var r struct{ Chat, Text string }
	d := decoder{b: req}
	if err := d.object(func(k string) error {
		s, err := d.str()
		switch k {
		case "chat":
			r.Chat = s
		case "text":
			r.Text = s
		}
		return err
	}); err != nil {
		panic(fmt.Sprintf("bad send request %s: %v", req, err))
	}
	h.n++
	key := fmt.Sprintf("%s:%d", h.event, h.n)
	h.keys = append(h.keys, key)
	status := "sent"
	if h.seen[key] {
		status = "deduped"
	} else {
		h.seen[key] = true
		h.delivered = append(h.delivered, r.Text)
	}
	return fmt.Appendf(nil, `{"status":%q,"key":%q,"ref":"","error":""}`, status, key)
}

func (h *fakeHost) stateGet(k string) ([]byte, bool) { v, ok := h.state[k]; return v, ok }
func (h *fakeHost) stateSet(k string, v []byte)      { h.state[k] = v }
func (h *fakeHost) stateDelete(k string)             { delete(h.state, k) }
func (h *fakeHost) log(level int32, msg string) {
	h.logs = append(h.logs, fmt.Sprint(level, " ", msg))
}

// handle runs one message through a handler shaped like examples/flow.
// startCommands are the messages that start a flow in handle; any other is
// the chat's flow's answer, or echoed.
var startCommands = map[string]*Flow{}

func init() {
	startCommands["/start"] = testFlow
	startCommands["/lookup"] = lookupFlow
}

func (h *fakeHost) handle(t *testing.T, id, text string) {
	t.Helper()
	h.event, h.n = id, 0
	ctx := &Context{Event: Event{ID: id, Provider: "web", Chat: "c1", Text: text}}
	var err error
	if flow, ok := startCommands[text]; ok {
		err = ctx.Start(flow)
	} else {
		var inFlow bool
		if inFlow, err = ctx.Continue(); !inFlow && err == nil {
			_, err = ctx.Reply("echo: " + text)
		}
	}
	if err != nil {
		t.Fatalf("message %q: %v", text, err)
	}
}

// hiStatus is the status of the flow's reply between its questions, in the
// last run.
var hiStatus string

var testFlow = NewFlow("signup", func(f *FlowContext) error {
	name, err := f.Ask("What is your name?")
	if err != nil {
		return err
	}
	res, err := f.Reply("Nice to meet you, " + name + "!")
	if err != nil {
		return err
	}
	hiStatus = res.Status
	if _, err := f.Enqueue(f.Event.Chat, "(noted "+name+")"); err != nil {
		return err
	}
	city, err := f.Ask("Which city do you live in?")
	if err != nil {
		return err
	}
	_, err = f.Reply("Thanks " + name + " from " + city + "!")
	return err
})

// TestFlowRepliesNotRepeated: a reply and an enqueue between two questions go
// out once; while the flow replays a step it took they are "replayed", with no
// host call, so they take no derived key; a crash-replay of a message makes
// the same sends under the same keys.
func TestFlowRepliesNotRepeated(t *testing.T) {
	h := newFakeHost(t)
	h.handle(t, "web:1", "/start")
	h.handle(t, "web:2", "Ana")
	if hiStatus != "sent" {
		t.Fatalf("the reply after the first answer: %q, want sent", hiStatus)
	}
	before := map[string][]byte{flowKey: h.state[flowKey]}
	keys := len(h.keys)
	h.handle(t, "web:3", "Lima")
	if hiStatus != StatusReplayed {
		t.Fatalf("the reply of a replayed step: %q, want %q", hiStatus, StatusReplayed)
	}
	want := []string{"What is your name?", "Nice to meet you, Ana!", "(noted Ana)", "Which city do you live in?", "Thanks Ana from Lima!"}
	if !reflect.DeepEqual(h.delivered, want) {
		t.Fatalf("transcript:\n%q\nwant\n%q", h.delivered, want)
	}
	if got := h.keys[keys:]; !reflect.DeepEqual(got, []string{"web:3:1"}) {
		t.Fatalf("the last step's sends took keys %q, want only web:3:1", got)
	}
	if _, ok := h.state[flowKey]; ok {
		t.Fatal("a finished flow left its state")
	}
	// A crash-replay of the last message reads the state as of its claim and
	// makes the same live send under the same key: the outbox dedupes it.
	h.state = before
	h.handle(t, "web:3", "Lima")
	if got := h.keys[keys:]; !reflect.DeepEqual(got, []string{"web:3:1", "web:3:1"}) || !reflect.DeepEqual(h.delivered, want) {
		t.Fatalf("the crash-replay sent %q (keys %q), want the same key deduped", h.delivered, got)
	}
	h.handle(t, "web:4", "after")
	if got := h.delivered[len(h.delivered)-1]; got != "echo: after" {
		t.Fatalf("after the flow: %q", got)
	}
}

// TestFlowStateFormat pins the state of SPEC.md section 7: netstrings, the
// flow's name and then its answers, for any bytes.
func TestFlowStateFormat(t *testing.T) {
	if got := string(encodeFlow("signup", []string{"Alice", "Paris"})); got != "6:signup,5:Alice,5:Paris," {
		t.Fatalf("encoded %q", got)
	}
	if got := string(encodeFlow("signup", nil)); got != "6:signup," {
		t.Fatalf("encoded %q", got)
	}
	answers := []string{"", "a\nb", "\x00", "3:x,", ",", "María", strings.Repeat("z", 1000)}
	for i := 0; i < 100; i++ {
		answers = append(answers, fmt.Sprint(i)) // no limit on the count
	}
	name, got, err := decodeFlow(encodeFlow("signup", answers))
	if err != nil || name != "signup" || !reflect.DeepEqual(got, answers) {
		t.Fatalf("round trip: %q %q %v", name, got, err)
	}
	for _, bad := range []string{"", "signup", "signup\n\"Ana\"", "signup\x00Ana\x00", "6:signup", "6:signup;", "7:signup,", "5:signup,",
		"06:signup,", ":signup,", "-1:,", "6:signup,5:Ali", "6:signup,x", "99999999999999999999999:a,", "6 :signup,"} {
		if _, _, err := decodeFlow([]byte(bad)); err == nil {
			t.Errorf("decodeFlow(%q) parsed", bad)
		}
	}
	if name, got, err := decodeFlow([]byte("0:,")); err != nil || name != "" || len(got) != 0 {
		t.Fatalf("an empty name: %q %q %v", name, got, err)
	}
}

// TestFlowForgetsStateItCannotParse: a value that is not the format (here the
// SDK's old newline format) or names no flow of the module is deleted and
// logged, and the message is handled as a normal message.
func TestFlowForgetsStateItCannotParse(t *testing.T) {
	for _, v := range []string{"signup\n\"Ana\"", "6:signup,3:Ana", "7:missing,3:Ana,"} {
		h := newFakeHost(t)
		h.state[flowKey] = []byte(v)
		h.handle(t, "web:1", "Lima")
		if _, ok := h.state[flowKey]; ok || !reflect.DeepEqual(h.delivered, []string{"echo: Lima"}) {
			t.Fatalf("state %q: delivered %q, state left %v", v, h.delivered, ok)
		}
		if len(h.logs) != 1 || !strings.Contains(h.logs[0], "forgetting the chat's flow") {
			t.Fatalf("state %q: logs %q", v, h.logs)
		}
	}
}

func FuzzDecodeFlow(f *testing.F) {
	f.Add([]byte("6:signup,5:Alice,5:Paris,"))
	f.Add([]byte("0:,"))
	f.Add([]byte("signup\n\"Ana\""))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, answers, err := decodeFlow(b)
		if err != nil {
			return
		}
		if again := encodeFlow(name, answers); !bytes.Equal(again, b) {
			t.Fatalf("%q decoded and encoded as %q", b, again)
		}
	})
}

// TestInFlow: the flow in progress and its name; a state that does not parse
// is no flow; an error reading the state is an error, never "no flow".
func TestInFlow(t *testing.T) {
	ctx := &Context{Event: Event{ID: "web:1", Chat: "c1"}}
	// No native host: every host call answers UNSUPPORTED.
	if name, ok, err := ctx.InFlow(); !errors.Is(err, ErrUnsupported) || ok || name != "" {
		t.Fatalf("state_get UNSUPPORTED: InFlow = %q, %v, %v; want an ErrUnsupported error", name, ok, err)
	}
	h := newFakeHost(t)
	if name, ok, err := ctx.InFlow(); err != nil || ok || name != "" {
		t.Fatalf("no state: InFlow = %q, %v, %v", name, ok, err)
	}
	h.state[flowKey] = []byte("6:signup,3:Ana,")
	if name, ok, err := ctx.InFlow(); err != nil || !ok || name != "signup" {
		t.Fatalf("a flow: InFlow = %q, %v, %v", name, ok, err)
	}
	h.state[flowKey] = []byte("06:signup,")
	if name, ok, err := ctx.InFlow(); err != nil || ok || name != "" {
		t.Fatalf("a state that does not parse: InFlow = %q, %v, %v", name, ok, err)
	}
}
