package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider/httpchan"
	"github.com/botrun/botrun/internal/wasmbuild"
)

const killSecret = "kill-test-secret-0123456789"

// gateway is the fake channel: it checks the signature of each send, like a
// real gateway would, and records what it accepted.
type gateway struct {
	mu    sync.Mutex
	texts map[string]int
	bad   int
	n     int
	// delay makes each send slow, so a replica can die in the middle of one.
	delay time.Duration
}

func (g *gateway) sends() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	time.Sleep(g.delay)
	if httpchan.VerifyRequest(r.Header, []byte(killSecret), body, time.Now(), httpchan.DefaultWindow) != nil {
		g.mu.Lock()
		g.bad++
		g.mu.Unlock()
		http.Error(w, `{"error":"bad signature"}`, http.StatusUnauthorized)
		return
	}
	var out httpchan.Outbound
	if json.Unmarshal(body, &out) != nil || out.Chat == "" {
		http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	g.texts[out.Chat+"|"+out.Text]++
	g.n++
	id := g.n
	g.mu.Unlock()
	fmt.Fprintf(w, `{"id":"%d"}`, id)
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func buildBotrun(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "botrun")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSIGKILL runs botrun as a child process on each embedded backend, drives
// traffic over many chats through the signed HTTP channel, SIGKILLs it at
// seeded random moments and restarts it, then checks that every admitted
// message was handled and no reply went out twice except the sends the
// journal counts as ambiguous.
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SIGKILL test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	for _, backend := range []string{"sqlite", "file"} {
		t.Run(backend, func(t *testing.T) { sigkill(t, bin, module, backend) })
	}
}

func sigkill(t *testing.T, bin, module, backend string) {
	dir := t.TempDir()
	gw := &gateway{texts: map[string]int{}}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	addr := freePort(t)
	path := filepath.Join(dir, "bot.db")
	if backend == "file" {
		path = filepath.Join(dir, "bot.journal")
	}
	cfgPath := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
backend = %q
path = %q
instance_id = "kill-test"
poll = "50ms"
[durability.inbox]
lease = "3s"
max_attempts = 50
[durability.outbox]
lease = "3s"
on_ambiguous = "skip"
[admin]
token = %q
[[providers]]
id = "gw"
type = "http"
url = %q
secret = %q
`, module, filepath.Join(os.TempDir(), "botrun-test-data"), addr, backend, path, killAdminToken, gwSrv.URL, killSecret)), 0o644)

	const messages, chats, kills = 400, 40, 20
	rng := rand.New(rand.NewPCG(20261129, uint64(len(backend))))
	var admitted sync.Map // text -> chat
	var next atomic.Int64
	stopTraffic := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for {
				i := next.Add(1) - 1
				if i >= messages {
					return
				}
				text := fmt.Sprintf("msg-%d", i)
				chat := fmt.Sprintf("chat-%d", (int(i)+w)%chats)
				body, _ := json.Marshal(httpchan.Inbound{ID: text, Chat: chat, From: "u", Text: text})
				for {
					select {
					case <-stopTraffic:
						return
					default:
					}
					req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/gw", bytes.NewReader(body))
					httpchan.SignRequest(req.Header, []byte(killSecret), body, time.Now())
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == 202 || resp.StatusCode == 200 {
							admitted.Store(text, chat)
							break
						}
					}
					time.Sleep(20 * time.Millisecond) // the channel redelivers
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			}
		})
	}
	defer func() {
		select {
		case <-stopTraffic:
		default:
			close(stopTraffic)
		}
		wg.Wait()
	}()

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, cfgPath)
		cmd.Stderr, cmd.Stdout = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("botrun did not come up: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range kills {
		cmd := start()
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	// The last run lets everything through, then stops gracefully.
	cmd := start()
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := 0
		admitted.Range(func(_, _ any) bool { n++; return true })
		if n == messages && settled(addr) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("not settled after the last restart (%d of %d admitted)", n, messages)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()

	all := map[string]string{}
	admitted.Range(func(k, v any) bool { all[k.(string)] = v.(string); return true })
	o := audit(t, bin, cfgPath, gw, all)
	if gw.bad > 0 {
		t.Errorf("the gateway saw %d sends with a bad signature", gw.bad)
	}
	t.Logf("%s: kills %d, messages %d, handled %d, lost %d, duplicated %d, ambiguous %d",
		backend, kills, messages, o.handled, o.lost, o.duplicated, o.ambiguous)
	fmt.Printf("SIGKILL %s: kills %d, messages %d, lost %d, duplicated %d, ambiguous %d\n",
		backend, kills, messages, o.lost, o.duplicated, o.ambiguous)
}

// killAdminToken opens the running bot's admin API to settled.
const killAdminToken = "kill-test-admin-token"

// settled asks the running bot, through its admin API, whether every inbox
// and outbox record is settled. Any failure to answer is "not yet": a refusal
// is never taken for an answer.
func settled(addr string) bool {
	for _, what := range []string{"inbox", "outbox"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/admin/"+what+"?limit=10000", nil)
		req.Header.Set("Authorization", "Bearer "+killAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		var recs []struct {
			State string `json:"state"`
		}
		err = json.NewDecoder(resp.Body).Decode(&recs)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		for _, r := range recs {
			switch r.State {
			case string(durability.InboxDone), string(durability.InboxDead), string(durability.OutboxSent), string(durability.OutboxUnknown):
			default:
				return false
			}
		}
	}
	return true
}

func list[T any](t *testing.T, bin, cfg, what string) []T {
	t.Helper()
	out, err := exec.Command(bin, what, "list", "-c", cfg, "--json").Output()
	if err != nil {
		t.Fatalf("botrun %s list: %v", what, err)
	}
	var recs []T
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("botrun %s list --json: %v: %s", what, err, out)
	}
	return recs
}

// outcome is what the journal and the gateway say about a run.
type outcome struct {
	handled, lost, duplicated, ambiguous, takenOver int
}

// audit checks every admitted message (text -> chat) against the journal, read
// through the CLI, and the gateway: each was handled, and its reply went out
// exactly once unless the journal counts that send ambiguous (unknown).
func audit(t *testing.T, bin, cfg string, gw *gateway, admitted map[string]string) outcome {
	t.Helper()
	var o outcome
	done := map[string]bool{}
	for _, r := range list[durability.InboxRecord](t, bin, cfg, "inbox") {
		done[r.ID] = r.State == durability.InboxDone
		if r.Attempts > 1 {
			o.takenOver++
		}
	}
	unknown := map[string]bool{}
	for _, r := range list[durability.OutboxRecord](t, bin, cfg, "outbox") {
		if r.State == durability.OutboxUnknown {
			var m struct{ Text string }
			json.Unmarshal(r.Payload, &m)
			unknown[r.Chat+"|"+m.Text] = true
		}
	}
	o.ambiguous = len(unknown)
	for text, chat := range admitted {
		if done["gw:"+text] {
			o.handled++
		} else {
			t.Errorf("admitted %s was not handled", text)
		}
		reply := chat + "|echo: " + text
		gw.mu.Lock()
		n := gw.texts[reply]
		gw.mu.Unlock()
		switch {
		case n == 0:
			o.lost++
			if !unknown[reply] {
				t.Errorf("reply to %s never sent and not counted ambiguous", text)
			}
		case n > 1:
			o.duplicated++
			if !unknown[reply] {
				t.Errorf("reply to %s sent %d times and not counted ambiguous", text, n)
			}
		}
	}
	return o
}
