package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// example is one example bot and how to build it.
type example struct {
	name, kind string // kind: echo or flow
	build      func(t *testing.T) string
}

var examples = []example{
	{"go/echo", "echo", func(t *testing.T) string { return wasmbuild.Go(t, "../examples/echo") }},
	{"go/flow", "flow", func(t *testing.T) string { return wasmbuild.Go(t, "../examples/flow") }},
	{"c/echo", "echo", func(t *testing.T) string {
		return wasmbuild.C(t, "../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
	}},
	{"c/flow", "flow", func(t *testing.T) string {
		return wasmbuild.C(t, "../examples/c-flow", "flow.c", "../../guest-sdk/c/botrun.c")
	}},
	{"rust/echo", "echo", func(t *testing.T) string { return wasmbuild.Rust(t, "../examples/rust-echo") }},
	{"rust/flow", "flow", func(t *testing.T) string { return wasmbuild.Rust(t, "../examples/rust-flow") }},
	{"assemblyscript/echo", "echo", func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../examples/as-echo") }},
	{"assemblyscript/flow", "flow", func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../examples/as-flow") }},
}

// TestExamples runs every example bot through botrun and the webchat API:
// each echo bot replies exactly "echo: <text>", each flow bot holds the
// signup conversation.
func TestExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			base, _ := startBot(t, ex.build(t), "")
			// talk posts text and returns the n replies it gets.
			talk := func(chat, id, text string, n int) []string {
				t.Helper()
				before := len(replies(t, base, chat, 1000, 50*time.Millisecond))
				if code := postMessage(t, base, chat, text, id); code != 202 {
					t.Fatalf("POST %q: %d", text, code)
				}
				got := replies(t, base, chat, before+n, 30*time.Second)
				if len(got) != before+n {
					t.Fatalf("%d replies to %q, want %d", len(got)-before, text, n)
				}
				return got[before:]
			}
			if got := talk("e", "e1", "hola, ¿qué tal? \"quoted\" \\ tab\t", 1); got[0] != "echo: hola, ¿qué tal? \"quoted\" \\ tab\t" {
				t.Fatalf("echo: %q", got)
			}
			if ex.kind != "flow" {
				return
			}
			for _, step := range []struct {
				in   string
				want []string
			}{
				{"/signup", []string{"What is your name?"}},
				{"Ana", []string{"Nice to meet you, Ana!", "Which city do you live in, Ana?"}},
				{"Lima", []string{"Thanks Ana from Lima!"}},
				{"after", []string{"echo: after"}},
			} {
				if got := talk("f", "f-"+step.in, step.in, len(step.want)); !reflect.DeepEqual(got, step.want) {
					t.Fatalf("flow: %q answered %q, want %q", step.in, got, step.want)
				}
			}
		})
	}
}

// sendLog is a wasm.Env that records each send's exact bytes and keeps state.
type sendLog struct {
	bytes.Buffer
	state map[string][]byte
	n     int
	media string // the ref of the event's first media
}

func (l *sendLog) Send(_ context.Context, r abi.SendRequest) (abi.SendResult, error) {
	b, _ := json.Marshal(r)
	l.Write(append(b, '\n'))
	l.n++
	return abi.SendResult{Status: abi.SendSent, Key: fmt.Sprint("k", l.n), Ref: fmt.Sprint(l.n)}, nil
}
func (l *sendLog) Enqueue(ctx context.Context, r abi.SendRequest) (abi.SendResult, error) {
	return l.Send(ctx, r)
}
func (l *sendLog) Post(ctx context.Context, r abi.SendRequest) (abi.SendResult, error) {
	res, err := l.Send(ctx, r)
	return abi.SendResult{Status: abi.SendQueued, Key: res.Key}, err
}
func (l *sendLog) StateGet(_ context.Context, k string) ([]byte, bool, error) {
	v, ok := l.state[k]
	return v, ok, nil
}
func (l *sendLog) StateSet(_ context.Context, k string, v []byte) error {
	l.state[k] = append([]byte(nil), v...)
	return nil
}
func (l *sendLog) StateDelete(_ context.Context, k string) error {
	delete(l.state, k)
	return nil
}

