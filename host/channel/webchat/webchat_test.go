package webchat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

func newServer(t *testing.T) (*Provider, *channeltest.Journal, *httptest.Server) {
	t.Helper()
	a := channeltest.NewJournal()
	p, _ := Open(Config{ID: "web"}, channel.Env{Admitter: a})
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return p, a, srv
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response %q is not JSON: %v", b, err)
	}
	return resp.StatusCode, out
}

func TestPostAdmitsOnceAndAnswersDuplicates(t *testing.T) {
	_, a, srv := newServer(t)
	url := srv.URL + "/webchat/web/messages"
	code, out := post(t, url, `{"chat":"c1","from":"u1","text":"hola","id":"m-1"}`)
	if code != http.StatusAccepted || out["id"] != "web:m-1" || out["duplicate"] != nil {
		t.Fatalf("first post: %d %v", code, out)
	}
	code, out = post(t, url, `{"chat":"c1","from":"u1","text":"hola","id":"m-1"}`)
	if code != http.StatusOK || out["id"] != "web:m-1" || out["duplicate"] != true {
		t.Fatalf("repeat: %d %v, want 200 duplicate", code, out)
	}
	code, out = post(t, url, `{"chat":"c1","text":"no id"}`)
	if code != http.StatusAccepted || !strings.HasPrefix(out["id"].(string), "web:") {
		t.Fatalf("post without id: %d %v", code, out)
	}
	if len(a.Admitted()) != 2 || a.Admitted()[0].From != "u1" || a.Admitted()[1].From != "c1" {
		t.Fatalf("admitted %+v", a.Admitted())
	}
}

func TestPostRejectsBadRequests(t *testing.T) {
	_, a, srv := newServer(t)
	url := srv.URL + "/webchat/web/messages"
	for _, tt := range []struct {
		name, body, want string
		code             int
	}{
		{"not json", `hola`, "body must be a JSON object", 400},
		{"truncated", `{"chat":"c1"`, "unexpected EOF", 400},
		{"no chat", `{"text":"x"}`, `"chat" is required`, 400},
		{"no text", `{"chat":"c"}`, `"text" (or an "interaction") is required`, 400},
		{"unknown field", `{"chat":"c","text":"x","txt":1}`, `unknown field "txt"`, 400},
		{"wrong type", `{"chat":1,"text":"x"}`, "cannot unmarshal number", 400},
		{"two objects", `{"chat":"c","text":"x"}{"chat":"c","text":"y"}`, "trailing data", 400},
		{"long id", `{"chat":"c","text":"x","id":"` + strings.Repeat("i", 300) + `"}`, "limited to 256 bytes", 400},
		{"long text", `{"chat":"c","text":"` + strings.Repeat("t", MaxText+1) + `"}`, "limited to 16384 bytes", 400},
		{"oversized", `{"chat":"c","text":"` + strings.Repeat("t", MaxBody) + `"}`, "body over 65536 bytes", 413},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := post(t, url, tt.body)
			if code != tt.code || !strings.Contains(out["error"].(string), tt.want) {
				t.Fatalf("%d %v, want %d containing %q", code, out, tt.code, tt.want)
			}
		})
	}
	if len(a.Admitted()) != 0 {
		t.Fatalf("bad requests were admitted: %+v", a.Admitted())
	}
	resp, _ := http.Get(url + "?after=1")
	if resp.StatusCode != 400 {
		t.Fatalf("GET without chat: %d", resp.StatusCode)
	}
	resp, _ = http.Get(url + "?chat=c&after=-2")
	if resp.StatusCode != 400 {
		t.Fatalf("GET with negative after: %d", resp.StatusCode)
	}
}

