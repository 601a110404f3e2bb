package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/waitfor"
)

const token = "admin-token-0123456789"

// echo replies "echo: <text>".
type echo struct{}

func (echo) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	if ev.Text == "trap" {
		return "echo", errors.New("trapped") // a failed attempt, as a guest fault is
	}
	_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
	return "echo", err
}
func (echo) Digest() string { return "echo" }

// channel refuses sends to "blocked" until unblocked.
type fakeChannel struct {
	mu      sync.Mutex
	blocked bool
	sent    []string
}

func (c *fakeChannel) ID() string { return "web" }
func (c *fakeChannel) Send(_ context.Context, m channel.Outbound) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blocked {
		return "", channel.ErrRecipientUnreachable
	}
	c.sent = append(c.sent, m.Text)
	return "ref", nil
}

func (c *fakeChannel) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

func setup(t *testing.T, tok string) (*host.Bot, *fakeChannel, *httptest.Server) {
	return setupWith(t, tok, "")
}

// setupWith is setup with extra bot.toml lines (tables after [[providers]]).
func setupWith(t *testing.T, tok, extra string) (*host.Bot, *fakeChannel, *httptest.Server) {
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"),
		"[bot]\nmodule = \"unused.wasm\"\n[durability]\npoll = \"5ms\"\n[durability.outbox]\ninline_max = \"10ms\"\nretries = 0\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"+extra,
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ch := &fakeChannel{blocked: true}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.DiscardHandler),
		Backend: memory.New(), Guest: echo{}, Channels: []channel.Channel{ch}})
	if err != nil {
		t.Fatal(err)
	}
	b.Mount(func(mux *http.ServeMux) { Routes(mux, b, tok) })
	b.Start()
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(func() {
		srv.Close()
		b.Stop(context.Background())
	})
	return b, ch, srv
}

func call(t *testing.T, method, url, tok string) (int, string) {
	t.Helper()
	return callWith(t, method, url, tok, nil)
}

// callWith is call with a request body.
func callWith(t *testing.T, method, url, tok string, body io.Reader) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postBody POSTs body to url with the admin token.
func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor waits until ok holds, with a deadline generous for a loaded
// machine under -race.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	if !waitfor.True(2*time.Minute, ok) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestTokenRequired(t *testing.T) {
	_, _, srv := setup(t, token)
	for _, tok := range []string{"", "wrong-token-0123456789", token + "x"} {
		for _, ep := range []string{"GET /admin/metrics", "GET /admin/inbox", "POST /admin/outbox/k/retry", "POST /admin/send", "GET /admin/nope", "GET /admin/debug/pprof/goroutine", "GET /admin/debug/pprof/profile"} {
			method, path, _ := strings.Cut(ep, " ")
			// Past ten wrong tokens the client is throttled (429).
			if code, _ := call(t, method, srv.URL+path, tok); code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
				t.Errorf("%s with token %q: HTTP %d, want 401 or 429", ep, tok, code)
			}
		}
	}
	if code, _ := call(t, "GET", srv.URL+"/healthz", ""); code != 200 {
		t.Errorf("/healthz: HTTP %d (health stays open for probes)", code)
	}
}

// TestProfiles serves Go's profiles to the operator.
func TestProfiles(t *testing.T) {
	_, _, srv := setup(t, token)
	if code, body := call(t, "GET", srv.URL+"/admin/debug/pprof/goroutine?debug=1", token); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("goroutine profile: HTTP %d %.200q", code, body)
	}
	if code, body := call(t, "GET", srv.URL+"/admin/debug/pprof/", token); code != 200 || !strings.Contains(body, "heap") {
		t.Fatalf("profile index: HTTP %d %.200q", code, body)
	}
}

func TestOffWithoutAToken(t *testing.T) {
	_, _, srv := setup(t, "")
	code, body := call(t, "GET", srv.URL+"/admin/metrics", token)
	if code != http.StatusNotFound || !strings.Contains(body, "[admin] token") {
		t.Fatalf("HTTP %d %q, want 404 naming [admin] token", code, body)
	}
}

