package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/browsertest"
)

var screenshot = flag.String("screenshot", "", "write the console's screenshot (PNG) to this file (docs/console.png)")

func TestMain(m *testing.M) { os.Exit(browsertest.Run(m)) }

// flaky fails every event while broken, and echoes otherwise.
// flaky fails while broken; then it replies "echo: <text>", first calling
// the API "orders" when fetch is set.
type flaky struct {
	broken atomic.Bool
	fetch  bool
}

func (f *flaky) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	if f.broken.Load() {
		return f.Digest(), errors.New("flaky: the handler is broken")
	}
	if f.fetch {
		if _, err := env.(wasm.Fetcher).Fetch(ctx, abi.FetchRequest{API: "orders", Path: "/orders/42?expand=items"}); err != nil {
			return f.Digest(), err
		}
	}
	_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
	return f.Digest(), err
}
func (f *flaky) Digest() string { return "flaky0123456789abcdef" }

// startConsole runs a bot with a real webchat "web", the guest g (one
// attempt per event, so a failure is dead at once) and the admin surface.
// It returns the console's base URL and the path of the bot's log.
func startConsole(t *testing.T, g host.Guest) (string, string) {
	t.Helper()
	return startConsoleIn(t, t.TempDir(), "[bot]\nmodule = \"unused.wasm\"\n", g)
}

// startConsoleIn is startConsole with the [bot] table bot, for a bot.toml
// in dir.
func startConsoleIn(t *testing.T, dir, bot string, g host.Guest) (string, string) {
	t.Helper()
	cfg, err := config.Parse(filepath.Join(dir, "bot.toml"),
		bot+"[durability]\npoll = \"20ms\"\n[durability.inbox]\nmax_attempts = 1\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "bot.log")
	f, err := os.OpenFile(logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.NewTextHandler(f, nil)), Guest: g})
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
// the bot's reply appear in the chat's transcript and its API call in the
// record's calls; the action is logged with the operator's address.
func TestConsoleInBrowser(t *testing.T) {
	g := &flaky{fetch: true}
	g.broken.Store(true)
	orders := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("order 42: shipped"))
	}))
	defer orders.Close()
	base, logs := startConsoleIn(t, t.TempDir(), fmt.Sprintf("[bot]\nmodule = \"unused.wasm\"\n[[apis]]\nname = \"orders\"\nurl = %q\nallow_private = true\nheaders = { Authorization = \"Bearer s3cret\" }\n", orders.URL+"/v1"), g)
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

	// The overview (refreshed every 5 s) charts the message and its turn.
	browsertest.Do(t, ctx, "waiting for the last hour's charts",
		browsertest.WaitText("#throughput-summary", "last hour: 1 inbound, 1 turns"),
		browsertest.WaitText("#latency-summary", "worst minute's p99"),
		browsertest.WaitCount("#chart-throughput polyline.in", 1),
		browsertest.WaitCount("#chart-latency polyline.p99", 1),
		browsertest.WaitText("#modules", "No module history"),
		browsertest.WaitText("#depths .stat", "1inbox dead"))
	if *screenshot != "" {
		browsertest.Do(t, ctx, "sizing the page for the screenshot", chromedp.EmulateViewport(1200, 1150))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	browsertest.Do(t, ctx, "opening the inbox's dead letters",
		chromedp.Click(chromedp.CSS("#nav-inbox")),
		browsertest.WaitText("#list a.record-link", "web:m1"),
		browsertest.WaitText("#list td.err", "flaky: the handler is broken"))

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
		browsertest.WaitText("#fields", "flaky0123456789abcdef"),
		browsertest.WaitText("#calls li", "GET orders /orders/42 → 200"),
		browsertest.WaitText("#calls li .preview", "order 42: shipped"))
	if shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("calls").textContent`)); err != nil || strings.Contains(shown, "s3cret") || strings.Contains(shown, "expand") {
		t.Fatalf("the record's calls show %q (%v): the query or a credential", shown, err)
	}
	if l, err := os.ReadFile(logs); err != nil || !bytes.Contains(l, []byte("action=replay remote=127.0.0.1:")) {
		t.Fatalf("the replay is not logged with the operator's address (%v):\n%s", err, l)
	}
}

// TestConsoleModuleHistoryInBrowser: the overview lists the module's load
// and a hot reload the bot refused, which also reaches the live tail.
func TestConsoleModuleHistoryInBrowser(t *testing.T) {
	dir := t.TempDir()
	echo, err := os.ReadFile(cEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(dir, "bot.wasm")
	if err := os.WriteFile(module, echo, 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startConsoleIn(t, dir, fmt.Sprintf("[bot]\nmodule = \"bot.wasm\"\nhot_reload = true\ndata_dir = %q\n", filepath.Join(dir, "data")), nil)
	ctx := browsertest.Tab(t)
	browsertest.Do(t, ctx, "signing in",
		chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-btn")),
		browsertest.WaitText("#modules li.loaded", "loaded"),
		browsertest.WaitText("#tail-status", "live"))

	tmp := module + ".tmp"
	if err := os.WriteFile(tmp, []byte("not a wasm module"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, module); err != nil {
		t.Fatal(err)
	}
	browsertest.Do(t, ctx, "waiting for the refused reload",
		browsertest.WaitText("#modules li.refused", "refused"),
		browsertest.WaitText("#modules li.refused .error", "wasm"),
		browsertest.WaitText("#tail li", "module"))
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#modules li").className`))
	if err != nil || first != "refused" {
		t.Fatalf("the newest entry first: got %q (%v)", first, err)
	}
}

