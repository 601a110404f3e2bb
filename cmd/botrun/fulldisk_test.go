package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// tmpfs mounts a tmpfs of size bytes on a new directory for the test and
// returns it. Mounting needs root (CAP_SYS_ADMIN): without it the test is
// skipped, and under CI=true it fails.
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("a full disk needs a small tmpfs, and mounting one failed (run as root): %v: %s", err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file into dir until the disk refuses (ENOSPC) and returns
// it; removing it frees the disk.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				// The last few bytes too: a write of one page must fail.
				for errors.Is(err, syscall.ENOSPC) && len(chunk) > 1 {
					chunk = chunk[:len(chunk)/2]
					_, err = f.Write(chunk)
				}
				return path
			}
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
}

// alertSink is an [alerts] url: it records the alerts' bodies.
type alertSink struct {
	mu     sync.Mutex
	bodies []string
}

func (s *alertSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
}

func (s *alertSink) has(substr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bodies {
		if strings.Contains(b, substr) {
			return true
		}
	}
	return false
}

// refusals counts what a load generator met: 503s with and without
// Retry-After, requests that got no answer in time, and the slowest
// refusal.
type refusals struct {
	withRetryAfter, without, noAnswer atomic.Int64
	slowest                           atomic.Int64 // ns
}

// deliverHonouring sends one message as a well-behaved channel does: it
// reports whether it was admitted and, when refused with 503, waits the
// Retry-After the bot asked for (capped at 2 s, to keep the test short).
func deliverHonouring(client *http.Client, addr, text, chat string, r *refusals) bool {
	start := time.Now()
	body := fmt.Sprintf(`{"id":%q,"chat":%q,"from":"u","text":%q}`, text, chat, text)
	resp, err := client.Post("http://"+addr+"/webchat/web/messages", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		r.noAnswer.Add(1)
		return false
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		if d := time.Since(start).Nanoseconds(); d > r.slowest.Load() {
			r.slowest.Store(d)
		}
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || secs < 1 {
			r.without.Add(1)
			return false
		}
		r.withRetryAfter.Add(1)
		time.Sleep(min(time.Duration(secs)*time.Second, 2*time.Second))
		return false
	}
	return resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK
}

// TestFullDisk runs botrun with its journal on a small tmpfs, fills the
// disk in the middle of traffic, holds it full while messages keep coming,
// then frees it. While full, admission answers 503 with Retry-After within
// the client's timeout and an admission:failed alert reaches the [alerts]
// url; once freed, the same process (no restart) admits everything, and
// every message accepted before, during or after is answered exactly once.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the full-disk test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	for _, backend := range []string{"sqlite", "file", "file-log", "events"} {
		t.Run(backend, func(t *testing.T) { fullDisk(t, bin, module, backend) })
	}
}