// LoadMedia answers a ref "gone" as the host does a reference it could not
// rehydrate, and any other ref with the bytes "<ref>-bytes".
func (l *sendLog) LoadMedia(_ context.Context, i int) ([]byte, error) {
	switch {
	case i > 0:
		return nil, wasm.ErrNoMedia
	case l.media == "gone":
		return nil, &abi.MediaUnavailableError{Reason: abi.MediaRehydrateFailed, Message: "the channel no longer has it"}
	}
	return []byte(l.media + "-bytes"), nil
}

// testSecret is the random secret of engines whose runs a test compares: a
// replay reads the same random bytes only under the same secret.
var testSecret = []byte("botrun test random secret")

// TestReplayIsDeterministic also covers a guest that reads the clock and WASI
// random: the same journaled events give the same bytes, other events other
// bytes.
func TestClockAndRandomComeFromTheJournal(t *testing.T) {
	path := wasmbuild.Go(t, "wasm/testdata/guests/faulty")
	run := func(id string) string {
		e, err := wasm.NewEngine(context.Background(), wasm.Config{Workers: 1, Logger: discard, RandomSecret: testSecret, CacheDir: testCacheDir})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(context.Background())
		m, err := e.Load(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		log := &sendLog{state: map[string][]byte{}}
		ev := abi.Event{ID: id, Provider: "web", Chat: "c1", Text: "entropy", Attempt: 1, ReceivedAt: 1764412800000}
		if err := m.Handle(context.Background(), ev, log); err != nil {
			t.Fatal(err)
		}
		return log.String()
	}
	a, b, other := run("web:e1"), run("web:e1"), run("web:e2")
	if a != b || a == other || !strings.Contains(a, "2025-11-29T10:40:00") {
		t.Fatalf("replays %q and %q, other event %q: want equal replays at the journaled time, another event different", a, b, other)
	}
}

// TestReplayIsDeterministic re-runs the same journaled events against the same
// module, on fresh instances, in every language, and requires byte-identical
// sends: the clock, the random source and the inputs are the journal's.
func TestReplayIsDeterministic(t *testing.T) {
	events := []string{"/signup", "Ana", "Lima", "hello", "¡olé!"}
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			path := ex.build(t)
			run := func() string {
				e, err := wasm.NewEngine(context.Background(), wasm.Config{Workers: 1, Logger: discard, RandomSecret: testSecret, CacheDir: testCacheDir})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close(context.Background())
				m, err := e.Load(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				log := &sendLog{state: map[string][]byte{}}
				for i, text := range events {
					ev := abi.Event{ID: fmt.Sprint("web:r", i), Provider: "web", Chat: "c1", From: "u", Text: text, Attempt: 1, ReceivedAt: 1764412800000 + int64(i)}
					if err := m.Handle(context.Background(), ev, log); err != nil {
						t.Fatalf("event %q: %v", text, err)
					}
				}
				return log.String()
			}
			first, second := run(), run()
			if first != second || first == "" {
				t.Fatalf("replay differs:\n%s\n---\n%s", first, second)
			}
			if ex.kind == "echo" {
				// The SDK reads the event's media and loads its bytes: a photo
				// without a caption; then one whose reference is gone.
				e, _ := wasm.NewEngine(context.Background(), wasm.Config{Workers: 1, Logger: discard, RandomSecret: testSecret, CacheDir: testCacheDir})
				defer e.Close(context.Background())
				m, err := e.Load(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				for _, tt := range []struct{ ref, want string }{
					{`ref"1`, `"text":"echo: [image, 11 bytes]","media":{"type":"image","ref":"ref\"1"}`},
					{"gone", `"text":"echo: [image, unavailable: rehydrate-failed]","media":{"type":"image","ref":"gone"}`},
				} {
					log := &sendLog{state: map[string][]byte{}, media: tt.ref}
					ev := abi.Event{ID: "web:media", Provider: "web", Chat: "c1", Attempt: 1, ReceivedAt: 1,
						Media: []abi.Media{{Type: "image", Ref: tt.ref, MIME: "image/png"}, {Type: "audio", Ref: "r2"}}}
					if err := m.Handle(context.Background(), ev, log); err != nil {
						t.Fatal(err)
					}
					if got := log.String(); !strings.Contains(got, tt.want) {
						t.Fatalf("media event (ref %q) answered %s, want %s", tt.ref, got, tt.want)
					}
				}
			}
		})
	}
}