// TestConsoleAPI: the console's files are served without the token and hold
// no data; the overview, paging, the bulk retry of a chat's dead sends and
// the live tail (whose ?token= is checked like the header) answer the
// console.
func TestConsoleAPI(t *testing.T) {
	b, ch, srv := setup(t, token)
	for _, path := range []string{"/admin/", "/admin/console/console.js", "/admin/console/console.css"} {
		if code, body := call(t, "GET", srv.URL+path, ""); code != 200 || body == "" {
			t.Fatalf("GET %s: HTTP %d", path, code)
		}
	}
	for _, ep := range []string{"/admin/overview", "/admin/events", "/admin/events?token=wrong-token-0123456789", "/admin/events?token=" + token + "x"} {
		if code, _ := call(t, "GET", srv.URL+ep, ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s: HTTP %d, want 401", ep, code)
		}
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/outbox/retry-dead?chat=c1", ""); code != http.StatusUnauthorized {
		t.Fatalf("retry-dead without the token: HTTP %d, want 401", code)
	}

	// The live tail, opened before the dead sends.
	events := tailEvents(t, srv.URL+"/admin/events", token)
	for i := range 3 {
		if _, err := b.Admit(context.Background(), "web", channel.Message{ID: fmt.Sprint("m", i), Chat: "c1", Text: "hola"}); err != nil {
			t.Fatal(err)
		}
	}
	for seen := 0; seen < 3; {
		ev := <-events
		if ev.Name == observe.AlertDead && ev.Kind == "outbox" && ev.Chat == "c1" && ev.Seq > 0 {
			seen++
		}
	}
	// A browser back from a restarted bot (another process's event ids)
	// gets every kept alert again.
	for _, old := range []string{"57", "0ld-b00t.57"} {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Last-Event-ID", old)
		if got := readTail(t, req, 3); len(got) != 3 {
			t.Fatalf("after another process's Last-Event-ID %q: %d alerts, want 3", old, len(got))
		}
	}

	// The queue depths are read at most every second while records move.
	var o Overview
	var body string
	waitFor(t, "the overview's three dead sends", func() bool {
		_, body = call(t, "GET", srv.URL+"/admin/overview", token)
		return json.Unmarshal([]byte(body), &o) == nil && depth(o.Outbox, "dead") == 3
	})
	if o.Counters.OutboxDead != 3 || depth(o.Inbox, "dead") != 0 || len(o.LastHour) != 60 || o.Module != "echo" {
		t.Fatalf("overview %s", body)
	}

	var one durability.OutboxRecord
	code, body := call(t, "GET", srv.URL+"/admin/outbox/"+url.PathEscape("web:m0:1"), token)
	if code != 200 || json.Unmarshal([]byte(body), &one) != nil || one.Key != "web:m0:1" || one.State != durability.OutboxDead {
		t.Fatalf("GET one send: HTTP %d %s", code, body)
	}
	var in durability.InboxRecord
	code, body = call(t, "GET", srv.URL+"/admin/inbox/web:m0", token)
	if code != 200 || json.Unmarshal([]byte(body), &in) != nil || in.ID != "web:m0" || in.State != durability.InboxDone {
		t.Fatalf("GET one inbound record: HTTP %d %s", code, body)
	}
	if code, body := call(t, "GET", srv.URL+"/admin/inbox/web:nope", token); code != 404 || !strings.Contains(body, "no record") {
		t.Fatalf("GET a missing record: HTTP %d %s", code, body)
	}

	var page []durability.OutboxRecord
	keys := map[string]bool{}
	for offset := 0; offset < 3; offset++ {
		_, body := call(t, "GET", fmt.Sprintf("%s/admin/outbox?state=dead&limit=1&offset=%d", srv.URL, offset), token)
		if err := json.Unmarshal([]byte(body), &page); err != nil || len(page) != 1 {
			t.Fatalf("page at offset %d: %s", offset, body)
		}
		keys[page[0].Key] = true
	}
	if _, body := call(t, "GET", srv.URL+"/admin/outbox?state=dead&limit=1&offset=3", token); len(keys) != 3 || body != "[]\n" {
		t.Fatalf("pages: %d distinct keys, past the end %q", len(keys), body)
	}
	if code, _ := call(t, "GET", srv.URL+"/admin/outbox?offset=-1", token); code != 400 {
		t.Fatalf("offset=-1: HTTP %d, want 400", code)
	}

	ch.mu.Lock()
	ch.blocked = false
	ch.mu.Unlock()
	code, body = postBody(t, srv.URL+"/admin/outbox/retry-dead?chat=c1", "")
	var res RetryDeadResult
	if code != 200 || json.Unmarshal([]byte(body), &res) != nil || len(res.Retried) != 3 || len(res.Failed) != 0 {
		t.Fatalf("retry-dead: HTTP %d %s", code, body)
	}
	waitFor(t, "the three retried sends", func() bool { return ch.count() == 3 })
}

