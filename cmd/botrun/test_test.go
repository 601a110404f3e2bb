package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestExampleConversations: "botrun test" (the built binary, as a user
// runs it) runs the examples' conversation tests, with and without
// --crash, against the example in every language that has it: the same
// conversation, the same replies.
func TestExampleConversations(t *testing.T) {
	bin := buildBotrun(t)
	cSDK := "../../guest-sdk/c/botrun.c"
	for _, c := range []struct {
		name  string
		tests string
		build func(t *testing.T) string
	}{
		{"go/echo", "echo", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/echo") }},
		{"c/echo", "echo", func(t *testing.T) string { return wasmbuild.C(t, "../../examples/c-echo", "echo.c", cSDK) }},
		{"rust/echo", "echo", func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-echo") }},
		{"as/echo", "echo", func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../../examples/as-echo") }},
		{"go/flow", "flow", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/flow") }},
		{"c/flow", "flow", func(t *testing.T) string { return wasmbuild.C(t, "../../examples/c-flow", "flow.c", cSDK) }},
		{"rust/flow", "flow", func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-flow") }},
		{"as/flow", "flow", func(t *testing.T) string { return wasmbuild.AssemblyScript(t, "../../examples/as-flow") }},
		{"go/buttons", "buttons", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/buttons") }},
		{"rust/buttons", "buttons", func(t *testing.T) string { return wasmbuild.Rust(t, "../../examples/rust-buttons") }},
		{"go/orders", "orders", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/orders") }},
		{"go/assistant", "assistant", func(t *testing.T) string { return wasmbuild.Go(t, "../../examples/assistant") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			module := c.build(t)
			dir := filepath.Join("../../examples", c.tests, "tests")
			for _, args := range [][]string{{"test", "-m", module, dir}, {"test", "--crash", "-m", module, dir}} {
				code, out, errs := runBinary(t, bin, args...)
				if code != 0 || !strings.Contains(out, "PASS") {
					t.Fatalf("botrun %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
				}
			}
		})
	}
}

// TestTestReportsFailures: a conversation the bot does not follow fails
// with exit 1, the file:line of the reply and a diff; a bad file is a usage
// error (exit 2) naming its line; -update writes the bot's replies; --json
// prints a result per file.
func TestTestReportsFailures(t *testing.T) {
	module := wasmbuild.Go(t, "../../examples/echo")
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	runTest := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"test", "-m", module}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	wrong := write("wrong.chat", "> hello\n< echo: hello\n> bye\n< echo: ciao\n")
	code, out := runTest(wrong)
	if code != 1 || !strings.Contains(out, "wrong.chat:4: reply 1 differs") || !strings.Contains(out, "- < echo: ciao") || !strings.Contains(out, "+ < echo: bye") {
		t.Fatalf("a wrong reply: exit %d\n%s", code, out)
	}
	bad := write("bad.chat", "> hi\nhello\n")
	if code, out := runTest(bad); code != 2 || !strings.Contains(out, "bad.chat:2: a line must start with") {
		t.Fatalf("a bad line: exit %d\n%s", code, out)
	}
	if code, out := runTest("-update", wrong); code != 0 || !strings.Contains(out, "updated") {
		t.Fatalf("-update: exit %d\n%s", code, out)
	}
	if b, _ := os.ReadFile(wrong); string(b) != "> hello\n< echo: hello\n> bye\n< echo: bye\n" {
		t.Fatalf("-update wrote\n%s", b)
	}
	if code, out := runTest("--json", wrong); code != 0 || !strings.Contains(out, `"passed":true`) || !strings.Contains(out, `"steps":2`) {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
	if code, out := runTest("-run", "nomatch", dir); code != 2 || !strings.Contains(out, "no *.chat file") {
		t.Fatalf("-run matching nothing: exit %d\n%s", code, out)
	}
	if code, out := runTest(filepath.Join(dir, "absent.chat")); code != 2 || !strings.Contains(out, "absent.chat") {
		t.Fatalf("a missing file: exit %d\n%s", code, out)
	}
}
