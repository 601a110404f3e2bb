package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// countingChannel is a fake channel "web" that counts its sends.
type countingChannel struct {
	mu    sync.Mutex
	sends int
}

func (c *countingChannel) ID() string { return "web" }

func (c *countingChannel) Send(_ context.Context, out channel.Outbound) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sends++
	return fmt.Sprint("ref-", c.sends), nil
}

func (c *countingChannel) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sends
}

// dryRunTraffic is what the live bot of the dry-run tests is told, in order:
// a signup flow in c1 (its state changes at each step, so early records
// replay only with their recorded inputs), echoes in c2 and c3.
var dryRunTraffic = []struct{ id, chat, text string }{
	{"m1", "c1", "/signup"}, {"m2", "c1", "Ana"}, {"m3", "c2", "hello"}, {"m4", "c1", "Madrid"},
	{"m5", "c1", "hi"}, {"m6", "c3", "boom"}, {"m7", "c2", "/signup"}, {"m8", "c2", "Bea"},
}

// TestReplayDryRun runs a live bot (examples/flow) on each shared backend,
// then `botrun replay --dry-run` beside it: the same module replays with no
// change, a module answering "hola" shows exactly the echoed conversations,
// a module that traps on one input reports that record as a new fault, a
// record completed before inputs were recorded cannot be replayed, and
// nothing is sent or written.
func TestReplayDryRun(t *testing.T) {
	bin := buildBotrun(t)
	flow := wasmbuild.Go(t, "../../examples/flow")
	hola := flowVariant(t, "hola", func(src string) string { return strings.ReplaceAll(src, `"echo: "`, `"hola: "`) })
	trap := flowVariant(t, "trap", func(src string) string {
		return strings.Replace(src, "bot.Handle(func(ctx *bot.Context) error {", "bot.Handle(func(ctx *bot.Context) error {\n\t\tif ctx.Event.Text == \"boom\" {\n\t\t\tpanic(\"boom\")\n\t\t}", 1)
	})
	// A candidate that reads a key the original turns did not read.
	peek := flowVariant(t, "peek", func(src string) string {
		return strings.Replace(src, `		_, err := ctx.Reply("echo: " + ctx.Event.Text)`, `		ctx.StateGet("never-read")
		_, err := ctx.Reply("echo: " + ctx.Event.Text)`, 1)
	})
	backends := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string {
			return fmt.Sprintf("backend = \"sqlite\"\npath = %q", filepath.Join(t.TempDir(), "bot.db"))
		},
		"postgres": func(t *testing.T) string {
			return fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"dry%d_\"", testserver.Postgres(t), os.Getpid())
		},
		"redis": func(t *testing.T) string {
			return fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"dry%d\"", testserver.Redis(t), os.Getpid())
		},
	}
	for _, name := range []string{"sqlite", "postgres", "redis"} {
		t.Run(name, func(t *testing.T) {
			cfgPath := filepath.Join(t.TempDir(), "bot.toml")
			src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[durability]\n%s\ninstance_id = \"live\"\n\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
				flow, testDataDir(), backends[name](t))
			if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			ch := liveBot(t, cfgPath)
			legacyRecord(t, cfgPath)
			journal := snapshot(t, cfgPath)
			sent := ch.count()

			// The same module: nothing changed; the legacy record is not guessed.
			code, out, errs := runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", flow)
			if code != 0 || !strings.Contains(out, "replayed 8 records") || !strings.Contains(out, "8 identical, 0 changed, 0 new faults") ||
				!strings.Contains(out, "cannot replay 1 records (inputs not recorded 1)") || !strings.Contains(out, "web:old1: inputs not recorded") {
				t.Fatalf("same module: exit %d\n%s%s", code, out, errs)
			}

			// "hola" where flow said "echo": the echoed records change.
			code, out, errs = runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", hola)
			if code != 1 {
				t.Fatalf("hola: exit %d, want 1\n%s%s", code, out, errs)
			}
			for _, want := range []string{
				"--- web/c1 as sent\n+++ web/c1 with " + hola + "\n@@ web:m5 (done, ",
				"-web:m5:1 → c1: \"echo: hi\"\n+web:m5:1 → c1: \"hola: hi\"\n",
				"-web:m3:1 → c2: \"echo: hello\"\n+web:m3:1 → c2: \"hola: hello\"\n",
				"5 identical, 3 changed, 0 new faults in 3 conversations",
			} {
				if !strings.Contains(out, want) {
					t.Fatalf("hola: no %q in\n%s", want, out)
				}
			}
			if got := outcomes(t, bin, cfgPath, hola, dryrun.Changed); !slices.Equal(got, []string{"web:m3", "web:m5", "web:m6"}) {
				t.Fatalf("hola changed %v, want web:m3 web:m5 web:m6", got)
			}

			// The rest reads the journal as the cases above did: on the other
			// backends it would compile the same candidates again (each a Go
			// guest under -race) to test what does not depend on the backend.
			if name == "sqlite" {
				dryRunCandidates(t, bin, cfgPath, hola, trap, peek)
			}

			if n := ch.count(); n != sent {
				t.Fatalf("the dry runs sent %d messages", n-sent)
			}
			if after := snapshot(t, cfgPath); after != journal {
				t.Fatalf("the dry runs changed the journal:\nbefore %s\nafter  %s", journal, after)
			}
		})
	}
}