// TestLiveTailEndsOnStop: an open live tail does not hold a graceful stop
// past its grace.
func TestLiveTailEndsOnStop(t *testing.T) {
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"),
		"[bot]\nmodule = \"unused.wasm\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.DiscardHandler), Guest: echo{}})
	if err != nil {
		t.Fatal(err)
	}
	Attach(b, token, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, ln, 5*time.Second) }()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/admin/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("events: HTTP %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run with a live tail open: %v", err)
	}
}

// depth is queue's records in depths, or -1 when it is missing.
func depth(depths []Depth, queue string) int {
	for _, d := range depths {
		if d.Queue == queue {
			return d.Records
		}
	}
	return -1
}

// tailEvents follows the live tail at u with the token tok, reconnecting
// with the last event's id as a browser does, until the test ends.
func tailEvents(t *testing.T, u, tok string) <-chan TailEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan TailEvent, 100)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if last != "" {
				req.Header.Set("Last-Event-ID", last)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					last = id
				}
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var ev TailEvent
					if err := json.Unmarshal([]byte(data), &ev); err != nil {
						t.Errorf("tail event %q: %v", data, err)
						continue
					}
					select {
					case out <- ev:
					case <-ctx.Done():
					}
				}
			}
			resp.Body.Close()
		}
	}()
	return out
}

// readTail reads n alerts from one live-tail response to req.
func readTail(t *testing.T, req *http.Request, n int) []TailEvent {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []TailEvent
	sc := bufio.NewScanner(resp.Body)
	for len(got) < n && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev TailEvent
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("tail event %q: %v", data, err)
			}
			got = append(got, ev)
		}
	}
	return got
}
