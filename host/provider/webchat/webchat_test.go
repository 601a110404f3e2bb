package webchat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/provider"
)

// admitter admits each message id once, like the host, and records them.
type admitter struct {
	mu   sync.Mutex
	seen map[string]bool
	msgs []provider.Message
	fail error
}

func (a *admitter) Admit(_ context.Context, prov string, m provider.Message) (provider.Admission, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return provider.Admission{}, a.fail
	}
	id := prov + ":" + m.ID
	if a.seen[id] {
		return provider.Admission{ID: id, Duplicate: true}, nil
	}
	a.seen[id] = true
	a.msgs = append(a.msgs, m)
	return provider.Admission{ID: id}, nil
}

func newServer(t *testing.T) (*Provider, *admitter, *httptest.Server) {
	t.Helper()
	a := &admitter{seen: map[string]bool{}}
	p := New("web", a, NewMemoryTranscript())
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
	if len(a.msgs) != 2 || a.msgs[0].From != "u1" || a.msgs[1].From != "c1" {
		t.Fatalf("admitted %+v", a.msgs)
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
		{"no text", `{"chat":"c"}`, `"text" is required`, 400},
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
	if len(a.msgs) != 0 {
		t.Fatalf("bad requests were admitted: %+v", a.msgs)
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

func TestPostNotAdmittedIs503(t *testing.T) {
	_, a, srv := newServer(t)
	a.fail = errors.New("journal down")
	code, out := post(t, srv.URL+"/webchat/web/messages", `{"chat":"c","text":"x"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(out["error"].(string), "journal down") {
		t.Fatalf("%d %v", code, out)
	}
}

type listing struct {
	Messages []Entry `json:"messages"`
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
	for _, m := range []provider.Outbound{{Chat: "c1", Text: "a"}, {Chat: "c2", Text: "b"}, {Chat: "c1", Text: "c"}} {
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	url := srv.URL + "/webchat/web/messages?chat=c1"
	l := get(t, url+"&after=0")
	if len(l.Messages) != 2 || l.Messages[0] != (Entry{1, "c1", "a"}) || l.Messages[1] != (Entry{3, "c1", "c"}) {
		t.Fatalf("after=0: %+v", l.Messages)
	}
	if l := get(t, url+"&after=1"); len(l.Messages) != 1 || l.Messages[0].Seq != 3 {
		t.Fatalf("after=1: %+v", l.Messages)
	}
	if l := get(t, url+"&after=3"); l.Messages == nil || len(l.Messages) != 0 {
		t.Fatalf("after=3: %+v (want an empty list, not null)", l.Messages)
	}
}

func TestGetWaitsForTheNextSend(t *testing.T) {
	p, _, srv := newServer(t)
	got := make(chan listing, 1)
	go func() { got <- get(t, srv.URL+"/webchat/web/messages?chat=c1&after=0&wait=10s") }()
	time.Sleep(50 * time.Millisecond)
	if _, err := p.Send(context.Background(), provider.Outbound{Chat: "c2", Text: "other chat"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), provider.Outbound{Chat: "c1", Text: "late"}); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if len(l.Messages) != 1 || l.Messages[0].Text != "late" {
			t.Fatalf("got %+v", l.Messages)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll did not return after a send")
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