// dryRunCandidates: a module that traps on "boom" makes that record a new
// fault; one that reads a key the original turns did not read is not
// guessed; --chat, --since and --provider filter the records.
func dryRunCandidates(t *testing.T, bin, cfgPath, hola, trap, peek string) {
	t.Helper()
	// A module that traps on "boom": that record is a new fault.
	code, out, errs := runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", trap)
	if code != 1 || !strings.Contains(out, "!new fault: guest fault (trap)") || !strings.Contains(out, "7 identical, 0 changed, 1 new faults (trap 1)") {
		t.Fatalf("trap: exit %d\n%s%s", code, out, errs)
	}
	if got := outcomes(t, bin, cfgPath, trap, dryrun.Fault); !slices.Equal(got, []string{"web:m6"}) {
		t.Fatalf("trap faulted on %v, want web:m6", got)
	}
	// A key the original did not read: not guessed.
	code, out, errs = runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", peek)
	if code != 0 || !strings.Contains(out, "5 identical, 0 changed") || !strings.Contains(out, "cannot replay 4 records (inputs not recorded 1, unknown input 3)") ||
		!strings.Contains(out, `web:m3: unknown input: the candidate read state key "never-read"`) {
		t.Fatalf("peek: exit %d\n%s%s", code, out, errs)
	}

	// Filters: one chat's records; another channel's (none).
	if code, out, errs := runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", hola, "--chat", "c1", "--since", "1h", "--provider", "web"); code != 1 || !strings.Contains(out, "replayed 4 records") || !strings.Contains(out, "3 identical, 1 changed") {
		t.Fatalf("--chat c1: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", hola, "--provider", "tg"); code != 0 || !strings.Contains(out, "replayed 0 records") {
		t.Fatalf("--provider tg: exit %d\n%s%s", code, out, errs)
	}
}

// TestReplayDryRunUsage: usage and I/O errors exit 2, a module that is not
// a botrun module makes every record one that cannot be replayed (exit 1).
func TestReplayDryRunUsage(t *testing.T) {
	flow := wasmbuild.Go(t, "../../examples/flow")
	cfgPath := filepath.Join(t.TempDir(), "bot.toml")
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[durability]\nbackend = \"sqlite\"\npath = %q\n\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", flow, testDataDir(), filepath.Join(t.TempDir(), "bot.db"))
	os.WriteFile(cfgPath, []byte(src), 0o600)
	huge := filepath.Join(t.TempDir(), "huge.wasm") // sparse: refused by its size, never read
	if err := os.WriteFile(huge, nil, 0o600); err != nil || os.Truncate(huge, dryrun.MaxModuleBytes+1) != nil {
		t.Fatal("a sparse module file")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run", "-c", cfgPath}, "--module NEW.wasm is required"},
		{[]string{"--dry-run", "-c", cfgPath, "--module", huge}, "over the dry run's cap of 16 MiB"},
		{[]string{"--dry-run", "-c", cfgPath, "--module", filepath.Join(t.TempDir(), "gone.wasm")}, "--module: open"},
		{[]string{"--dry-run", "-c", cfgPath, "--module", flow, "--since", "yesterday"}, "want a duration"},
		{[]string{"--dry-run", "-c", cfgPath, "--module", flow}, "no such file"}, // no bot ever ran: nothing to read, nothing created
	} {
		code, out, errs := runCLI(append([]string{"replay"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cfgPath), "bot.db")); err == nil {
		t.Error("a dry run created the database")
	}
	liveBot(t, cfgPath)
	notWasm := filepath.Join(t.TempDir(), "x.wasm")
	os.WriteFile(notWasm, []byte("not a module"), 0o600)
	code, out, errs := runCLI("replay", "--dry-run", "-c", cfgPath, "--module", notWasm, "--json")
	if code != 1 || strings.Count(out, `"outcome":"cannot-replay","reason":"module ABI mismatch: module `) != 8 {
		t.Fatalf("not a module: exit %d\n%s%s", code, out, errs)
	}
}

