package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// testAPI is an [[apis]] entry of the tests: name at url, with the bearer
// credential (none when ""), no retries, 1 MiB answers, its journal on or
// off, on this machine (allow_private).
func testAPI(name, url, bearer string, timeout time.Duration, journal bool) config.API {
	retries := 0
	a := config.API{Name: name, URL: url, Timeout: config.Duration(timeout), MaxResponse: 1 << 20, Retries: &retries,
		Journal: &journal, AllowPrivate: true}
	if bearer != "" {
		a.Headers = map[string]string{"Authorization": "Bearer " + bearer}
	}
	return a
}

// sqliteAt opens a SQLite backend in a file of the test's, closed at its
// end, and returns it with the file's path (a test reads the file for what
// must not be in it).
func sqliteAt(t *testing.T) (durability.Backend, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bot.db")
	b, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, path
}

// orderAPI is an order-status API: GET /v1/orders/<id> with the bearer
// token, 404 for an unknown order. It records each call's
// Idempotency-Key.
type orderAPI struct {
	mu   sync.Mutex
	keys []string
	reqs []string // "METHOD path"
}

func (a *orderAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer s3cret-token" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	a.keys = append(a.keys, r.Header.Get("Idempotency-Key"))
	a.reqs = append(a.reqs, r.Method+" "+r.URL.Path)
	a.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/orders/42":
		w.Write([]byte("shipped\n"))
	case "POST /v1/orders/42/cancel":
		w.Write([]byte("cancelled"))
	default:
		http.NotFound(w, r)
	}
}

func (a *orderAPI) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.keys)
}