// TestOperateTheDeadLetterQueue: a send to a blocked user is dead; the
// operator sees it in the metrics and the outbox DLQ, retries it once the
// user is reachable, and replays the inbound message.
func TestOperateTheDeadLetterQueue(t *testing.T) {
	b, ch, srv := setup(t, token)
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", Text: "hola"}); err != nil {
		t.Fatal(err)
	}
	var dead []durability.OutboxRecord
	waitFor(t, "the dead send", func() bool {
		code, body := call(t, "GET", srv.URL+"/admin/outbox?state=dead", token)
		return code == 200 && json.Unmarshal([]byte(body), &dead) == nil && len(dead) == 1
	})
	if _, metrics := call(t, "GET", srv.URL+"/admin/metrics", token); !strings.Contains(metrics, "botrun_outbox_dead_total 1\n") ||
		!strings.Contains(metrics, "# TYPE botrun_inbound_journaled_total counter\nbotrun_inbound_journaled_total 1\n") {
		t.Fatalf("metrics:\n%s", metrics)
	}
	if code, body := call(t, "GET", srv.URL+"/admin/outbox?limit=0", token); code != 400 {
		t.Fatalf("limit=0: HTTP %d %s", code, body)
	}
	ch.mu.Lock()
	ch.blocked = false
	ch.mu.Unlock()
	if code, body := call(t, "POST", srv.URL+"/admin/outbox/"+dead[0].Key+"/retry", token); code != 204 {
		t.Fatalf("retry: HTTP %d %s", code, body)
	}
	waitFor(t, "the retried send", func() bool { return ch.count() == 1 })
	if code, _ := call(t, "POST", srv.URL+"/admin/outbox/"+dead[0].Key+"/retry", token); code != http.StatusConflict {
		t.Fatalf("retry of a sent record: HTTP %d, want 409", code)
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/outbox/no-such-key/discard", token); code != http.StatusNotFound {
		t.Fatalf("discard of an unknown key: HTTP %d, want 404", code)
	}
	// A replay is answered from the outbox: nothing goes out twice.
	var in []durability.InboxRecord
	_, body := call(t, "GET", srv.URL+"/admin/inbox?chat=c1", token)
	if json.Unmarshal([]byte(body), &in) != nil || len(in) != 1 || in[0].State != "done" {
		t.Fatalf("inbox %s", body)
	}
	first := in[0].Token
	if code, body := call(t, "POST", srv.URL+"/admin/inbox/web:m1/replay", token); code != 204 {
		t.Fatalf("replay: HTTP %d %s", code, body)
	}
	waitFor(t, "the replayed record done", func() bool {
		_, body := call(t, "GET", srv.URL+"/admin/inbox?state=done&chat=c1", token)
		return json.Unmarshal([]byte(body), &in) == nil && len(in) == 1 && in[0].Token > first
	})
	if n := ch.count(); n != 1 {
		t.Fatalf("the channel got %d sends after the replay, want 1", n)
	}
}

