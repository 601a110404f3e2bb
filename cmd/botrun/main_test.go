package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// lockedBuffer is a bytes.Buffer safe to read while a child process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testDataDir is the data_dir of the tests' bots: one compilation cache
// for all, so that a module compiles once, not once per bot (under -race a
// Go guest takes some 15 s).
func testDataDir() string { return wasmbuild.DataDir }

func writeConfig(t *testing.T, module string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bot.toml")
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n\n[[channels]]\nid = \"web\"\ntype = \"webchat\"\n",
		module, testDataDir())
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheck(t *testing.T) {
	good := writeConfig(t, wasmbuild.Go(t, "../../examples/echo"))
	if code, out, errs := runCLI("check", good); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("check good: %d %q %q", code, out, errs)
	}
	// [[providers]], the old name of [[channels]], still works, with a warning.
	old := filepath.Join(t.TempDir(), "old.toml")
	src, _ := os.ReadFile(good)
	if err := os.WriteFile(old, bytes.Replace(src, []byte("[[channels]]"), []byte("[[providers]]"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI("check", old); code != 0 || !strings.HasPrefix(out, "ok: ") || !strings.Contains(errs, "warning: "+old+":5: [[providers]] is deprecated: rename it to [[channels]]") {
		t.Fatalf("check with [[providers]]: %d %q %q", code, out, errs)
	}
	nomarker := writeConfig(t, wasmbuild.Go(t, "../../host/wasm/testdata/guests/nomarker"))
	code, _, errs := runCLI("check", nomarker)
	if code != 1 || !strings.Contains(errs, `is not a botrun ABI v1 module: missing export "botrun_abi_v1"`) {
		t.Fatalf("check without marker: %d %q", code, errs)
	}
	missing := writeConfig(t, filepath.Join(t.TempDir(), "gone.wasm"))
	if code, _, errs := runCLI("check", missing); code != 1 || !strings.Contains(errs, "gone.wasm: open") {
		t.Fatalf("check missing module: %d %q", code, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("[bot]\nmodule = \"x.wasm\"\nworkerz = 2\n"), 0o644)
	if code, _, errs := runCLI("check", bad); code != 1 || !strings.Contains(errs, "bad.toml:3: bot.workerz: unknown key") {
		t.Fatalf("check bad config: %d %q", code, errs)
	}
}

// TestCheckRefusesRetentionUnderAReplayWindow: a signed request to TikTok,
// Discord (interactions) or GoHighLevel stays valid for minutes; a
// retention shorter than that would answer a replay after the purge, so
// botrun check refuses it, naming the channel and the way out.
func TestCheckRefusesRetentionUnderAReplayWindow(t *testing.T) {
	for typ, keys := range map[string]string{
		"tiktok":      "access_token = \"t\"\nclient_secret = \"s\"\nbusiness_id = \"b\"",
		"discord":     "token = \"t\"\napplication_id = \"1100000000000000000\"\nmode = \"interactions\"\npublic_key = \"0f9fe0ee6fc3bd2ef8e5e2bd8a5b7f6e6c8c1d0e9a7b3f2c4d5e6f708192a3b4\"",
		"gohighlevel": "token = \"t\"\nlocation_id = \"ve9EPM428h8vShlRW1KT\"\nmessage_type = \"SMS\"",
	} {
		p := filepath.Join(t.TempDir(), "bot.toml")
		os.WriteFile(p, []byte("[bot]\nmodule = \"x.wasm\"\n[durability]\nretention = \"1m\"\n[[providers]]\nid = \"p\"\ntype = \""+typ+"\"\n"+keys+"\n"), 0o600)
		code, _, errs := runCLI("check", p)
		if want := "bot.toml:4: durability.retention: 1m0s is not longer than the replay window of providers[0] (" + typ + " \"p\")"; code != 1 || !strings.Contains(errs, want) {
			t.Errorf("%s with retention 1m: %d %q, want %q", typ, code, errs, want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"check", "-h"}, {"version", "--help"}} {
		code, out, errs := runCLI(args...)
		if code != 0 || !strings.Contains(out+errs, "Usage") && !strings.Contains(out+errs, "usage") {
			t.Errorf("%v: %d %q %q", args, code, out, errs)
		}
	}
	if code, out, _ := runCLI("version"); code != 0 || !strings.HasPrefix(out, "botrun ") || !strings.Contains(out, "ABI v1") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errs := runCLI("frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: %d %q", code, errs)
	}
	if code, _, _ := runCLI("check"); code != 2 {
		t.Errorf("check without a file: %d, want 2", code)
	}
}

// TestProcessEchoAndGracefulStop builds botrun, runs `botrun bot.toml` as a
// child process on a free port, gets the echo reply, and stops it with SIGTERM.
func TestProcessEchoAndGracefulStop(t *testing.T) {
	bin := buildBotrun(t)
	cfg := writeConfig(t, wasmbuild.Go(t, "../../examples/echo"))
	f, _ := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "\n[admin]\ntoken = \"${BOTRUN_TEST_ADMIN_TOKEN}\"\n")
	f.Close()
	const adminToken = "process-admin-token-0123"
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", cfg)
	cmd.Env = append(os.Environ(), "BOTRUN_TEST_ADMIN_TOKEN="+adminToken)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Startup prints where the chat page, the console and the metrics are.
	out := bufio.NewReader(stdout)
	var urls []string
	for range 3 {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("no URLs on stdout (%q so far): %v\n%s", urls, err, stderr.String())
		}
		urls = append(urls, regexp.MustCompile(`http://\S+`).FindString(line))
	}
	base := strings.TrimSuffix(urls[0], "/")
	if urls[1] != base+"/admin/" || urls[2] != base+"/metrics" {
		t.Fatalf("startup printed %q", urls)
	}
	webchatEcho(t, base)
	if resp, err := http.Get(base + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz of a running bot: %v %v", resp, err)
	}
	// The admin API answers with the token from the environment, and only
	// then; /metrics is /admin/metrics behind the same token.
	for tok, want := range map[string]int{"": 401, "wrong": 401, adminToken: 200} {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && !strings.Contains(string(b), "botrun_inbound_journaled_total 1\n")) {
			t.Fatalf("/admin/metrics with token %q: HTTP %d %s", tok, resp.StatusCode, b)
		}
	}
	// A chat page's long poll is open when the bot is told to stop: it is
	// answered at the drain, not when its 25 s are up, and the process
	// exits 0 at once.
	polled := make(chan int, 1)
	sent := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("GET", base+"/webchat/web/messages?chat=c1&after=99&wait=25s", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- 0
			return
		}
		resp.Body.Close()
		polled <- resp.StatusCode
	}()
	<-sent
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("botrun did not stop after SIGTERM\n%s", stderr.String())
	}
	took := time.Since(start)
	select {
	case code := <-polled:
		// 0: the server had not accepted its connection yet when it
		// closed its listener (a loaded machine); a poll it took is
		// answered at the drain (webchat's TestLongPollAnsweredAtTheDrain).
		if code != http.StatusOK && code != 0 {
			t.Fatalf("the long poll open at the stop got %d, want 200 (answered at the drain)", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll open at the stop was not answered at the drain")
	}
	if !strings.Contains(stderr.String(), "msg=stopped") || strings.Contains(stderr.String(), "stopped with an error") {
		t.Fatalf("no clean stop in the log:\n%s", stderr.String())
	}
	fmt.Printf("SIGTERM with a long poll open: out in %s\n", took.Round(time.Millisecond))
}

// webchatEcho posts "hola" to the webchat "web" at base and waits for the
// echo bot's reply.
func webchatEcho(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/webchat/web/messages", "application/json", strings.NewReader(`{"chat":"c1","from":"u1","text":"hola","id":"m-1"}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("POST: %v %v", resp, err)
	}
	resp.Body.Close()
	if got, b := chatMessages(t, base, "c1", "10s"); len(got) != 1 || got[0] != "echo: hola" {
		t.Fatalf("GET: %s", b)
	}
}

