package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

func TestMain(m *testing.M) {
	code := testserver.Run(m)
	removeBins()
	os.Exit(code)
}

// replica is one botrun process of a failover test.
type replica struct {
	name, addr, cfg string
	cmd             *exec.Cmd
	stderr          *lockedBuffer
}

func (r *replica) start(t *testing.T, bin string) {
	t.Helper()
	r.stderr = &lockedBuffer{}
	r.cmd = exec.Command(bin, r.cfg)
	r.cmd.Stdout, r.cmd.Stderr = io.Discard, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitHealthy(r.addr, 30*time.Second); err != nil {
		r.cmd.Process.Kill()
		t.Fatalf("%s did not come up: %v\n%s", r.name, err, r.stderr.String())
	}
}

// waitHealthy waits until the bot at addr answers /healthz; the error is
// the last refusal when it did not within timeout.
func waitHealthy(addr string, timeout time.Duration) error {
	var err error
	if waitfor.True(timeout, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
		}
		return err == nil
	}) {
		return nil
	}
	return err
}

// newReplica writes the bot.toml of replica name in dir: the module, the
// shared backend, a 100 ms poll and 1.5 s leases, then rest (keys of
// [durability.outbox] first, then whole sections: the providers).
func newReplica(t *testing.T, dir, name, module, backend, rest string) *replica {
	r := &replica{name: name, addr: freePort(t), cfg: filepath.Join(dir, name+".toml")}
	src := fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
%s
instance_id = %q
poll = "100ms"
[durability.inbox]
lease = "1500ms"
max_attempts = 20
[durability.outbox]
lease = "1500ms"
%s`, module, testDataDir(), r.addr, backend, name, rest)
	if err := os.WriteFile(r.cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// post delivers a message to a replica; false when it is down or refused.
func post(addr, chat, text string) bool {
	body, _ := json.Marshal(httpchan.Inbound{ID: text, Chat: chat, From: "u", Text: text})
	req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/gw", bytes.NewReader(body))
	httpchan.SignRequest(req.Header, []byte(killSecret), body, time.Now())
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 202 || resp.StatusCode == 200
}

// TestFailover runs two botrun replicas on one shared backend. One is
// SIGKILLed in the middle of handlers: the survivor reprocesses its records
// once their leases expire, and nothing is lost or sent twice outside the
// sends counted ambiguous. Then a third replica is frozen (SIGSTOP) past its
// leases and thawed (SIGCONT): its late completion is refused and counted in
// stale_leases.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	t.Run("postgres", func(t *testing.T) {
		failover(t, bin, module, "postgres", fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"fo%d_\"", testserver.Postgres(t), os.Getpid()))
	})
	t.Run("redis", func(t *testing.T) {
		failover(t, bin, module, "redis", fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"fo%d\"", testserver.Redis(t), os.Getpid()))
	})
}

func failover(t *testing.T, bin, module, name, backend string) {
	dir := t.TempDir()
	gw := &gateway{texts: map[string]int{}, delay: 150 * time.Millisecond}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	mk := func(name string) *replica {
		return newReplica(t, dir, name, module, backend, fmt.Sprintf("[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\n", gwSrv.URL, killSecret))
	}
	a, b := mk("replica-a"), mk("replica-b")
	a.start(t, bin)
	b.start(t, bin)
	defer b.cmd.Process.Kill()

	// Chats are routed to one replica each; when a replica is down the
	// channel redelivers to the other, as a load balancer would.
	const messages, chats = 60, 12
	admitted := map[string]string{}
	var mu sync.Mutex
	send := func(i int, killed bool) {
		text := fmt.Sprintf("fo-%d", i)
		chat := fmt.Sprintf("chat-%d", i%chats)
		owner, other := a.addr, b.addr
		if i%chats%2 == 1 {
			owner, other = b.addr, a.addr
		}
		if !waitfor.Every(50*time.Millisecond, time.Minute, func() bool {
			return (!killed || owner != a.addr) && post(owner, chat, text) || post(other, chat, text)
		}) {
			t.Errorf("message %s was never admitted", text)
			return
		}
		mu.Lock()
		admitted[text] = chat
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := range messages / 2 {
		wg.Go(func() { send(i, false) })
	}
	waitUntil(t, "6 sends at the gateway", 5*time.Minute, func() bool { return gw.sends() >= 6 })
	a.cmd.Process.Signal(syscall.SIGKILL) // in the middle of handlers waiting on the slow channel
	a.cmd.Wait()
	wg.Wait()
	for i := messages / 2; i < messages; i++ {
		wg.Go(func() { send(i, true) })
	}
	wg.Wait()
	waitSettled(t, bin, b.cfg, len(admitted), 60*time.Second)

	// A frozen replica: its leases expire while it is stopped; the survivor
	// takes its records; thawed, its completions are refused as stale.
	c := newReplica(t, dir, "replica-c", module, backend, fmt.Sprintf("[admin]\ntoken = %q\n[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\n",
		killAdminToken, gwSrv.URL, killSecret))
	c.start(t, bin)
	for i := range 4 {
		text := fmt.Sprintf("frozen-%d", i)
		chat := fmt.Sprintf("fchat-%d", i)
		if !post(c.addr, chat, text) {
			t.Fatalf("replica-c refused %s", text)
		}
		admitted[text] = chat
	}
	// Frozen in the middle of a handler: its send is at the (slow) gateway,
	// its records' leases held.
	waitUntil(t, "replica-c's first send at the gateway", 60*time.Second, func() bool { return gw.arrivals("fchat-") > 0 })
	c.cmd.Process.Signal(syscall.SIGSTOP)
	// Past its leases: the survivor settles all of replica-c's records.
	waitSettled(t, bin, b.cfg, len(admitted), 60*time.Second)
	c.cmd.Process.Signal(syscall.SIGCONT)
	waitUntil(t, "replica-c's refused completion (stale_leases)", 60*time.Second, func() bool {
		return metric(c.addr, "botrun_stale_leases_total") >= 1
	})
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
	waitSettled(t, bin, b.cfg, len(admitted), 60*time.Second)
	b.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Wait()

	stale := 0
	if m := regexp.MustCompile(`stale_leases=(\d+)`).FindStringSubmatch(c.stderr.String()); m != nil {
		stale, _ = strconv.Atoi(m[1])
	}
	if stale < 1 {
		t.Errorf("the thawed replica counted no stale lease:\n%s", c.stderr.String())
	}

	o := audit(t, bin, b.cfg, "http", gw.delivered, admitted)
	if o.takenOver == 0 {
		t.Error("no record was taken over from the killed or frozen replica")
	}
	fmt.Printf("failover %s: messages %d, taken over %d, lost %d, duplicated %d, ambiguous %d, stale leases %d\n",
		name, len(admitted), o.takenOver, o.lost, o.duplicated, o.ambiguous, stale)
}

// waitUntil waits until cond holds, and fails the test when it does not
// within timeout.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !waitfor.True(timeout, cond) {
		t.Fatalf("waited %s for %s", timeout, what)
	}
}

// metric reads the counter name from the admin API of the bot at addr
// (token killAdminToken); -1 when it does not answer.
func metric(addr, name string) int64 {
	req, _ := http.NewRequest("GET", "http://"+addr+"/admin/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+killAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// waitSettled waits until want inbound records exist and every record is
// settled, reading the shared backend through the CLI.
func waitSettled(t *testing.T, bin, cfg string, want int, timeout time.Duration) {
	t.Helper()
	var recs []cliRecord
	var err error
	if !waitfor.Every(200*time.Millisecond, timeout, func() bool {
		var out []byte
		recs = nil
		if out, err = exec.Command(bin, "inbox", "list", "-c", cfg, "--json").Output(); err != nil || json.Unmarshal(out, &recs) != nil || len(recs) < want {
			return false
		}
		for _, r := range recs {
			if !durability.InboxState(r.State).Terminal() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not settled in %s: %d records, want %d (%v)", timeout, len(recs), want, err)
	}
}