// TestDeleteTheDeadLetters: an operator deletes one dead inbound record,
// or every dead letter; a record that is not dead is refused.
func TestDeleteTheDeadLetters(t *testing.T) {
	b, _, srv := setupWith(t, token, "[durability.inbox]\nmax_attempts = 1\n")
	for _, m := range []channel.Message{{ID: "m1", Chat: "c1", Text: "trap"}, {ID: "m2", Chat: "c1", Text: "trap"}, {ID: "m3", Chat: "c1", Text: "hola"}} {
		if _, err := b.Admit(context.Background(), "web", m); err != nil {
			t.Fatal(err)
		}
	}
	var in []durability.InboxRecord
	var out []durability.OutboxRecord
	waitFor(t, "two dead inbound records and a dead send", func() bool {
		_, ib := call(t, "GET", srv.URL+"/admin/inbox?state=dead", token)
		_, ob := call(t, "GET", srv.URL+"/admin/outbox?state=dead", token)
		return json.Unmarshal([]byte(ib), &in) == nil && len(in) == 2 && json.Unmarshal([]byte(ob), &out) == nil && len(out) == 1
	})
	if code, _ := call(t, "POST", srv.URL+"/admin/inbox/web:m3/discard", token); code != http.StatusConflict {
		t.Fatalf("discard of a done record: HTTP %d, want 409", code)
	}
	if code, body := call(t, "POST", srv.URL+"/admin/inbox/web:m1/discard", token); code != 204 {
		t.Fatalf("discard of a dead record: HTTP %d %s", code, body)
	}
	if code, _ := call(t, "GET", srv.URL+"/admin/inbox/web:m1", token); code != http.StatusNotFound {
		t.Fatalf("a discarded record: HTTP %d, want 404", code)
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/purge-dead?before=soon", token); code != http.StatusBadRequest {
		t.Fatalf("purge-dead?before=soon: HTTP %d, want 400", code)
	}
	if code, body := call(t, "POST", srv.URL+"/admin/purge-dead?before=1h", token); code != 200 || body != `{"inbox":0,"outbox":0}`+"\n" {
		t.Fatalf("purge-dead?before=1h: HTTP %d %s", code, body)
	}
	for _, q := range []string{"", "?all=1", "?all=true&before=1h"} {
		if code, body := call(t, "POST", srv.URL+"/admin/purge-dead"+q, token); code != http.StatusBadRequest || !strings.Contains(body, "all=true") {
			t.Fatalf("purge-dead%s: HTTP %d %s, want 400 naming all=true", q, code, body)
		}
	}
	if code, body := call(t, "POST", srv.URL+"/admin/purge-dead?all=true", token); code != 200 || body != `{"inbox":1,"outbox":1}`+"\n" {
		t.Fatalf("purge-dead?all=true: HTTP %d %s", code, body)
	}
	_, ib := call(t, "GET", srv.URL+"/admin/inbox?state=dead", token)
	_, ob := call(t, "GET", srv.URL+"/admin/outbox?state=dead", token)
	if ib != "[]\n" || ob != "[]\n" {
		t.Fatalf("after purge-dead: inbox %s outbox %s", ib, ob)
	}
	if code, _ := call(t, "GET", srv.URL+"/admin/inbox/web:m3", token); code != 200 {
		t.Fatalf("the done record after purge-dead: HTTP %d, want 200", code)
	}
}

// TestAdminOwnListener: with [admin] listen the operator API answers on its
// own address (with the token, and only with it) and the public listener
// answers /admin/ with a plain 404.
func TestAdminOwnListener(t *testing.T) {
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "bot.toml"),
		"[bot]\nmodule = \"unused.wasm\"\n[admin]\ntoken = \""+token+"\"\nlisten = \"127.0.0.1:0\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.DiscardHandler), Backend: memory.New(), Guest: echo{}})
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		t.Fatal(err)
	}
	publicLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Attach(b, cfg.Admin.Token, adminLn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, publicLn, 5*time.Second) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	adminURL, publicURL := "http://"+adminLn.Addr().String(), "http://"+publicLn.Addr().String()
	if code, body := call(t, "GET", adminURL+"/admin/metrics", token); code != 200 || !strings.Contains(body, "botrun_inbound_journaled_total") {
		t.Fatalf("admin address with the token: HTTP %d %.200s", code, body)
	}
	if code, _ := call(t, "GET", adminURL+"/admin/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("admin address without the token: HTTP %d, want 401", code)
	}
	if code, _ := call(t, "GET", adminURL+"/healthz", ""); code != 200 {
		t.Fatalf("admin address /healthz: HTTP %d", code)
	}
	for _, path := range []string{"/admin/metrics", "/admin/inbox", "/admin/"} {
		code, body := call(t, "GET", publicURL+path, token)
		if code != http.StatusNotFound || strings.Contains(body, "admin") {
			t.Fatalf("public %s: HTTP %d %q, want a plain 404", path, code, body)
		}
	}
	if code, _ := call(t, "GET", publicURL+"/healthz", ""); code != 200 {
		t.Fatalf("public /healthz: HTTP %d", code)
	}
	if code, _ := call(t, "GET", adminURL+"/webchat/web/messages?chat=c1", ""); code != http.StatusNotFound {
		t.Fatalf("the webchat on the admin address: HTTP %d, want 404", code)
	}
}