// chatMessages reads the texts of the webchat "web" chat's messages at base,
// waiting up to wait (a duration, "" for none) for a first one, and the
// answer's body.
func chatMessages(t *testing.T, base, chat, wait string) ([]string, []byte) {
	t.Helper()
	resp, err := http.Get(base + "/webchat/web/messages?chat=" + chat + "&after=0&wait=" + wait)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var l struct{ Messages []struct{ Text string } }
	json.Unmarshal(b, &l)
	var texts []string
	for _, m := range l.Messages {
		texts = append(texts, m.Text)
	}
	return texts, b
}

// TestNewScaffoldsProjectsThatBuild: botrun new makes a project in each
// language that builds with one command (make) and passes botrun check.
func TestNewScaffoldsProjectsThatBuild(t *testing.T) {
	tools := map[string]string{"go": "go", "c": "clang", "rust": "/usr/bin/rustc", "assemblyscript": "node"}
	bin := buildBotrun(t)
	asc, _ := filepath.Abs("../../node_modules/.bin/asc") // npx would fetch the same pinned version
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			if _, err := exec.LookPath(tools[lang]); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is not installed", tools[lang])
				}
				t.Skipf("SKIPPING: %s is not installed", tools[lang])
			}
			made := filepath.Join(t.TempDir(), "my-bot")
			// The flags may follow the directory.
			if code, out, errs := runCLI("new", made, "--lang", lang); code != 0 || !strings.Contains(out, "make && make test && botrun bot.toml") {
				t.Fatalf("new: %d %q %q", code, out, errs)
			}
			// The project builds and passes its test wherever it is moved:
			// nothing in it points at this checkout.
			dir := filepath.Join(t.TempDir(), "moved", "my-bot")
			os.MkdirAll(filepath.Dir(dir), 0o755)
			if err := os.Rename(made, dir); err != nil {
				t.Fatal(err)
			}
			checkout, _ := filepath.Abs("../..")
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if b, _ := os.ReadFile(p); err == nil && !d.IsDir() && bytes.Contains(b, []byte(checkout)) {
					t.Errorf("%s names the checkout %s", p, checkout)
				}
				return err
			})
			for _, target := range []string{"bot.wasm", "test"} {
				cmd := exec.Command("make", target, "BOTRUN="+bin, "ASC="+asc)
				cmd.Dir = dir
				if b, err := cmd.CombinedOutput(); err != nil || (target == "test" && !strings.Contains(string(b), "PASS")) {
					t.Fatalf("make %s in the new %s project: %v\n%s", target, lang, err, b)
				}
			}
			// The built botrun checks it: the module compiles in a binary
			// without the race detector, as a user's would.
			check := exec.Command(bin, "check", filepath.Join(dir, "bot.toml"))
			if out, err := check.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "ok: ") {
				t.Fatalf("check: %v %q", err, out)
			}
		})
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"new", "--lang", "cobol", filepath.Join(t.TempDir(), "x")}, "want one of"},
		{[]string{"new", "--lang", "go"}, "the project's directory is missing"},
		{[]string{"new", "a", "b"}, "one directory, not 2"},
	} {
		if code, _, errs := runCLI(c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Fatalf("%q: %d %q, want %q", c.args, code, errs, c.want)
		}
	}
}