// flowVariant builds examples/flow changed by edit, as module name: the
// candidates of the dry-run tests.
func flowVariant(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	src, err := os.ReadFile("../../examples/flow/main.go")
	if err != nil {
		t.Fatal(err)
	}
	changed := edit(string(src))
	if changed == string(src) {
		t.Fatalf("%s: the edit changed nothing in examples/flow", name)
	}
	sdk, err := filepath.Abs("../../guest-sdk/go")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	os.MkdirAll(dir, 0o700)
	mod := fmt.Sprintf("module botrun.test/%s\n\ngo 1.26\n\nrequire github.com/botrun/botrun/guest-sdk/go v0.0.0\n\nreplace github.com/botrun/botrun/guest-sdk/go => %s\n", name, sdk)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	return wasmbuild.Go(t, dir)
}

// liveBot starts the bot of cfgPath with a counting channel, tells it
// dryRunTraffic one message at a time, and stops it at the end of the test.
func liveBot(t *testing.T, cfgPath string) *countingChannel {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ch := &countingChannel{}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.DiscardHandler), Channels: []channel.Channel{ch}})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b.Stop(ctx)
	})
	ctx := context.Background()
	for _, m := range dryRunTraffic {
		if _, err := b.Admit(ctx, "web", channel.Message{ID: m.id, Chat: m.chat, From: "u-" + m.chat, Text: m.text}); err != nil {
			t.Fatal(err)
		}
		var err error
		if !waitfor.True(2*time.Minute, func() bool {
			var r []durability.InboxRecord
			r, err = b.Operator().ListInbox(ctx, durability.ListFilter{State: string(durability.InboxDone)})
			return err != nil || slices.ContainsFunc(r, func(r durability.InboxRecord) bool { return r.ID == "web:"+m.id })
		}) {
			t.Fatalf("%s was not done in 2 minutes", m.id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return ch
}

// legacyRecord journals "web:old1" as a botrun before this change did: done,
// its send in the outbox, no inputs.
func legacyRecord(t *testing.T, cfgPath string) {
	t.Helper()
	ctx := context.Background()
	_, j, b, err := openScope(cfgPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	payload, _ := json.Marshal(abi.Event{ID: "web:old1", Provider: "web", Chat: "c9", From: "u", Text: "old", ReceivedAt: time.Now().UnixMilli()})
	now := time.Now().UnixMilli()
	l := durability.Lease{Owner: "legacy", Now: now, Until: now + 60_000}
	if _, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: "web:old1", Provider: "web", Chat: "c9", Payload: payload}, now, &l); err != nil {
		t.Fatal(err)
	}
	msg, _ := json.Marshal(dryrun.OutboxMessage{Text: "echo: old"})
	if _, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "web:old1:1", Provider: "web", Chat: "c9", Payload: msg, Inbound: "web:old1"}, now, &l); err != nil {
		t.Fatal(err)
	}
	if err := j.Outbox.MarkSent(ctx, "web:old1:1", 1, "ref-old", now); err != nil {
		t.Fatal(err)
	}
	if err := j.Inbox.Complete(ctx, "web:old1", 1, durability.Completion{Module: "old", Now: now}); err != nil {
		t.Fatal(err)
	}
}