func fullDisk(t *testing.T, bin, module, backend string) {
	disk := tmpfs(t, 32<<20)
	dir := t.TempDir()
	sink := &alertSink{}
	sinkSrv := httptest.NewServer(sink)
	defer sinkSrv.Close()
	keys := backendKeys(t, strings.TrimSuffix(backend, "-log"), disk)
	if backend == "file-log" {
		keys += "\nappend_log = true\ncompact_every = 50"
	}
	addr := freePort(t)
	cfg := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
%s
poll = "50ms"
[durability.inbox]
lease = "3s"
max_attempts = 50
[durability.outbox]
lease = "3s"
[admin]
token = %q
[alerts]
url = %q
secret = "alerts-secret-0123456789"
[[providers]]
id = "web"
type = "webchat"
rate_limit = 0
`, module, testDataDir(), addr, keys, killAdminToken, sinkSrv.URL)), 0o600)
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, cfg)
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	if err := waitHealthy(addr, 60*time.Second); err != nil {
		t.Fatalf("botrun did not come up: %v\n%s", err, stderr)
	}

	// make soak fills and frees the disk 5 times, make test once.
	cycles := 1
	if os.Getenv("BOTRUN_SOAK") != "" {
		cycles = 5
	}
	messages := 200 + 100*cycles
	const chats = 20
	var ref refusals
	var admitted sync.Map // text -> chat
	var count atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				i := next.Add(1) - 1
				if i >= int64(messages) {
					return
				}
				text := fmt.Sprintf("msg-%d", i)
				chat := fmt.Sprintf("chat-%d", (int(i)+w)%chats)
				waitfor.Every(20*time.Millisecond, 5*time.Minute, func() bool {
					return deliverHonouring(client, addr, text, chat, &ref)
				})
				admitted.Store(text, chat)
				count.Add(1)
				time.Sleep(5 * time.Millisecond) // the traffic's pace
			}
		})
	}
	var atFull int64
	var heldFor, resumed time.Duration
	for cycle := range cycles {
		before := count.Load()
		if !waitfor.True(time.Minute, func() bool { return count.Load() >= before+60 }) {
			t.Fatalf("cycle %d: 60 messages were not admitted before the disk filled: %d\n%s", cycle, count.Load()-before, stderr)
		}
		refused := ref.withRetryAfter.Load()
		filler := fill(t, disk)
		full := time.Now()
		atFull = count.Load()
		// Held full until admission refused 20 deliveries and the
		// alert came.
		if !waitfor.True(2*time.Minute, func() bool {
			return ref.withRetryAfter.Load() >= refused+20 && sink.has("admission:failed")
		}) {
			t.Fatalf("cycle %d, with the disk full: %d refusals with Retry-After, alert seen %v; want 20 and true\n%s", cycle, ref.withRetryAfter.Load()-refused, sink.has("admission:failed"), stderr)
		}
		heldFor = time.Since(full)
		os.Remove(filler)
		freed := time.Now()
		at := count.Load()
		if !waitfor.True(2*time.Minute, func() bool { return count.Load() > at }) {
			ls, _ := exec.Command("ls", "-la", disk).CombinedOutput()
			df, _ := exec.Command("df", disk).CombinedOutput()
			t.Fatalf("cycle %d: nothing admitted 2 minutes after the disk was freed\n%s%s\n%s", cycle, ls, df, stderr)
		}
		resumed = time.Since(freed)
	}
	if !waitfor.True(2*time.Minute, func() bool { return count.Load() == int64(messages) }) {
		t.Fatalf("%d of %d messages admitted after the disk was freed\n%s", count.Load(), messages, stderr)
	}

	wg.Wait()
	ls, _ := exec.Command("ls", "-la", disk).CombinedOutput()
	t.Logf("the disk after the run:\n%s", ls)
	if !waitfor.Every(200*time.Millisecond, 3*time.Minute, func() bool { return settled(addr) }) {
		t.Fatalf("not settled after the disk was freed\n%s", stderr)
	}
	select {
	case err := <-exited:
		t.Fatalf("botrun exited during the test (%v): service must resume without a restart\n%s", err, stderr)
	default:
	}
	all := map[string]string{}
	admitted.Range(func(k, v any) bool { all[k.(string)] = v.(string); return true })
	replies := transcript(t, addr, all)
	// The file journals are the process's own: stop it before the CLI
	// reads them.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Errorf("botrun did not stop cleanly: %v\n%s", err, stderr)
	}
	exited <- nil
	o := audit(t, bin, cfg, "webchat", replies, all)
	if o.lost+o.duplicated+o.ambiguous > 0 {
		t.Errorf("lost %d, duplicated %d, ambiguous %d; want 0, 0, 0", o.lost, o.duplicated, o.ambiguous)
	}
	if n := ref.without.Load(); n > 0 {
		t.Errorf("%d refusals without a Retry-After", n)
	}
	if n := ref.noAnswer.Load(); n > 0 {
		t.Errorf("%d deliveries got no answer within the client's 10 s timeout", n)
	}
	fmt.Printf("full disk %s: %d messages, %d fill(s) (the last at %d admitted, held full %s): %d refusals with Retry-After (slowest %s), alert sent; admitting again %s after freeing; lost %d, duplicated %d, ambiguous %d\n",
		backend, messages, cycles, atFull, heldFor.Round(time.Millisecond), ref.withRetryAfter.Load(), time.Duration(ref.slowest.Load()).Round(time.Millisecond), resumed.Round(time.Millisecond), o.lost, o.duplicated, o.ambiguous)
}