// TestFetchJournaledAndReplayed: the orders example calls the API through
// the host with the entry's credentials and the derived Idempotency-Key; a
// replayed message reads the journaled answer and the API is not called
// again; with journal = false a replay calls again; the credentials are in
// no journal.
func TestFetchJournaledAndReplayed(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/orders")
	api := &orderAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	for _, journal := range []bool{true, false} {
		name := map[bool]string{true: "journal", false: "no-journal"}[journal]
		t.Run(name, func(t *testing.T) {
			before := len(api.calls())
			backend, dbPath := sqliteAt(t)
			cfg := testConfig(t, "")
			cfg.Bot.Module = module
			cfg.APIs = []config.API{testAPI("orders", srv.URL+"/v1", "s3cret-token", 30*time.Second, journal)}
			ch := newChannel()
			b := newTestBot(t, cfg, backend, nil, ch)
			stopped := false
			defer func() {
				if !stopped {
					b.stop(t)
				}
			}()
			b.admit(t, "c1", "m1", "order 42")
			b.admit(t, "c1", "m2", "order 7")
			if !b.quiet(2, 60*time.Second) {
				t.Fatal("the messages did not settle")
			}
			if ch.count("c1", "Order 42: shipped") != 1 || ch.count("c1", "There is no order 7.") != 1 {
				t.Fatalf("replies %q", ch.texts())
			}
			if got := api.calls()[before:]; !slices.Equal(got, []string{"web:m1:fetch:1", "web:m2:fetch:1"}) {
				t.Fatalf("the API saw keys %q, want one call per message under its derived key", got)
			}
			if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
				t.Fatal(err)
			}
			if !waitFor(60*time.Second, func() bool { return b.inboxState(t, "web:m1").Attempts == 1 && b.quiet(2, time.Millisecond) }) {
				t.Fatal("the replay did not settle")
			}
			// The operator sees a journaled turn's calls: method, API, path,
			// status, time and a preview; never the credentials.
			shown, err := b.Operator().Calls(context.Background(), "web:m2")
			switch {
			case err != nil:
				t.Fatal(err)
			case !journal && len(shown) != 0:
				t.Fatalf("calls of an API whose journal is off: %+v", shown)
			case journal && (len(shown) != 1 || shown[0].N != 1 || shown[0].API != "orders" || shown[0].Method != "GET" ||
				shown[0].Path != "/orders/7" || shown[0].Status != 404 || shown[0].At == 0 || !strings.HasPrefix(shown[0].Preview, "404 page not found")):
				t.Fatalf("the operator's view of web:m2's calls: %+v", shown)
			}
			m := b.Observer().Metrics()
			calls := api.calls()[before:]
			if journal {
				if len(calls) != 2 || m.FetchReplayed != 1 || m.FetchCalls != 2 {
					t.Fatalf("journaled: the replay made %d API calls in all (want 2), fetch_replayed %d (want 1), fetch_calls %d", len(calls), m.FetchReplayed, m.FetchCalls)
				}
			} else if len(calls) != 3 || calls[2] != "web:m1:fetch:1" || m.FetchReplayed != 0 {
				t.Fatalf("not journaled: the replay's calls %q (want the same key again), fetch_replayed %d", calls, m.FetchReplayed)
			}
			if ch.count("c1", "Order 42: shipped") != 1 {
				t.Fatalf("the replay sent its reply again: %q", ch.texts())
			}
			if journal {
				// The journal holds another request's answer for a call (the
				// module changed since): the call is made anew, counted
				// diverged, under a key of its own, so an API that honours
				// the key does not answer it with the other one's answer.
				stale := answers.Answer{Fingerprint: "another-request", Response: &abi.FetchResponse{Status: 200, Body: "stale"}, At: nowMs()}
				if err := b.answers.Put(context.Background(), "web:m2", 1, stale); err != nil {
					t.Fatal(err)
				}
				if err := b.Operator().ReplayInbound(context.Background(), "web:m2"); err != nil {
					t.Fatal(err)
				}
				if !waitFor(60*time.Second, func() bool { return b.inboxState(t, "web:m2").Attempts == 1 && b.quiet(2, time.Millisecond) }) {
					t.Fatal("the replay of web:m2 did not settle")
				}
				calls := api.calls()[before:]
				last := calls[len(calls)-1]
				if len(calls) != 3 || !strings.HasPrefix(last, "web:m2:fetch:1:") || len(last) != len("web:m2:fetch:1:")+12 {
					t.Fatalf("the diverged call: the API saw the keys %q, want a third under web:m2:fetch:1:<12 of its fingerprint>", calls)
				}
				if m := b.Observer().Metrics(); m.FetchDiverged != 1 || ch.count("c1", "There is no order 7.") != 1 {
					t.Fatalf("fetch_diverged %d (want 1); replies %q", m.FetchDiverged, ch.texts())
				}
			}
			// A dry run answers the candidate's calls from the journal and
			// never calls the API.
			j, jcfg, kv := b.DryRunSource()
			dryRuns := []struct {
				module string
				want   dryrun.Outcome
			}{{module, dryrun.Identical}} // a new call: host/dryrun's TestFetchAnsweredFromTheJournal
			if !journal {
				dryRuns = nil // a dry run compiles its candidate in a child: once is enough
			}
			for _, c := range dryRuns {
				mod, err := os.ReadFile(c.module)
				if err != nil {
					t.Fatal(err)
				}
				calls := len(api.calls())
				rep, err := dryrun.Run(context.Background(), dryrun.Options{Journals: j, Kv: kv, Config: jcfg, Module: mod, ModuleName: filepath.Base(c.module)})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Results {
					if r.Outcome != c.want || (c.want == dryrun.CannotReplay && !strings.Contains(r.Reason, "new API call: the candidate made call 1 (POST llm /chat/completions)")) {
						t.Errorf("dry run of %s, %s: %s (%s), want %s", filepath.Base(c.module), r.ID, r.Outcome, r.Reason, c.want)
					}
				}
				if n := len(api.calls()); n != calls {
					t.Fatalf("the dry run called the API %d times", n-calls)
				}
			}
			b.stop(t)
			stopped = true
			for _, f := range []string{dbPath, dbPath + "-wal"} {
				if raw, err := os.ReadFile(f); err == nil && bytes.Contains(raw, []byte("s3cret-token")) {
					t.Fatalf("%s holds the API's credential", filepath.Base(f))
				}
			}
		})
	}
}

