package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/internal/wasmbuild"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBot runs a bot with module on a free port and returns its base URL.
func startBot(t *testing.T, module, extra string) (string, *syncBuffer) {
	t.Helper()
	_, base, logs := runBot(t, module, extra)
	return base, logs
}

// runBot is startBot, answering the running Bot too.
func runBot(t *testing.T, module, extra string) (*Bot, string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n%s\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
		module, wasmbuild.DataDir, extra)
	cfg, err := config.Parse(filepath.Join(dir, "bot.toml"), src, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	bot, err := New(context.Background(), cfg, Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bot.Run(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return bot, "http://" + ln.Addr().String(), logs
}

func postMessage(t *testing.T, base, chat, text, id string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"chat": chat, "from": "u1", "text": text, "id": id})
	resp, err := http.Post(base+"/webchat/web/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// replies long-polls the chat until it has n replies or the wait runs out.
func replies(t *testing.T, base, chat string, n int, wait time.Duration) []string {
	t.Helper()
	var out []string
	after := 0
	deadline := time.Now().Add(wait)
	for len(out) < n && time.Now().Before(deadline) {
		resp, err := http.Get(fmt.Sprintf("%s/webchat/web/messages?chat=%s&after=%d&wait=%s", base, chat, after, time.Until(deadline).Round(time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Messages []struct {
				Seq  int    `json:"seq"`
				Text string `json:"text"`
			} `json:"messages"`
		}
		json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		for _, m := range l.Messages {
			out = append(out, m.Text)
			after = m.Seq
		}
	}
	return out
}

// TestEchoEndToEnd builds examples/echo, starts botrun on a free port, POSTs a
// message and reads "echo: …" back through the webchat API.
func TestEchoEndToEnd(t *testing.T) {
	base, _ := startBot(t, wasmbuild.Go(t, "../examples/echo"), "")
	if code := postMessage(t, base, "c1", "hola", "m-1"); code != http.StatusAccepted {
		t.Fatalf("POST: %d, want 202", code)
	}
	if code := postMessage(t, base, "c1", "hola", "m-1"); code != http.StatusOK {
		t.Fatalf("repeated POST: %d, want 200", code)
	}
	if got := replies(t, base, "c1", 1, 10*time.Second); len(got) != 1 || got[0] != "echo: hola" {
		t.Fatalf("replies = %q, want [echo: hola]", got)
	}
	// The duplicate was not processed again.
	if got := replies(t, base, "c1", 2, 300*time.Millisecond); len(got) != 1 {
		t.Fatalf("replies after the duplicate = %q", got)
	}
	resp, err := http.Get(base + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat page: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestPerChatOrder sends many messages to a few chats; each chat's replies come
// back in the order its messages were admitted.
func TestPerChatOrder(t *testing.T) {
	base, _ := startBot(t, wasmbuild.Go(t, "../examples/echo"), "workers = 3")
	const perChat = 20
	chats := []string{"a", "b", "c", "d"}
	for i := range perChat {
		for _, c := range chats {
			if code := postMessage(t, base, c, fmt.Sprint(i), fmt.Sprintf("%s-%d", c, i)); code != 202 {
				t.Fatalf("POST %s %d: %d", c, i, code)
			}
		}
	}
	for _, c := range chats {
		got := replies(t, base, c, perChat, 15*time.Second)
		if len(got) != perChat {
			t.Fatalf("chat %s: %d replies, want %d", c, len(got), perChat)
		}
		for i, r := range got {
			if r != fmt.Sprintf("echo: %d", i) {
				t.Fatalf("chat %s reply %d = %q: out of order (%q)", c, i, r, got)
			}
		}
	}
}

// TestFaultingChatDoesNotStopOthers runs a guest that loops forever in one chat
// while another chat keeps getting answers; the looping event fails with a
// logged deadline error.
func TestFaultingChatDoesNotStopOthers(t *testing.T) {
	base, logs := startBot(t, wasmbuild.Go(t, "wasm/testdata/guests/faulty"), "workers = 2\nhandler_timeout = \"1500ms\"")
	postMessage(t, base, "bad", "loop", "l1")
	postMessage(t, base, "bad", "panic", "p1")
	for i := range 5 {
		postMessage(t, base, "good", fmt.Sprint(i), fmt.Sprint("g", i))
	}
	if got := replies(t, base, "good", 5, 10*time.Second); len(got) != 5 {
		t.Fatalf("good chat got %q while the bad chat faulted", got)
	}
	postMessage(t, base, "bad", "after", "a1")
	if got := replies(t, base, "bad", 1, 10*time.Second); len(got) != 1 || got[0] != "echo: after" {
		t.Fatalf("bad chat after its faults: %q", got)
	}
	l := logs.String()
	for _, want := range []string{"kind=deadline", "event=web:l1", "kind=trap", "event=web:p1"} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q:\n%s", want, l)
		}
	}
}

func TestNewRefusesBadModule(t *testing.T) {
	dir := t.TempDir()
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", wasmbuild.Go(t, "wasm/testdata/guests/nomarker"), wasmbuild.DataDir)
	cfg, err := config.Parse(filepath.Join(dir, "bot.toml"), src, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), `missing export "botrun_abi_v1"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestWebchatSurvivesRestartOnSQLite: the journal and the webchat transcript
// live in the SQLite file, so after a restart the replies are still listed and
// a redelivered message id is still a duplicate.
func TestWebchatSurvivesRestartOnSQLite(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/echo")
	dir := t.TempDir()
	src := fmt.Sprintf("[bot]\nmodule = %q\ndata_dir = %q\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n",
		module, wasmbuild.DataDir)
	for run := range 2 {
		cfg, err := config.Parse(filepath.Join(dir, "bot.toml"), src, os.LookupEnv)
		if err != nil {
			t.Fatal(err)
		}
		bot, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- bot.Run(ctx, ln, 5*time.Second) }()
		base := "http://" + ln.Addr().String()
		code := postMessage(t, base, "c1", "hola", "m-1")
		if want := []int{202, 200}[run]; code != want {
			t.Fatalf("run %d: POST %d, want %d", run, code, want)
		}
		if got := replies(t, base, "c1", 1, 10*time.Second); len(got) != 1 || got[0] != "echo: hola" {
			t.Fatalf("run %d: replies %q", run, got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
