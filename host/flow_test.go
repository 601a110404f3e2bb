package host

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// signupTranscript is what every language's flow example delivers for
// "/signup", name, city: each question and reply once, nothing else.
func signupTranscript(name, city string) []string {
	return []string{"What is your name?", "Nice to meet you, " + name + "!", "Which city do you live in, " + name + "?", "Thanks " + name + " from " + city + "!"}
}

// flowBot starts a bot running the module at path module on backend with the
// fake channel ch, or, with crash set, on the crashable backend with ch behind
// the crashable provider.
func flowBot(t *testing.T, module string, hotReload bool, backend durability.Backend, crash *crashpoint.Backend, ch *fakeChannel) *testBot {
	t.Helper()
	cfg := testConfig(t, `on_ambiguous = "skip"`)
	cfg.Bot.Module, cfg.Bot.HotReload = module, hotReload
	if crash != nil {
		return newTestBot(t, cfg, crash, nil, crashProvider{ch: ch, crash: crash})
	}
	return newTestBot(t, cfg, backend, nil, ch)
}

// say admits text as message id in chat c1 and waits until the bot has
// settled n messages.
func (b *testBot) say(t *testing.T, n int, id, text string) {
	t.Helper()
	if _, err := b.admit(t, "c1", id, text); err != nil {
		t.Fatalf("admit %q: %v", text, err)
	}
	if !b.quiet(n, 60*time.Second) {
		t.Fatalf("the bot did not settle after %q", text)
	}
}

// TestFlowRepliesNotRepeated (issue 11, item 1): a flow that replies between
// two questions, in every language, delivers each reply once. The flow re-runs
// from its start for every message; the sends of the steps it replays are not
// made again. A crash after the reply between the questions went out, and the
// replay of that message, still deliver it once: the replay makes the same
// live sends in the same order, so their derived keys match.
func TestFlowRepliesNotRepeated(t *testing.T) {
	want := signupTranscript("Ana", "Lima")
	for _, ex := range examples {
		if ex.kind != "flow" {
			continue
		}
		t.Run(ex.name, func(t *testing.T) {
			module := ex.build(t)
			t.Run("live", func(t *testing.T) {
				ch := newChannel()
				b := flowBot(t, module, false, memory.New(), nil, ch)
				defer b.stop(t)
				for i, text := range []string{"/signup", "Ana", "Lima"} {
					b.say(t, i+1, fmt.Sprint("m", i+1), text)
				}
				if got := ch.texts(); !reflect.DeepEqual(got, want) {
					t.Fatalf("transcript\n%q\nwant\n%q", got, want)
				}
			})
			t.Run("crash after the reply between the questions", func(t *testing.T) {
				shared := memory.New()
				crash := crashpoint.New(shared)
				ch := newChannel()
				a := flowBot(t, module, false, nil, crash, ch)
				a.say(t, 1, "m1", "/signup")
				crash.CrashAfter("channel.send") // "Nice to meet you" reaches the chat, then the process dies
				if _, err := a.admit(t, "c1", "m2", "Ana"); err != nil {
					t.Fatal(err)
				}
				if !waitFor(60*time.Second, crash.Crashed) {
					t.Fatal("no crash")
				}
				a.Kill()
				b := flowBot(t, module, false, shared, nil, ch)
				defer b.stop(t)
				b.say(t, 2, "m2", "Ana") // the channel redelivers; the record is replayed
				b.say(t, 3, "m3", "Lima")
				if got := ch.texts(); !reflect.DeepEqual(got, want) {
					t.Fatalf("transcript\n%q\nwant\n%q", got, want)
				}
			})
		})
	}
}