// snapshot is the journal's records as JSON, to compare before and after.
func snapshot(t *testing.T, cfgPath string) string {
	t.Helper()
	_, j, b, err := openScope(cfgPath, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in, err := j.Inbox.List(context.Background(), durability.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := j.Outbox.List(context.Background(), durability.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := json.Marshal([]any{in, out})
	return string(s)
}

// outcomes runs the dry run with --json and returns the ids of the records
// with outcome want, sorted.
func outcomes(t *testing.T, bin, cfgPath, module string, want dryrun.Outcome) []string {
	t.Helper()
	_, out, errs := runBinary(t, bin, "replay", "--dry-run", "-c", cfgPath, "--module", module, "--json")
	var ids []string
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	n := 0
	for dec.More() {
		var r dryrun.Result
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("--json: %v\n%s%s", err, out, errs)
		}
		n++
		if r.Outcome == want {
			ids = append(ids, r.ID)
		}
	}
	if n != len(dryRunTraffic)+1 || strings.Count(out, "\n") != n {
		t.Fatalf("--json gave %d objects on %d lines, want %d\n%s", n, strings.Count(out, "\n"), len(dryRunTraffic)+1, out)
	}
	slices.Sort(ids)
	return ids
}

// TestReplayDryRunHooks: a module with send hooks (examples/signature: its
// before_send signs each send, its after_send is journaled as a record of
// the host's own) replays against itself with no change. Its records hold
// their inputs as JSON (not base64), which the inbox list leaves out.
func TestReplayDryRunHooks(t *testing.T) {
	bin := buildBotrun(t)
	cfgPath, code, out, errs := dryRunItself(t, func(args ...string) (int, string, string) { return runBinary(t, bin, args...) },
		"../../examples/signature", "sqlite", "bot.db")
	if code != 0 || !strings.Contains(out, "8 identical, 0 changed, 0 new faults") {
		t.Fatalf("signature against itself: exit %d\n%s%s", code, out, errs)
	}
	if rec := snapshot(t, cfgPath); !strings.Contains(rec, `"inputs":{"v":1`) {
		t.Fatalf("inputs are not JSON in %s", rec)
	}
	code, out, errs = runCLI("inbox", "list", "-c", cfgPath, "--json")
	if code != 0 || !strings.Contains(out, `"web:m1"`) || strings.Contains(out, `"inputs"`) {
		t.Fatalf("inbox list: exit %d\n%s%s", code, out, errs)
	}
}

// TestReplayDryRunFileBackendLocked: beside a live bot on the file backend
// the dry run cannot open the journal, and says how to get one. It runs in
// this process, where the live bot holds the journal: it fails before it
// compiles anything.
func TestReplayDryRunFileBackendLocked(t *testing.T) {
	_, code, out, errs := dryRunItself(t, runCLI, "../../examples/flow", "file", "journal")
	if code != 2 || !strings.Contains(errs, "stop the bot, or copy its journal files") {
		t.Fatalf("beside a live file-backend bot: exit %d\n%s%s", code, out, errs)
	}
}

// webBot writes the bot.toml of a bot running module with one webchat
// channel "web" on backend, its journal at file in a temporary directory.
func webBot(t *testing.T, module, backend, file string) string {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "bot.toml")
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[durability]\nbackend = %q\npath = %q\n\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", module, testDataDir(), backend, filepath.Join(t.TempDir(), file))
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// dryRunItself builds the module in dir, runs it live (webBot on backend,
// liveBot) and, beside it, dry-runs it against itself with cli (runCLI, or
// runBinary on a built botrun).
func dryRunItself(t *testing.T, cli func(args ...string) (int, string, string), dir, backend, file string) (cfgPath string, code int, out, errs string) {
	t.Helper()
	module := wasmbuild.Go(t, dir)
	cfgPath = webBot(t, module, backend, file)
	liveBot(t, cfgPath)
	code, out, errs = cli("replay", "--dry-run", "-c", cfgPath, "--module", module)
	return cfgPath, code, out, errs
}

// runBinary runs the built botrun bin with args, as runCLI runs them in this
// process, and returns its exit code, stdout and stderr. The dry runs that
// compile a candidate go through it: the binary compiles in its bounded
// child process, as deployed, where this test binary would compile each
// candidate itself under the race detector (some 15 s a Go guest).
func runBinary(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("botrun %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	return 0, "", ""
}
