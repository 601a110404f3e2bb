package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// orderKeys is an order API that answers GET /orders/<id> with
// "status-<id>" after a short wait (so kills land during calls), and
// counts the calls per Idempotency-Key. A key it sees again is checked
// against the bot's journal at that moment: if the journal already holds
// that call's answer, the bot called again what it should have read back
// (replayed), and the call is kept in journaled.
type orderKeys struct {
	bot       string // the bot's address, for its console API
	mu        sync.Mutex
	keys      map[string]int
	journaled []string
}

func (a *orderKeys) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/orders/")
	if !ok || r.Header.Get("Idempotency-Key") == "" {
		http.Error(w, "want GET /orders/<id> with an Idempotency-Key", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.keys[key]++
	again := a.keys[key] > 1
	a.mu.Unlock()
	if record, ok := strings.CutSuffix(key, ":fetch:1"); again && ok && answered(a.bot, record) {
		a.mu.Lock()
		a.journaled = append(a.journaled, key)
		a.mu.Unlock()
	}
	time.Sleep(20 * time.Millisecond) // the API's own work: kills land in calls
	w.Write([]byte("status-" + id))
}

// TestSIGKILLFetch: a bot that calls an API for every message
// (examples/orders) is SIGKILLed at seeded random moments while it serves
// them on SQLite. Every message is answered exactly once, with the API's
// answer for that message; the API sees each message's call under one
// Idempotency-Key, and a key called twice belongs to a message a kill cut
// short (its record was claimed again: the ambiguous window of a call)
// whose answer was not yet journaled when the call was made again.
func TestSIGKILLFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SIGKILL test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/orders")
	dir := t.TempDir()
	addr := freePort(t)
	api := &orderKeys{bot: addr, keys: map[string]int{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfgPath := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
backend = "sqlite"
path = %q
instance_id = "fetch-kill"
poll = "50ms"
[durability.inbox]
lease = "3s"
max_attempts = 50
[admin]
token = %q
[[channels]]
id = "web"
type = "webchat"
rate_limit = 0
[[apis]]
name = "orders"
url = %q
allow_private = true
`, module, testDataDir(), addr, filepath.Join(dir, "bot.db"), killAdminToken, srv.URL)), 0o600)

	const messages, chats = 120, 12
	kills := 10
	if os.Getenv("BOTRUN_SOAK") != "" {
		kills = 20
	}
	rng := rand.New(rand.NewPCG(20261203, 31))
	var mu sync.Mutex
	admitted := map[int]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for i := w; i < messages; i += 4 {
				body, _ := json.Marshal(map[string]string{"id": fmt.Sprint("m", i), "chat": fmt.Sprint("c", i%chats), "from": "u", "text": fmt.Sprint("order ", i)})
				waitfor.Every(20*time.Millisecond, 10*time.Minute, func() bool {
					select {
					case <-stop:
						return true
					default:
					}
					resp, err := client.Post("http://"+addr+"/webchat/web/messages", "application/json", bytes.NewReader(body))
					if err != nil {
						return false
					}
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						return false
					}
					mu.Lock()
					admitted[i] = true
					mu.Unlock()
					return true
				})
				time.Sleep(time.Duration(rand.N(10)) * time.Millisecond) // the traffic's shape
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	cmd := startBotrun(t, bin, cfgPath, addr)
	for range kills {
		// The crash point under test: a seeded random moment.
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cmd = startBotrun(t, bin, cfgPath, addr)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	if !waitfor.Every(200*time.Millisecond, 5*time.Minute, func() bool {
		mu.Lock()
		n := len(admitted)
		mu.Unlock()
		return n == messages && settled(addr)
	}) {
		t.Fatal("not settled after the last restart")
	}
	all := map[string]string{}
	for i := range messages {
		all[fmt.Sprint("m", i)] = fmt.Sprint("c", i%chats)
	}
	got := transcript(t, addr, all)
	attempts := inboxAttempts(t, addr)
	api.mu.Lock()
	defer api.mu.Unlock()
	repeated := 0
	for i := range messages {
		chat := fmt.Sprint("c", i%chats)
		if n := got(fmt.Sprintf("%s|Order %d: status-%d", chat, i, i)); n != 1 {
			t.Errorf("message %d was answered %d times with its order's status, want once", i, n)
		}
		id := fmt.Sprint("web:m", i)
		switch calls := api.keys[id+":fetch:1"]; {
		case calls == 0:
			t.Errorf("the API never saw %s's call", id)
		case calls > 1 && attempts[id] < 2:
			t.Errorf("the API saw %s's call %d times, but its record ran once: only a kill may repeat a call", id, calls)
		case calls > 1:
			repeated++
		}
	}
	for _, key := range api.journaled {
		t.Errorf("the API was called again under %s while the bot's journal held that call's answer: a replay must read it back", key)
	}
	if len(api.keys) != messages {
		t.Errorf("the API saw %d keys, want one per message (%d)", len(api.keys), messages)
	}
	fmt.Printf("SIGKILL fetch sqlite: kills %d, messages %d, API calls made again after a kill %d\n", kills, messages, repeated)
}

// answered says whether the running bot's journal holds an answer for the
// first API call of record (false when the bot does not answer: it may
// have just been killed).
func answered(addr, record string) bool {
	req, _ := http.NewRequest("GET", "http://"+addr+"/admin/inbox/"+url.PathEscape(record)+"/calls", nil)
	req.Header.Set("Authorization", "Bearer "+killAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var calls []struct {
		N int `json:"n"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&calls) != nil {
		return false
	}
	for _, c := range calls {
		if c.N == 1 {
			return true
		}
	}
	return false
}

// inboxAttempts reads each inbox record's attempts from the running bot.
func inboxAttempts(t *testing.T, addr string) map[string]int {
	req, _ := http.NewRequest("GET", "http://"+addr+"/admin/inbox?limit=10000", nil)
	req.Header.Set("Authorization", "Bearer "+killAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var recs []struct {
		ID       string `json:"id"`
		Attempts int    `json:"attempts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, r := range recs {
		out[r.ID] = r.Attempts
	}
	return out
}