// TestSendSchedules: POST /admin/send journals an operator's send, held
// until "at"; the outbox lists it as scheduled.
func TestSendSchedules(t *testing.T) {
	_, _, srv := setup(t, token)
	post := func(body string) (int, string) { return postBody(t, srv.URL+"/admin/send", body) }
	at := time.Now().Add(time.Hour).UnixMilli()
	if code, body := post(fmt.Sprintf(`{"provider":"web","chat":"c1","text":"later","key":"op:1","at":%d}`, at)); code != http.StatusAccepted || !strings.Contains(body, `"status":"scheduled"`) {
		t.Fatalf("POST /admin/send: HTTP %d %s", code, body)
	}
	if code, body := call(t, "GET", srv.URL+"/admin/outbox?state=scheduled", token); code != 200 || !strings.Contains(body, `"op:1"`) {
		t.Fatalf("GET /admin/outbox?state=scheduled: HTTP %d %s", code, body)
	}
	for _, bad := range []string{`{"provider":"nope","chat":"c1","text":"x"}`, `{"chat":"c1"}`, `{"provider":"web","chat":"c1","text":"x","extra":1}`} {
		if code, body := post(bad); code != http.StatusBadRequest {
			t.Errorf("POST /admin/send %s: HTTP %d %s, want 400", bad, code, body)
		}
	}
}

// TestBroadcastJournalsOnce: POST /admin/broadcast journals one send per
// chat; posted again, nothing new.
func TestBroadcastJournalsOnce(t *testing.T) {
	_, _, srv := setup(t, token)
	post := func(body string) (int, string) { return postBody(t, srv.URL+"/admin/broadcast", body) }
	body := `{"provider":"web","chats":["a","b","a"],"text":"news","key_prefix":"n:1"}`
	if code, got := post(body); code != http.StatusAccepted || !strings.Contains(got, `"journaled":2`) {
		t.Fatalf("first broadcast: HTTP %d %s", code, got)
	}
	if code, got := post(body); code != http.StatusAccepted || !strings.Contains(got, `"journaled":0,"existing":2`) {
		t.Fatalf("second broadcast: HTTP %d %s", code, got)
	}
	for _, bad := range []string{`{"provider":"web","chats":[],"text":"x","key_prefix":"k"}`, `{"provider":"nope","chats":["a"],"text":"x","key_prefix":"k"}`, `not json`} {
		if code, got := post(bad); code != http.StatusBadRequest {
			t.Errorf("POST /admin/broadcast %s: HTTP %d %s, want 400", bad, code, got)
		}
	}
}

// TestMessageLogEndpoint: GET /admin/log needs a chat and answers JSON.
func TestMessageLogEndpoint(t *testing.T) {
	_, _, srv := setup(t, token)
	if code, body := call(t, "GET", srv.URL+"/admin/log?chat=c1", token); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("GET /admin/log?chat=c1: HTTP %d %s", code, body)
	}
	if code, _ := call(t, "GET", srv.URL+"/admin/log", token); code != http.StatusBadRequest {
		t.Fatalf("GET /admin/log without a chat: HTTP %d, want 400", code)
	}
	if code, _ := call(t, "GET", srv.URL+"/admin/log?chat=c1", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /admin/log without the token: HTTP %d, want 401", code)
	}
}