// TestFetchFromAFlow: the orders example's lookup flow calls the API in
// one step and asks a question; the next message replays that step, which
// reads the kept answer: each call is made once, by the message that took
// its step, under that message's key.
func TestFetchFromAFlow(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/orders")
	api := &orderAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	cfg.APIs = []config.API{testAPI("orders", srv.URL+"/v1", "s3cret-token", 30*time.Second, true)}
	ch := newChannel()
	b := newTestBot(t, cfg, memory.New(), nil, ch)
	defer b.stop(t)
	for i, text := range []string{"order", "42", "yes"} {
		b.admit(t, "c1", fmt.Sprintf("f%d", i+1), text)
		if !b.quiet(i+1, time.Minute) {
			t.Fatalf("message %q did not settle", text)
		}
	}
	want := []string{"Which order number?", "Order 42: shipped", "Shall I cancel order 42? (yes/no)", "Order 42 is cancelled."}
	if got := ch.texts(); !slices.Equal(got, want) {
		t.Fatalf("transcript %q, want %q", got, want)
	}
	api.mu.Lock()
	reqs, keys := slices.Clone(api.reqs), slices.Clone(api.keys)
	api.mu.Unlock()
	if !slices.Equal(reqs, []string{"GET /v1/orders/42", "POST /v1/orders/42/cancel"}) || !slices.Equal(keys, []string{"web:f2:fetch:1", "web:f3:fetch:1"}) {
		t.Fatalf("the API got %q under the keys %q: each call once, by the message that took its step", reqs, keys)
	}
}

// slowAPI holds every call until want calls are in flight at once (or a
// minute passed), then answers them all: it sees how many guests wait on
// it together.
type slowAPI struct {
	want     int
	mu       sync.Mutex
	inFlight int
	most     int
	all      chan struct{}
}

func (a *slowAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.inFlight++
	a.most = max(a.most, a.inFlight)
	if a.inFlight == a.want {
		close(a.all)
	}
	a.mu.Unlock()
	select {
	case <-a.all:
	case <-time.After(time.Minute):
	}
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()
	w.Write([]byte("shipped"))
}

