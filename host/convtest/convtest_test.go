package convtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botrun/botrun/internal/wasmbuild"
)

func runner(t *testing.T, module string, crash bool) *Runner {
	t.Helper()
	r, err := New(context.Background(), Options{Module: module, Crash: crash, CacheDir: wasmbuild.CacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func script(t *testing.T, src string) *Script {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.chat")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCrashFindsStateOutsideTheJournal: a bot that counts in its state
// passes with --crash; one that counts in a global variable passes without
// it (one run, one instance) and fails with it: a replay after a crash
// counts the message again. The failure names the crash point and the step.
func TestCrashFindsStateOutsideTheJournal(t *testing.T) {
	module := wasmbuild.Go(t, "../wasm/testdata/guests/counter")
	state := script(t, "> state\n< state 1\n> state\n< state 2\n:state n 2\n")
	if res := runner(t, module, true).Run(context.Background(), state, false); !res.Passed || res.CrashRuns == 0 {
		t.Fatalf("counting in state: %+v", res)
	}
	global := script(t, "> global\n< global 1\n> global\n< global 2\n")
	if res := runner(t, module, false).Run(context.Background(), global, false); !res.Passed {
		t.Fatalf("counting in a global, no crash: %+v", res)
	}
	res := runner(t, module, true).Run(context.Background(), global, false)
	if res.Passed || len(res.Failures) != 1 {
		t.Fatalf("counting in a global under --crash passed: %+v", res)
	}
	f := res.Failures[0]
	if !strings.Contains(f.Message, "with a crash") || !strings.Contains(f.Message, "journal write") || !strings.Contains(f.Message, "deterministic") || f.Diff == "" {
		t.Fatalf("the failure: %+v", f)
	}
}

// TestStateChatsAndSenders: ":chat" and ":from" set where messages come
// from; ":state" reads the chat's keys and the sender's "user/" keys; a
// wrong value fails at its line.
func TestStateChatsAndSenders(t *testing.T) {
	module := wasmbuild.Go(t, "../wasm/testdata/guests/counter")
	r := runner(t, module, false)
	s := script(t, `> state
< state 1
:chat other
:from ana
> state
< state 1
> name Ana
< ok
:state user/name Ana
:state n 1
:chat chat
:from user
:state user/name
:state n 1
`)
	if res := r.Run(context.Background(), s, false); !res.Passed {
		t.Fatalf("%+v", res)
	}
	wrong := script(t, "> state\n< state 1\n:state n 7\n")
	res := r.Run(context.Background(), wrong, false)
	if res.Passed || res.Failures[0].Line != 3 || !strings.Contains(res.Failures[0].Message, `want "7", the bot left "1"`) {
		t.Fatalf("a wrong state value: %+v", res)
	}
}

// TestUpdateKeepsTheRest: -update rewrites the replies and the ":state"
// values; comments, directives and blank lines stay where they were.
func TestUpdateKeepsTheRest(t *testing.T) {
	module := wasmbuild.Go(t, "../wasm/testdata/guests/counter")
	s := script(t, "# counting\n> state\n< wrong\n< and more\n\n:state n 9\n# again\n> state\n:chat b\n> nonsense\n")
	if res := runner(t, module, false).Run(context.Background(), s, true); !res.Passed || !res.Updated {
		t.Fatalf("%+v", res)
	}
	b, _ := os.ReadFile(s.Path)
	want := "# counting\n> state\n< state 1\n\n:state n 1\n# again\n> state\n< state 2\n:chat b\n> nonsense\n< ?\n"
	if string(b) != want {
		t.Fatalf("updated file\n%s\nwant\n%s", b, want)
	}
}

// TestStepsThatCannotRun: a press with no button of that title, and an API
// call no ":api" line answers, fail at their step with the way out.
func TestStepsThatCannotRun(t *testing.T) {
	r := runner(t, wasmbuild.Go(t, "../../examples/buttons"), false)
	res := r.Run(context.Background(), script(t, "> menu\n< Pick one\n  [Yes] [No]\n> [Maybe]\n"), false)
	if res.Passed || res.Failures[0].Line != 4 || !strings.Contains(res.Failures[0].Message, "has no button or row [Maybe]; it has [Yes] [No]") {
		t.Fatalf("pressing a button that is not there: %+v", res)
	}
	res = r.Run(context.Background(), script(t, "> [Yes]\n"), false)
	if res.Passed || !strings.Contains(res.Failures[0].Message, "no message in chat \"chat\" has buttons") {
		t.Fatalf("pressing before any button: %+v", res)
	}
	orders := runner(t, wasmbuild.Go(t, "../../examples/orders"), false)
	res = orders.Run(context.Background(), script(t, ":api orders GET /orders/1 200 ok\n> order 2\n< whatever\n"), false)
	if res.Passed || res.Failures[0].Line != 2 || !strings.Contains(res.Failures[0].Message, `no ":api" line before this step answers (add ":api orders GET /orders/2 200 BODY")`) {
		t.Fatalf("an unstubbed call: %+v", res)
	}
}

// TestParseErrors: each malformed line is refused with its line and what
// to write instead.
func TestParseErrors(t *testing.T) {
	for src, want := range map[string]string{
		"< hi\n":                        "t.chat:1: a reply before any message",
		"> hi\nhello\n":                 "t.chat:2: a line must start with",
		"> hi\n:advance soon\n":         "t.chat:2: :advance needs a duration",
		"> hi\n:advance 0s\n":           "t.chat:2: :advance needs a positive duration",
		"> hi\n:advance 40000d\n":       "t.chat:2: :advance 40000d is more than 100 years",
		"> hi\n:api orders GET x 200\n": "t.chat:2: :api: the path must start with \"/\"",
		"> hi\n:api orders GET /x\n":    "t.chat:2: :api needs NAME METHOD PATH STATUS",
		"> hi\n:api o GET /x 999\n":     "t.chat:2: :api: the status must be an HTTP status",
		"> hi\n:wait 2s\n":              "t.chat:2: unknown directive :wait",
		"> hi\n  [A]\n":                 "t.chat:2: an indented line belongs right under a reply",
		"> hi\n<hello\n":                `t.chat:2: a reply is "< text"`,
		":state n 1\n":                  "t.chat:1: :state checks the state after a step",
		"# nothing\n":                   "no step",
	} {
		_, err := Parse("t.chat", src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

// TestAttachments: "> (TYPE FILE) caption" attaches the file beside the
// test; the bot loads its bytes; a file that is not there, or a path out
// of the test's directory, is unavailable to the bot, never read.
func TestAttachments(t *testing.T) {
	r := runner(t, wasmbuild.Go(t, "../../examples/echo"), true)
	s := script(t, `> (document note.txt)
< echo: [document, 5 bytes]
  (document note.txt)
> (image gone.png)
< echo: [image, unavailable: rehydrate-failed]
  (image gone.png)
> (document ../../etc/passwd)
< echo: [document, unavailable: rehydrate-failed]
  (document ../../etc/passwd)
`)
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.Path), "note.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := r.Run(context.Background(), s, false); !res.Passed {
		t.Fatalf("%+v", res)
	}
	if _, err := Parse("t.chat", "> (image)\n"); err == nil || !strings.Contains(err.Error(), "an attachment is") {
		t.Fatalf("an attachment without a file: %v", err)
	}
}

// TestMessagesAsWritten: parentheses that are not an attachment, an
// escaped bracket, and trailing blanks are read as a user means them; a
// chat whose name has a space round-trips through -update; a CRLF file
// stays CRLF.
func TestMessagesAsWritten(t *testing.T) {
	s, err := Parse("t.chat", "> (just kidding) hi\n> \\[Yes]\n> [Yes]  \n> a\\s\n> (image x.png) look\n<@\"a b\" hello\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind       StepKind
		text, file string
	}{{Say, "(just kidding) hi", ""}, {Say, "[Yes]", ""}, {Press, "Yes", ""}, {Say, "a ", ""}, {Say, "look", "x.png"}}
	for i, w := range want {
		if st := s.Steps[i]; st.Kind != w.kind || st.Text != w.text || st.MediaRef != w.file {
			t.Errorf("step %d: %+v, want %+v", i+1, st, w)
		}
	}
	if r := s.Steps[4].Want[0]; r.Chat != "a b" || r.Text != "hello" {
		t.Errorf("<@\"a b\": %+v", r)
	}
	if got := (Reply{Chat: "a b", Text: "hi "}).render("chat"); got[0] != `<@"a b" hi\s` {
		t.Errorf("rendered %q", got)
	}
	r := runner(t, wasmbuild.Go(t, "../../examples/echo"), false)
	crlf := script(t, "# a CRLF file\r\n> hello\r\n< wrong\r\n  # kept\r\n> bye\r\n")
	if res := r.Run(context.Background(), crlf, true); !res.Passed {
		t.Fatalf("%+v", res)
	}
	b, _ := os.ReadFile(crlf.Path)
	if want := "# a CRLF file\r\n> hello\r\n< echo: hello\r\n  # kept\r\n> bye\r\n< echo: bye\r\n"; string(b) != want {
		t.Fatalf("updated %q, want %q", b, want)
	}
}
