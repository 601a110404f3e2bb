package admin

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/browsertest"
)

var screenshot = flag.String("screenshot", "", "write the console's screenshot (PNG) to this file (docs/console.png)")

func TestMain(m *testing.M) { os.Exit(browsertest.Run(m)) }

// flaky fails every event while broken, and echoes otherwise.
type flaky struct{ broken atomic.Bool }

func (f *flaky) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	if f.broken.Load() {
		return f.Digest(), errors.New("flaky: the handler is broken")
	}
	_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
	return f.Digest(), err
}
func (f *flaky) Digest() string { return "flaky0123456789abcdef" }

// logBuffer is a log destination safe for the bot's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startConsole runs a bot with a real webchat "web", the guest g (one
// attempt per event, so a failure is dead at once) and the admin surface.
func startConsole(t *testing.T, g host.Guest) (string, *logBuffer) {
	t.Helper()
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"),
		"[bot]\nmodule = \"unused.wasm\"\n[durability]\npoll = \"20ms\"\n[durability.inbox]\nmax_attempts = 1\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Guest: g})
	if err != nil {
		t.Fatal(err)
	}
	b.Mount(func(mux *http.ServeMux) { Routes(mux, b, token) })
	b.Start()
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		b.Stop(context.Background())
	})
	return srv.URL, logs
}

// TestConsoleInBrowser drives the console in Chromium: a wrong token is
// refused and shows nothing; a dead inbound record shows up in the live tail
// and the inbox; replaying it from its page, behind the confirmation, makes
// the bot's reply appear in the chat's transcript; the action is logged with
// the operator's address.
func TestConsoleInBrowser(t *testing.T) {
	g := &flaky{}
	g.broken.Store(true)
	base, logs := startConsole(t, g)
	ctx := browsertest.Tab(t)

	browsertest.Do(t, ctx, "signing in with a wrong token",
		chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token-0123456789"),
		chromedp.Click(chromedp.CSS("#login-btn")),
		browsertest.WaitText("#login-error", "Wrong token"))
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("app").hidden && document.querySelectorAll("#counters .stat").length === 0`))
	if err != nil || !hidden {
		t.Fatalf("after a wrong token the console shows (hidden %v, err %v)", hidden, err)
	}

	browsertest.Do(t, ctx, "signing in with the token",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("token").value = ""`),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-btn")),
		browsertest.WaitCount("#counters .stat", 1),
		browsertest.WaitText("#tail-status", "live"))

	resp, err := http.Post(base+"/webchat/web/messages", "application/json", strings.NewReader(`{"chat":"c1","from":"u1","text":"hello","id":"m1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST to the webchat: HTTP %d", resp.StatusCode)
	}
	browsertest.Do(t, ctx, "waiting for the dead letter in the live tail",
		browsertest.WaitText("#tail li", "durability:dead"),
		browsertest.WaitText("#tail li", "web:m1"))

	browsertest.Do(t, ctx, "opening the inbox's dead letters",
		chromedp.Click(chromedp.CSS("#nav-inbox")),
		browsertest.WaitText("#list a.record-link", "web:m1"),
		browsertest.WaitText("#list td.err", "flaky: the handler is broken"))
	if *screenshot != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	g.broken.Store(false)
	browsertest.Do(t, ctx, "opening the dead record",
		chromedp.Click(chromedp.CSS("#list a.record-link")),
		browsertest.WaitText("#fields", "flaky: the handler is broken"),
		browsertest.WaitText("#payload", "hello"),
		chromedp.WaitVisible(chromedp.CSS("#replay")))
	browsertest.Do(t, ctx, "replaying it behind the confirmation",
		chromedp.Click(chromedp.CSS("#replay")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")),
		chromedp.Click(chromedp.CSS("#confirm-yes")),
		browsertest.WaitText("#transcript .msg.out", "echo: hello"),
		browsertest.WaitText("#fields", "done"),
		browsertest.WaitText("#fields", "flaky0123456789abcdef"))
	if l := logs.String(); !strings.Contains(l, "action=replay") || !strings.Contains(l, "remote=127.0.0.1:") {
		t.Fatalf("the replay is not logged with the operator's address:\n%s", l)
	}
}
