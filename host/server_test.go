package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/webchat"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/wasm"
)

// echoOnce replies "echo: <text>".
var echoOnce = native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
	_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
	return err
})

// webchatBot builds a bot with the config's webchat and handler h on the
// memory backend; Run is left to the test.
func webchatBot(t *testing.T, cfg *config.Config, h Guest) *Bot {
	t.Helper()
	b, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Backend: memory.New(), Guest: h})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run serves b on ln until the test ends.
func run(t *testing.T, b *Bot, ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// TestHTTPServerTimeouts: a body trickled slower than the read timeout is cut
// off and nothing is admitted; an idle kept-alive connection is closed. The
// write timeout stays above the webchat long poll's longest wait.
func TestHTTPServerTimeouts(t *testing.T) {
	if d := defaultTimeouts; d.write <= webchat.MaxWait || d.read <= 0 || d.idle <= 0 || d.readHeader <= 0 {
		t.Fatalf("default timeouts %+v: each must be set, write above the long poll's %s", d, webchat.MaxWait)
	}
	b := webchatBot(t, testConfig(t, ""), echoOnce)
	b.timeouts = serverTimeouts{readHeader: 5 * time.Second, read: 300 * time.Millisecond, write: 10 * time.Second, idle: 300 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, ln)

	// A small body, one byte every 50 ms: about 3 s, ten times the read
	// timeout.
	body := `{"chat":"c1","from":"u1","text":"trickle..","id":"slow-1"}`
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /webchat/web/messages HTTP/1.1\r\nHost: bot\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	go func() {
		for i := range len(body) {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // the slow client under test, not a wait
		}
	}()
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("a %d-byte body trickled over 3 s was answered %s", len(body), resp.Status)
		}
	} else if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatal("the server was still reading the trickled body after 60 s")
	}
	if n := b.Observer().Metrics().InboundJournaled; n != 0 {
		t.Fatalf("%d message(s) admitted from a trickled body", n)
	}

	// A kept-alive connection left idle is closed by the server.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /healthz HTTP/1.1\r\nHost: bot\r\n\r\n")
	r := bufio.NewReader(idle)
	resp, err = http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	idle.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read gave %v, want EOF (closed by the server)", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestWebchatExposureRefusedOnPublicListen: the config check is bypassed by
// --listen, so Run itself refuses to serve a webchat without allow_public on
// a listener other machines reach.
func TestWebchatExposureRefusedOnPublicListen(t *testing.T) {
	for _, public := range []bool{false, true} {
		cfg := testConfig(t, "")
		cfg.Channels[0].Settings.(*webchat.Config).AllowPublic = public
		b := webchatBot(t, cfg, echoOnce)
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a Run that serves returns at once
		err = b.Run(ctx, ln, 5*time.Second)
		ln.Close()
		switch {
		case public && err != nil:
			t.Fatalf("allow_public = true: %v", err)
		case !public && (err == nil || !strings.Contains(err.Error(), `webchat "web" has no authentication`) || !strings.Contains(err.Error(), "allow_public = true")):
			t.Fatalf("webchat on %s without allow_public: Run gave %v, want a refusal naming allow_public", ln.Addr(), err)
		}
	}
}

// TestWebchatExposureTranscriptPurgedWithRetention: the webchat transcript
// kept in the backend goes with durability.retention, like the records.
func TestWebchatExposureTranscriptPurgedWithRetention(t *testing.T) {
	sent := make(chan error, 1)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		sent <- err
		return err
	})
	b := webchatBot(t, testConfig(t, "[durability]\nretention = \"200ms\""), h)
	b.Start()
	defer b.Stop(context.Background())
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", Text: "hola"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reply was not sent")
	}
	// The reply is in the transcript (or already purged); it must go.
	var es []webchat.Entry
	if !waitFor(60*time.Second, func() bool {
		w := httptest.NewRecorder()
		b.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/webchat/web/messages?chat=c1&after=0", nil))
		var got struct{ Messages []webchat.Entry }
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != http.StatusOK || err != nil {
			t.Fatalf("GET messages: %d %s", w.Code, w.Body)
		}
		es = got.Messages
		return len(es) == 0
	}) {
		t.Fatalf("after 30 s the transcript still has %+v; retention is 200ms", es)
	}
}

// TestReadyzFailsWhileDraining: /readyz answers 200 while the bot runs and
// 503 once it begins to stop (a load balancer's readiness probe), while
// /healthz stays 200.
func TestReadyzFailsWhileDraining(t *testing.T) {
	b := newTestBot(t, testConfig(t, ""), memoryBackend(t), echoTwice, newChannel())
	h := b.Handler()
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code
	}
	if get("/readyz") != 200 || get("/healthz") != 200 {
		t.Fatalf("a running bot: /readyz %d, /healthz %d", get("/readyz"), get("/healthz"))
	}
	b.stop(t)
	if get("/readyz") != 503 || get("/healthz") != 200 {
		t.Fatalf("a stopped bot: /readyz %d (want 503), /healthz %d", get("/readyz"), get("/healthz"))
	}
}