// TestFlowFormatAcrossLanguages (issue 11, item 2): every SDK writes and reads
// the flow state of abi/SPEC.md section 7, so a flow started under the Go
// module is answered correctly after a hot reload to the C module, and the
// other way round; and a value no SDK can parse is forgotten, the message
// handled as a normal message.
func TestFlowFormatAcrossLanguages(t *testing.T) {
	t.Run("hot reload", func(t *testing.T) {
		read := func(p string) []byte {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		goFlow := read(wasmbuild.Go(t, "../examples/flow"))
		cFlow := read(wasmbuild.C(t, "../examples/c-flow", "flow.c", "../../guest-sdk/c/botrun.c"))
		// A name of bytes each older format split on.
		name, city := "Ana María, 3:x,\nde \"la\" Paz", "Lima"
		for _, tc := range []struct {
			name    string
			modules [3][]byte // the module that takes each message
		}{
			{"go-c-go", [3][]byte{goFlow, cFlow, goFlow}},
			{"c-go-c", [3][]byte{cFlow, goFlow, cFlow}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "bot.wasm")
				if err := os.WriteFile(path, tc.modules[0], 0o644); err != nil {
					t.Fatal(err)
				}
				ch := newChannel()
				b := flowBot(t, path, true, memory.New(), nil, ch)
				defer b.stop(t)
				for i, text := range []string{"/signup", name, city} {
					if i > 0 {
						before := b.guest.Digest()
						replaceFile(t, path, tc.modules[i])
						if !waitFor(60*time.Second, func() bool { return b.guest.Digest() != before }) {
							t.Fatalf("the module for message %d never went live", i+1)
						}
					}
					b.say(t, i+1, fmt.Sprint("m", i+1), text)
				}
				if got, want := ch.texts(), signupTranscript(name, city); !reflect.DeepEqual(got, want) {
					t.Fatalf("transcript\n%q\nwant\n%q", got, want)
				}
			})
		}
	})
	weird := "a,\n:b 3:x,"
	for _, ex := range examples {
		if ex.kind != "flow" {
			continue
		}
		t.Run("state/"+ex.name, func(t *testing.T) {
			e, err := wasm.NewEngine(context.Background(), wasm.Config{Workers: 1, Logger: discard, CacheDir: testCacheDir})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			m, err := e.Load(context.Background(), ex.build(t))
			if err != nil {
				t.Fatal(err)
			}
			log := &sendLog{state: map[string][]byte{}}
			handle := func(text string) []string {
				t.Helper()
				log.Reset()
				ev := abi.Event{ID: "web:" + text, Provider: "web", Chat: "c1", From: "u", Text: text, Attempt: 1, ReceivedAt: 1}
				if err := m.Handle(context.Background(), ev, log); err != nil {
					t.Fatalf("message %q: %v", text, err)
				}
				return sentTexts(t, log.String())
			}
			state := func() string { return string(log.state["botrun.flow"]) }
			// What the SDK writes.
			for _, step := range []struct{ text, state string }{
				{"/signup", "6:signup,"},
				{"Ana", "6:signup,3:Ana,"},
				{"Lima", ""},
			} {
				handle(step.text)
				if got := state(); got != step.state {
					t.Fatalf("after %q the state is %q, want %q", step.text, got, step.state)
				}
			}
			// What it reads: any bytes in an answer; the reply of the step it
			// replays is not sent again.
			log.state["botrun.flow"] = []byte(fmt.Sprintf("6:signup,%d:%s,", len(weird), weird))
			if got, want := handle("Lima"), []string{"Thanks " + weird + " from Lima!"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("continuing another SDK's state sent %q, want %q", got, want)
			}
			// Any number of answers (C stopped at 16): more answers than the
			// flow has questions means every step was taken; the flow finishes
			// without repeating a send.
			log.state["botrun.flow"] = []byte("6:signup," + strings.Repeat("3:Ana,", 40))
			if got := handle("Lima"); len(got) != 0 || state() != "" {
				t.Fatalf("a flow with 41 answers sent %q and left state %q, want nothing", got, state())
			}
			// A value that does not parse, or names no flow of the module, is
			// forgotten: the message is a normal message.
			for _, bad := range []string{"signup\n\"Ana\"", "signup\x00Ana\x00", "6:signup,3:An", "6:signup,03:Ana,", "", "7:missing,3:Ana,"} {
				log.state["botrun.flow"] = []byte(bad)
				if got := handle("Lima"); !reflect.DeepEqual(got, []string{"echo: Lima"}) {
					t.Fatalf("state %q: sent %q, want the echo", bad, got)
				}
				if _, ok := log.state["botrun.flow"]; ok {
					t.Fatalf("state %q was kept", bad)
				}
			}
		})
	}
}

// sentTexts is the text of each send a sendLog recorded.
func sentTexts(t *testing.T, log string) []string {
	t.Helper()
	var texts []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var r abi.SendRequest
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("send %s: %v", sc.Text(), err)
		}
		texts = append(texts, r.Text)
	}
	return texts
}