// TestSendFromTheCLIRunsTheSendHooks: botrun send journals from its own
// process, which has no module; the running bot runs its module's
// botrun_before_send as it delivers the send, so the hook filters it as it
// filters a handler's (examples/signature cancels any send that mentions a
// password and signs the others).
func TestSendFromTheCLIRunsTheSendHooks(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/signature")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bot.toml")
	addr := freePort(t)
	os.WriteFile(cfg, []byte(fmt.Sprintf("[bot]\nmodule = %q\n[http]\nlisten = %q\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", module, addr)), 0o600)
	cmd := startBotrun(t, bin, cfg, addr)
	defer cmd.Process.Kill()
	for key, text := range map[string]string{"op:1": "my password is 1234", "op:2": "hi"} {
		if code, out, errs := runCLI("send", "-c", cfg, "--provider", "web", "--chat", "c9", "--key", key, text); code != 0 {
			t.Fatalf("send %q: %d %q %q", text, code, out, errs)
		}
	}
	var dead, sent string
	if !waitfor.Every(20*time.Millisecond, 60*time.Second, func() bool {
		_, dead, _ = runCLI("outbox", "list", "-c", cfg, "--state", "dead")
		_, sent, _ = runCLI("outbox", "list", "-c", cfg, "--state", "sent")
		return strings.Contains(dead, "op:1") && strings.Contains(sent, "op:2")
	}) {
		t.Fatalf("the sends did not settle: dead %q, sent %q", dead, sent)
	}
	if !strings.Contains(dead, "cancelled by botrun_before_send") {
		t.Errorf("the cancelled send's dead letter does not say why:\n%s", dead)
	}
	if got, b := chatMessages(t, "http://"+addr, "c9", ""); len(got) != 1 || got[0] != "hi\n-- botrun" {
		t.Fatalf("chat c9 got %s; want only the signed \"hi\"", b)
	}
}

// TestStatusShowsTheRunningBot: botrun status on one SQLite bot shows the
// running bot's module and uptime (asked over its admin API), its channels
// and its queues from the journal; without the bot, it says nothing
// answers.
func TestStatusShowsTheRunningBot(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bot.toml")
	addr := freePort(t)
	os.WriteFile(cfg, []byte(fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[http]\nlisten = %q\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[admin]\ntoken = %q\n[[channels]]\nid = \"web\"\ntype = \"webchat\"\n",
		module, testDataDir(), addr, killAdminToken)), 0o600)
	cmd := startBotrun(t, bin, cfg, addr)
	defer cmd.Process.Kill()
	webchatEcho(t, "http://"+addr)
	var code int
	var out, errs string
	waitfor.Every(50*time.Millisecond, time.Minute, func() bool { // the reply shows before its record completes
		code, out, errs = runCLI("status", "-c", cfg)
		return strings.Contains(out, "done 1")
	})
	if code != 0 || !regexp.MustCompile(`running +module [0-9a-f]{12}, up `).MatchString(out) || !strings.Contains(out, "channels   web (webchat)") ||
		!strings.Contains(out, "inbox      pending 0, processing 0, done 1") {
		t.Fatalf("status of a running bot: %d\n%s%s", code, out, errs)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code, out, _ := runCLI("status", "-c", cfg); code != 0 || !strings.Contains(out, "no answer: is the bot running?") || !strings.Contains(out, "done 1") {
		t.Fatalf("status of a stopped bot: %d\n%s", code, out)
	}
}