// TestFetchWaitingHoldsNoInstance: 64 chats whose handlers each wait on an
// API call all wait at once with the default 8 instances: a guest waiting
// on the host gives up its instance's slot (and its handler_timeout does
// not run: the calls outlast a 1 s handler_timeout).
func TestFetchWaitingHoldsNoInstance(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/orders")
	const chats = 64
	api := &slowAPI{want: chats, all: make(chan struct{})}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	cfg.Bot.Workers, cfg.Bot.Instances = chats, 8
	cfg.Bot.HandlerTimeout = config.Duration(time.Second)
	cfg.APIs = []config.API{testAPI("orders", srv.URL, "", 2*time.Minute, false)}
	ch := newChannel()
	b := newTestBot(t, cfg, memoryBackend(t), nil, ch)
	defer b.stop(t)
	for i := range chats {
		b.admit(t, fmt.Sprint("c", i), fmt.Sprint("m", i), "order 42")
	}
	if !b.quiet(chats, 3*time.Minute) {
		t.Fatal("the messages did not settle")
	}
	for i := range chats {
		if n := ch.count(fmt.Sprint("c", i), "Order 42: shipped"); n != 1 {
			t.Fatalf("chat c%d got %d answers: %q", i, n, ch.texts())
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.most != chats {
		t.Fatalf("at most %d calls waited at once, want all %d: a waiting guest holds one of the 8 instances", api.most, chats)
	}
}

// completions is a fake OpenAI-compatible /v1/chat/completions: it checks
// the key and the request, and answers with how many messages it got (or
// fails while down).
type completions struct {
	mu    sync.Mutex
	got   [][]map[string]string
	down  bool
	model string
}

func (c *completions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != "POST" || r.Header.Get("Authorization") != "Bearer sk-test" {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusUnauthorized)
		return
	}
	var req struct {
		Model    string              `json:"model"`
		Messages []map[string]string `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model == "" || len(req.Messages) == 0 || req.Messages[0]["role"] != "system" {
		http.Error(w, `{"error":{"message":"malformed"}}`, http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.got, c.model = append(c.got, req.Messages), req.Model
	down := c.down
	c.mu.Unlock()
	if down {
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		return
	}
	last := req.Messages[len(req.Messages)-1]["content"]
	json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{
		"role": "assistant", "content": fmt.Sprintf("(%d messages) you said %q", len(req.Messages), last)}}}})
}

// TestAssistantExample: the assistant example sends the chat's history to
// the completions API and answers with the completion; an API that fails
// gets a plain apology, and the history goes on without the failed turn.
func TestAssistantExample(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/assistant")
	llm := &completions{}
	srv := httptest.NewServer(llm)
	defer srv.Close()
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	cfg.APIs = []config.API{testAPI("llm", srv.URL+"/v1", "sk-test", time.Minute, true)}
	ch := &typistChannel{fakeChannel: newChannel(), llm: llm}
	b := newTestBot(t, cfg, memoryBackend(t), nil, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "hello")
	if !b.quiet(1, time.Minute) {
		t.Fatal("m1 did not settle")
	}
	b.admit(t, "c1", "m2", "and again")
	if !b.quiet(2, time.Minute) {
		t.Fatal("m2 did not settle")
	}
	llm.mu.Lock()
	llm.down = true
	llm.mu.Unlock()
	b.admit(t, "c1", "m3", "are you there?")
	if !b.quiet(3, time.Minute) {
		t.Fatal("m3 did not settle")
	}
	want := []string{`(2 messages) you said "hello"`, `(4 messages) you said "and again"`, "Sorry, I cannot think right now. Please try again in a minute."}
	if got := ch.texts(); !slices.Equal(got, want) {
		t.Fatalf("replies %q, want %q", got, want)
	}
	llm.mu.Lock()
	defer llm.mu.Unlock()
	if second := llm.got[1]; len(second) != 4 || second[1]["content"] != "hello" || second[2]["role"] != "assistant" {
		t.Fatalf("the second request's messages %v: want the system prompt, the first exchange and the new message", second)
	}
	if third := llm.got[2]; len(third) != 6 {
		t.Fatalf("the third request has %d messages, want 6", len(third))
	}
	// "typing…" shows in the chat before each call to the model.
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if want := []string{"c1 after 0 calls", "c1 after 1 calls", "c1 after 2 calls"}; !slices.Equal(ch.typed, want) {
		t.Fatalf("typing shown %q, want %q", ch.typed, want)
	}
}

// typistChannel is the fake channel with "typing…" (channel.Typist): it
// records each chat it typed in and how many calls the model had had then.
type typistChannel struct {
	*fakeChannel
	llm   *completions
	typed []string
}

func (c *typistChannel) Typing(_ context.Context, chat, _ string) error {
	c.llm.mu.Lock()
	n := len(c.llm.got)
	c.llm.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.typed = append(c.typed, fmt.Sprintf("%s after %d calls", chat, n))
	return nil
}

// hostileAPI is the API the hostile guest calls: /v1/echo answers with the
// X-Guest header it got in X-Echo, /v1/big with 4 KiB, /v1/away redirects
// off the API's origin (to away), /v1/home redirects to /v1/echo, /v1/hang
// never answers. It records every request's path and Authorization.
type hostileAPI struct {
	away  string
	hang  chan struct{}
	mu    sync.Mutex
	paths []string
	auths []string
}

func (a *hostileAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.paths = append(a.paths, r.URL.RequestURI())
	a.auths = append(a.auths, r.Header.Get("Authorization"))
	a.mu.Unlock()
	switch r.URL.Path {
	case "/v1/echo":
		w.Header().Set("X-Echo", r.Header.Get("X-Guest"))
		w.Write([]byte("echo"))
	case "/v1/big":
		w.Write(bytes.Repeat([]byte("x"), 4096))
	case "/v1/away":
		http.Redirect(w, r, a.away+"/steal", http.StatusFound)
	case "/v1/home":
		http.Redirect(w, r, "/v1/echo", http.StatusFound)
	case "/v1/hang":
		select {
		case <-a.hang:
		case <-r.Context().Done():
		}
	default:
		http.NotFound(w, r)
	}
}

func (a *hostileAPI) seen() (paths, auths []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.paths), slices.Clone(a.auths)
}

// TestFetchHostileInputs: a guest's hostile calls, end to end through the
// host function, each refused with an error that says what and why, and
// nothing sent where it should not go: paths that escape the API's base,
// headers that would replace the configured credentials, a name that
// resolves to a private address (the test's resolver answers; nothing is
// ever sent there), a redirect off the API's origin, a response over
// max_response, more calls than bot.max_fetches, an API that never
// answers. The credential reaches the API on every call, and no reply,
// log line or journal holds it.
func TestFetchHostileInputs(t *testing.T) {
	module := wasmbuild.Go(t, "wasm/testdata/guests/fetcher")
	var awayHits atomic.Int64
	away := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { awayHits.Add(1) }))
	defer away.Close()
	api := &hostileAPI{away: away.URL, hang: make(chan struct{})}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer close(api.hang)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	backend, dbPath := sqliteAt(t)
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	cfg.Bot.MaxFetches = 3
	const secret = "Bearer s3cret-token"
	direct := testAPI("api", srv.URL+"/v1", "s3cret-token", 2*time.Second, true)
	// A public-looking name that resolves to loopback: refused at the
	// dial, before any byte is sent.
	internal := testAPI("internal", "https://orders.example.com:"+port+"/v1", "s3cret-token", 2*time.Second, true)
	internal.AllowPrivate = false
	direct.MaxResponse, internal.MaxResponse = 1024, 1024
	cfg.APIs = []config.API{direct, internal}
	var logs syncBuffer
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	b, err := New(context.Background(), cfg, Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Backend: backend, Channels: []channel.Channel{newChannel()},
		TracerProvider: tp,
		LookupIP: func(_ context.Context, host string) ([]net.IP, error) {
			if host == "orders.example.com" {
				return []net.IP{net.ParseIP("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := b.providers["web"].(*fakeChannel)
	b.Start()
	stopped := false
	defer func() {
		if !stopped {
			b.Stop(context.Background())
		}
	}()

	cases := []struct {
		name string
		ask  string
		want []string // each line of the reply holds its want
	}{
		{"dotdot", `{"api":"api","path":"/../admin"}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"encoded-dotdot", `{"api":"api","path":"/%2e%2e/admin"}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"scheme", `{"api":"api","path":"http://evil.example/x"}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"other-host", `{"api":"api","path":"//evil.example/x"}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"crlf", `{"api":"api","path":"/echo\r\nX-Injected: 1"}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"credential-header", `{"api":"api","path":"/echo","headers":{"authorization":"Bearer guest","X-Guest":"hi"}}`, []string{"200 hi echo"}},
		{"host-header", `{"api":"api","path":"/echo","headers":{"Host":"evil.example"}}`, []string{"ERROR", "BAD_PAYLOAD"}},
		{"unknown-api", `{"api":"nope","path":"/echo"}`, []string{"ERROR", "NOT_FOUND"}},
		{"private", `{"api":"internal","path":"/echo"}`, []string{"FAILED refused", "orders.example.com resolves to 127.0.0.1", "allow_private"}},
		{"redirect-off-origin", `{"api":"api","path":"/away"}`, []string{"302 "}},
		{"redirect-on-origin", `{"api":"api","path":"/home","headers":{"X-Guest":"again"}}`, []string{"200 again echo"}},
		{"too-large", `{"api":"api","path":"/big"}`, []string{"FAILED too-large", "max_response"}},
		{"too-many", `{"api":"api","path":"/echo","calls":4}`, []string{"200", "200", "200", "TOO_LARGE" /* the 4th */}},
		{"never-answers", `{"api":"api","path":"/hang"}`, []string{"FAILED timeout"}},
	}
	for _, c := range cases {
		if _, err := b.Admit(context.Background(), "web", channel.Message{ID: c.name, Chat: c.name, From: "u", Text: c.ask}); err != nil {
			t.Fatal(err)
		}
	}
	tb := &testBot{Bot: b}
	if !tb.quiet(len(cases), 2*time.Minute) {
		t.Fatal("the hostile calls did not settle")
	}
	replies := map[string]string{}
	ch.mu.Lock()
	for _, d := range ch.delivered {
		replies[d.Chat] = d.Text
	}
	ch.mu.Unlock()
	for _, c := range cases {
		got := replies[c.name]
		// One line per call (a single call's want may name several
		// parts of its line).
		lines := strings.Split(got, "\n")
		ok := true
		for i, w := range c.want {
			if len(c.want) > 1 && strings.HasPrefix(c.want[0], "200") {
				ok = ok && i < len(lines) && strings.Contains(lines[i], w)
			} else {
				ok = ok && strings.Contains(lines[0], w)
			}
		}
		if !ok {
			t.Errorf("%s: reply %q, want lines holding %q", c.name, got, c.want)
		}
		if strings.Contains(got, "s3cret") {
			t.Errorf("%s: the reply holds the credential: %q", c.name, got)
		}
	}

	paths, auths := api.seen()
	for _, p := range paths {
		if !strings.HasPrefix(p, "/v1/") {
			t.Errorf("the API got a request for %q, outside its base /v1", p)
		}
	}
	for i, a := range auths {
		if a != secret {
			t.Errorf("request %s carried Authorization %q, not the configured one", paths[i], a)
		}
	}
	// credential-header, redirect-on-origin (two hops), redirect-off,
	// too-large, too-many (three made), never-answers: nothing else.
	if want := 1 + 2 + 1 + 1 + 3 + 1; len(paths) != want {
		t.Errorf("the API got %d requests %q, want %d", len(paths), paths, want)
	}
	if n := awayHits.Load(); n != 0 {
		t.Errorf("the redirect off the API's origin was followed (%d requests)", n)
	}

	// botrun_fetch_seconds counts the calls made, by API and outcome.
	counts := map[string]uint64{}
	families, err := b.Observer().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "botrun_fetch_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			counts[labels["api"]+" "+labels["outcome"]] = m.GetHistogram().GetSampleCount()
		}
	}
	if want := map[string]uint64{"api 2xx": 5, "api 3xx": 1, "api too-large": 1, "api timeout": 1, "internal refused": 1}; !maps.Equal(counts, want) {
		t.Errorf("botrun_fetch_seconds counts %v, want %v", counts, want)
	}
	// A span per call (made, refused or answered from the journal), with
	// the API and the path, never a header or a body.
	var fetchSpans int
	for _, s := range exp.GetSpans() {
		if s.Name != "botrun.fetch" {
			continue
		}
		fetchSpans++
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.Emit(), "s3cret") {
				t.Errorf("span attribute %s holds the credential", a.Key)
			}
		}
	}
	// 18 calls, less the scheme and the Host header, which the ABI's
	// decoder refuses before a call reaches the turn.
	if fetchSpans != 16 {
		t.Errorf("%d botrun.fetch spans, want one per call that reached the turn (16)", fetchSpans)
	}
	b.Stop(context.Background())
	stopped = true
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("a log line holds the credential")
	}
	for _, f := range []string{dbPath, dbPath + "-wal"} {
		if raw, err := os.ReadFile(f); err == nil && bytes.Contains(raw, []byte("s3cret")) {
			t.Errorf("%s holds the credential", filepath.Base(f))
		}
	}
	for _, w := range []string{"/../admin", "max_fetches", "api=nope"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("no log line names %q: an operator cannot tell what was refused", w)
		}
	}
}