// TestWebchatExposureNoInternalErrors: the webchat's callers are not
// authenticated, so a journal or transcript failure answers a generic message
// (503 to send again, 500 to read again); the details go to the log.
func TestWebchatExposureNoInternalErrors(t *testing.T) {
	a := channeltest.NewJournal()
	a.Fail(errors.New("journal down: /var/lib/botrun/bot.db: disk I/O error"))
	var logs bytes.Buffer
	p, _ := Open(Config{ID: "web", Transcript: failingTranscript{}}, channel.Env{Admitter: a, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	code, out := post(t, srv.URL+"/webchat/web/messages", `{"chat":"c","text":"x"}`)
	if code != http.StatusServiceUnavailable || out["error"] != "not admitted, send it again" {
		t.Fatalf("POST: %d %v, want 503 with a generic message", code, out)
	}
	resp, err := http.Get(srv.URL + "/webchat/web/messages?chat=c")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(b), "/var/lib") || strings.Contains(string(b), "sql") {
		t.Fatalf("GET: %d %s, want 500 without internal details", resp.StatusCode, b)
	}
	if l := logs.String(); !strings.Contains(l, "disk I/O error") || !strings.Contains(l, "no such table") {
		t.Fatalf("the details are not in the log:\n%s", l)
	}
}

// failingTranscript fails every read with an internal error.
type failingTranscript struct{ *MemoryTranscript }

func (failingTranscript) After(context.Context, string, string, int64, int) ([]Entry, error) {
	return nil, errors.New("sql: no such table botrun_durable at /var/lib/botrun/bot.db")
}

type listing struct {
	Messages []Entry `json:"messages"`
	Typing   bool    `json:"typing"`
}

func get(t *testing.T, url string) listing {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	var l listing
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestGetListsSendsPerChatAfterSeq(t *testing.T) {
	p, _, srv := newServer(t)
	ctx := context.Background()
	for _, m := range []channel.Outbound{{Chat: "c1", Text: "a"}, {Chat: "c2", Text: "b"}, {Chat: "c1", Text: "c"}} {
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	url := srv.URL + "/webchat/web/messages?chat=c1"
	l := get(t, url+"&after=0")
	// Each chat counts its own seq.
	if len(l.Messages) != 2 || !same(l.Messages[0], 1, "c1", "a") || !same(l.Messages[1], 2, "c1", "c") {
		t.Fatalf("after=0: %+v", l.Messages)
	}
	if l := get(t, url+"&after=1"); len(l.Messages) != 1 || l.Messages[0].Seq != 2 {
		t.Fatalf("after=1: %+v", l.Messages)
	}
	if l := get(t, url+"&after=2"); l.Messages == nil || len(l.Messages) != 0 {
		t.Fatalf("after=2: %+v (want an empty list, not null)", l.Messages)
	}
	if l := get(t, srv.URL+"/webchat/web/messages?chat=c2&after=0"); len(l.Messages) != 1 || !same(l.Messages[0], 1, "c2", "b") {
		t.Fatalf("c2 after=0: %+v", l.Messages)
	}
}

func TestGetWaitsForTheNextSend(t *testing.T) {
	p, _, srv := newServer(t)
	got := longPoll(t, p, srv.URL, "c1")
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "c2", Text: "other chat"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "c1", Text: "late"}); err != nil {
		t.Fatal(err)
	}
	answered(t, got, "late")
}

// longPoll starts a long poll of chat's messages on the server at base and
// returns once it waits for the next send.
func longPoll(t *testing.T, p *Provider, base, chat string) <-chan listing {
	t.Helper()
	got := make(chan listing, 1)
	go func() { got <- get(t, base+"/webchat/web/messages?chat="+chat+"&after=0&wait=60s") }()
	fakekit.WaitFor(t, "the long poll of "+chat+" waiting", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiting[chat] != nil
	})
	return got
}

// answered fails t unless the long poll got answers with one message,
// text.
func answered(t *testing.T, got <-chan listing, text string) {
	t.Helper()
	select {
	case l := <-got:
		if len(l.Messages) != 1 || l.Messages[0].Text != text {
			t.Fatalf("the long poll got %+v, want %q", l.Messages, text)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the long poll did not return after a send of %q", text)
	}
}

func TestChatPage(t *testing.T) {
	_, _, srv := newServer(t)
	resp, err := http.Get(srv.URL + "/webchat/web/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `const provider = "web";`) || !strings.Contains(string(b), "<form") {
		t.Fatalf("page: %d %.200s", resp.StatusCode, b)
	}
}

func FuzzDecodePost(f *testing.F) {
	f.Add([]byte(`{"chat":"c1","from":"u1","text":"hola","id":"m-1"}`))
	f.Add([]byte(`{"chat":"c1","text":"x"} `))
	f.Add([]byte(`{"chat":"\u0000","text":"\xff"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodePost(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if m.Chat == "" || m.Text == "" || m.From == "" || len(m.Text) > MaxText {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// TestWebchatExposureRateLimited: each client address has a token bucket;
// past it the answer is 429 with Retry-After, and other addresses are not
// affected.
func TestWebchatExposureRateLimited(t *testing.T) {
	a := channeltest.NewJournal()
	// One token every 1000 s: the bucket cannot refill during the test.
	p, _ := Open(Config{ID: "web", RateLimit: 0.001, Burst: 3}, channel.Env{Admitter: a})
	mux := http.NewServeMux()
	p.Routes(mux)
	call := func(addr, method, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/webchat/web/messages?chat=c1", strings.NewReader(body))
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		if w := call("203.0.113.7:5000", "POST", `{"chat":"c1","text":"x"}`); w.Code != http.StatusAccepted {
			t.Fatalf("request %d within the burst: %d %s", i, w.Code, w.Body)
		}
	}
	for _, method := range []string{"POST", "GET"} {
		w := call("203.0.113.7:5001", method, `{"chat":"c1","text":"x"}`)
		ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		if w.Code != http.StatusTooManyRequests || ra < 1 {
			t.Fatalf("%s past the burst (another port, same address): %d Retry-After %q", method, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := call("[2001:db8::1]:5000", "POST", `{"chat":"c2","text":"x"}`); w.Code != http.StatusAccepted {
		t.Fatalf("another address: %d", w.Code)
	}
	if len(a.Admitted()) != 4 {
		t.Fatalf("admitted %d messages, want 4", len(a.Admitted()))
	}
}

// countingTranscript counts the reads of each chat.
type countingTranscript struct {
	*MemoryTranscript
	mu    sync.Mutex
	reads map[string]int
}

func (c *countingTranscript) After(ctx context.Context, prov, chat string, after int64, limit int) ([]Entry, error) {
	c.mu.Lock()
	c.reads[chat]++
	c.mu.Unlock()
	return c.MemoryTranscript.After(ctx, prov, chat, after, limit)
}

func (c *countingTranscript) count(chat string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[chat]
}

// TestWebchatExposureLongPollOwnChat: a waiting long poll is woken by a send
// to its own chat only; sends to other chats do not make it read the
// transcript again.
func TestWebchatExposureLongPollOwnChat(t *testing.T) {
	tr := &countingTranscript{MemoryTranscript: NewMemoryTranscript(), reads: map[string]int{}}
	p, _ := Open(Config{ID: "web", Transcript: tr}, channel.Env{Admitter: channeltest.NewJournal()})
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got := longPoll(t, p, srv.URL, "mine")
	fakekit.WaitFor(t, "the long poll reading the transcript", func() bool { return tr.count("mine") > 0 })
	p.mu.Lock()
	mine := p.waiting["mine"].ch
	p.mu.Unlock()
	for i := range 20 {
		if _, err := p.Send(context.Background(), channel.Outbound{Chat: fmt.Sprint("other-", i), Text: "not yours"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-mine:
			t.Fatalf("a send to chat other-%d woke the long poll of chat mine", i)
		default:
		}
	}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "mine", Text: "yours"}); err != nil {
		t.Fatal(err)
	}
	answered(t, got, "yours")
	if n := tr.count("mine"); n != 2 {
		t.Fatalf("the long poll read the transcript %d times, want 2 (before waiting, and once woken by its own chat)", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiting) != 0 {
		t.Fatalf("waiters left behind: %v", p.waiting)
	}
}

// TestWebchatExposurePageChatIDs: the page's chat and message ids come from
// the browser's CSPRNG (128 bits), never from Math.random.
func TestWebchatExposurePageChatIDs(t *testing.T) {
	b, err := page.ReadFile("page.html")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	if strings.Contains(src, "Math.random") || !strings.Contains(src, "crypto.getRandomValues") || !strings.Contains(src, "new Uint8Array(16)") {
		t.Fatal("page.html must make its ids with crypto.getRandomValues over 16 bytes, not Math.random")
	}
	if !strings.Contains(src, `state = { chat: randomID("c-")`) || !strings.Contains(src, `const id = randomID("p-")`) {
		t.Fatal("page.html does not use randomID for the chat and message ids")
	}
}

// TestWebchatExposureTranscriptPurged: entries older than the purge time go;
// newer ones stay.
func TestWebchatExposureTranscriptPurged(t *testing.T) {
	tr := NewMemoryTranscript()
	ctx := context.Background()
	tr.Append(ctx, "web", Entry{Chat: "c1", Text: "old"})
	tr.Append(ctx, "web2", Entry{Chat: "c1", Text: "old too"})
	cut := time.Now().Add(time.Nanosecond)
	for !time.Now().After(cut) {
	}
	tr.Append(ctx, "web", Entry{Chat: "c1", Text: "new"})
	n, err := tr.Purge(ctx, cut)
	if err != nil || n != 2 {
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	if es, _ := tr.After(ctx, "web", "c1", 0, 10); len(es) != 1 || es[0].Text != "new" || es[0].Seq != 2 {
		t.Fatalf("left %+v", es)
	}
}

// TestControlCharactersRejectedInPosts: ids, chats and senders with control
// characters are refused with 400 before admission.
func TestControlCharactersRejectedInPosts(t *testing.T) {
	for _, b := range []string{
		`{"chat":"n\u0000x","text":"hi"}`,
		`{"chat":"c","from":"u\u0007","text":"hi"}`,
		`{"chat":"c","id":"m\r\n1","text":"hi"}`,
	} {
		if _, err := DecodePost([]byte(b)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", b, err)
		}
	}
}

// same reports whether e is the entry seq of chat with text and no choices.
func same(e Entry, seq int64, chat, text string) bool {
	return e.Seq == seq && e.Chat == chat && e.Text == text && e.Buttons == nil && e.List == nil
}

// TestEditAndTyping: an edit joins the transcript as an entry that edits an
// earlier seq; typing ends a long poll of a client that does not show it
// yet, and a message ends the typing.
func TestEditAndTyping(t *testing.T) {
	p, _, srv := newServer(t)
	p.typingFor = time.Hour // however slow this machine, the indicator lasts the test
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: "c1", Text: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, "c1", ref, "final"); err != nil {
		t.Fatal(err)
	}
	l := get(t, srv.URL+"/webchat/web/messages?chat=c1&after=0")
	if len(l.Messages) != 2 || l.Messages[1].Edits != 1 || l.Messages[1].Text != "final" {
		t.Fatalf("after the edit: %+v", l.Messages)
	}
	if err := p.Edit(ctx, "c1", "x", "y"); !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Fatalf("edit of a non-seq ref: %v", err)
	}
	if err := p.Typing(ctx, "c1", ""); err != nil {
		t.Fatal(err)
	}
	if l := get(t, srv.URL+"/webchat/web/messages?chat=c1&after=2&wait=20s&typing=0"); !l.Typing || len(l.Messages) != 0 {
		t.Fatalf("a poll while typing: %+v", l)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: "c1", Text: "here"}); err != nil {
		t.Fatal(err)
	}
	if l := get(t, srv.URL+"/webchat/web/messages?chat=c1&after=2&wait=20s&typing=1"); l.Typing || len(l.Messages) != 1 {
		t.Fatalf("after the message: %+v", l)
	}
}

// TestEditsKeptInTheStore: an edit read back from the backend (another
// process, a new page) is still an edit of its seq.
func TestEditsKeptInTheStore(t *testing.T) {
	kv := memory.NewKv()
	open := func() *Provider {
		p, _ := Open(Config{ID: "web"}, channel.Env{Admitter: channeltest.NewJournal(), Kv: kv, KeyPrefix: "bot/"})
		return p
	}
	ctx := context.Background()
	p := open()
	ref, err := p.Send(ctx, channel.Outbound{Chat: "c1", Text: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, "c1", ref, "final"); err != nil {
		t.Fatal(err)
	}
	es, err := open().store.After(ctx, "web", "c1", 0, 10)
	if err != nil || len(es) != 2 || es[1].Edits != 1 || es[1].Text != "final" {
		t.Fatalf("read back: %+v %v", es, err)
	}
}

// TestLongPollAnsweredAtTheDrain: a long poll waiting when the bot begins to
// stop (channel.Env.Draining closes) is answered at once, with what there
// is, so the HTTP server stops without waiting out the poll.
func TestLongPollAnsweredAtTheDrain(t *testing.T) {
	draining := make(chan struct{})
	p, _ := Open(Config{ID: "web"}, channel.Env{Admitter: channeltest.NewJournal(), Draining: draining})
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got := longPoll(t, p, srv.URL, "c1")
	close(draining)
	select {
	case l := <-got:
		if len(l.Messages) != 0 {
			t.Fatalf("the drained poll got %+v, want no message", l.Messages)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll was not answered at the drain (it waits 60 s)")
	}
}
