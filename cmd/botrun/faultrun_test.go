package main

import (
	"fmt"
	"io"
	"net/http"
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
)

// refusals counts what a load generator met: 503s with and without
// Retry-After, requests that got no answer in time, and the slowest
// refusal.
type refusals struct {
	withRetryAfter, without, noAnswer atomic.Int64
	slowest                           atomic.Int64 // ns
}

// postMessage posts a message (its id and text are text) in chat to the
// webchat of the replica at addr.
func postMessage(client *http.Client, addr, text, chat string) (*http.Response, error) {
	body := fmt.Sprintf(`{"id":%q,"chat":%q,"from":"u","text":%q}`, text, chat, text)
	return client.Post("http://"+addr+"/webchat/web/messages", "application/json", strings.NewReader(body))
}

// deliverHonouring sends one message as a well-behaved channel does: it
// reports whether it was admitted and, when refused with 503, waits the
// Retry-After the bot asked for (capped at 2 s, to keep the test short).
func deliverHonouring(client *http.Client, addr, text, chat string, r *refusals) bool {
	start := time.Now()
	resp, err := postMessage(client, addr, text, chat)
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

// faultLease and faultPoll are a fault test's inbox and outbox leases and
// its durability.poll: the bound of a recovery after a fault ends.
const (
	faultLease = 3 * time.Second
	faultPoll  = 50 * time.Millisecond
)

// probe posts a message (text, in a chat of its own) to replica r every
// 50 ms until it is admitted, refusals or not, and reports how long after
// since that was; false when it was not within 2 minutes. The message is
// audited with the others.
func (f *faultFleet) probe(r int, text string, since time.Time) (time.Duration, bool) {
	client := &http.Client{Timeout: 10 * time.Second}
	var took time.Duration
	ok := waitfor.Every(50*time.Millisecond, 2*time.Minute, func() bool {
		resp, err := postMessage(client, f.reps[r].addr, text, text)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
			return false
		}
		took = time.Since(since)
		f.admitted.Store(text, text)
		return true
	})
	return took, ok
}

// faultReplica is one botrun process of a fault test.
type faultReplica struct {
	addr, cfg string
	stderr    *lockedBuffer
	exited    chan error
	cmd       *exec.Cmd
}

// faultFleet is the botrun processes of a fault test, on one backend, and
// the traffic they take: the echo bot on webchat, each chat sent to its
// replica first and, while that one refuses, to the next (as a load
// balancer does), by 8 clients that honour Retry-After.
type faultFleet struct {
	t        *testing.T
	bin      string
	reps     []*faultReplica
	messages int

	ref      refusals
	admitted sync.Map // text -> chat
	count    atomic.Int64
	next     atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

// startFleet starts one replica per entry of keys (its [durability] keys),
// each with extra appended to its config.
func startFleet(t *testing.T, bin, module string, keys []string, extra string) *faultFleet {
	t.Helper()
	f := &faultFleet{t: t, bin: bin, stop: make(chan struct{})}
	dir := t.TempDir()
	for i, k := range keys {
		r := &faultReplica{addr: freePort(t), cfg: filepath.Join(dir, fmt.Sprintf("bot%d.toml", i)), stderr: &lockedBuffer{}, exited: make(chan error, 1)}
		os.WriteFile(r.cfg, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
%s
instance_id = "fault-%d"
poll = %q
[durability.inbox]
lease = %q
max_attempts = 100
[durability.outbox]
lease = %q
[admin]
token = %q
[[channels]]
id = "web"
type = "webchat"
rate_limit = 0
%s
`, module, testDataDir(), r.addr, k, i, faultPoll, faultLease, faultLease, killAdminToken, extra)), 0o600)
		r.cmd = exec.Command(bin, r.cfg)
		r.cmd.Stdout, r.cmd.Stderr = io.Discard, r.stderr
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.exited <- r.cmd.Wait() }()
		f.reps = append(f.reps, r)
	}
	t.Cleanup(f.close)
	for _, r := range f.reps {
		if err := waitHealthy(r.addr, 60*time.Second); err != nil {
			t.Fatalf("botrun did not come up: %v\n%s", err, f.logs())
		}
	}
	return f
}

// close stops the traffic and the processes still running.
func (f *faultFleet) close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
	for _, r := range f.reps {
		select {
		case err := <-r.exited:
			r.exited <- err
		default:
			r.cmd.Process.Signal(syscall.SIGTERM)
			r.exited <- <-r.exited
		}
	}
}

// logs is every replica's stderr.
func (f *faultFleet) logs() string {
	var b strings.Builder
	for i, r := range f.reps {
		fmt.Fprintf(&b, "--- replica %d\n%s", i, r.stderr)
	}
	return b.String()
}

// drive sends messages messages over 20 chats.
func (f *faultFleet) drive(messages int) {
	f.messages = messages
	const chats = 20
	for w := range 8 {
		f.wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				i := f.next.Add(1) - 1
				if i >= int64(messages) {
					return
				}
				text := fmt.Sprintf("msg-%d", i)
				c := (int(i) + w) % chats
				chat := fmt.Sprintf("chat-%d", c)
				try, stopped := c, false
				waitfor.Every(20*time.Millisecond, 10*time.Minute, func() bool {
					select {
					case <-f.stop:
						stopped = true
						return true
					default:
					}
					if deliverHonouring(client, f.reps[try%len(f.reps)].addr, text, chat, &f.ref) {
						return true
					}
					try++
					return false
				})
				if stopped {
					return
				}
				f.admitted.Store(text, chat)
				f.count.Add(1)
				time.Sleep(5 * time.Millisecond) // the traffic's pace
			}
		})
	}
}

// admittedMore waits until n more messages than at was admitted.
func (f *faultFleet) admittedMore(at, n int64, timeout time.Duration) bool {
	return waitfor.True(timeout, func() bool { return f.count.Load() >= at+n })
}

// finish waits for every message to be admitted and answered, checks that
// no process exited (service resumed without a restart), and audits the
// journal against the transcript: each message answered exactly once, no
// refusal without Retry-After, no request left unanswered past the
// client's timeout. The processes are stopped before the audit (the file
// journals are theirs alone).
func (f *faultFleet) finish() outcome {
	t := f.t
	t.Helper()
	if !waitfor.True(5*time.Minute, func() bool { return f.count.Load() == int64(f.messages) }) {
		t.Fatalf("%d of %d messages admitted after the last fault\n%s", f.count.Load(), f.messages, f.logs())
	}
	f.wg.Wait()
	first := f.reps[0]
	if !waitfor.Every(200*time.Millisecond, 3*time.Minute, func() bool { return settled(first.addr) }) {
		t.Fatalf("not settled after the last fault\n%s", f.logs())
	}
	for i, r := range f.reps {
		select {
		case err := <-r.exited:
			r.exited <- err
			t.Fatalf("replica %d exited during the test (%v): service must resume without a restart\n%s", i, err, f.logs())
		default:
		}
	}
	all := map[string]string{}
	f.admitted.Range(func(k, v any) bool { all[k.(string)] = v.(string); return true })
	replies := transcript(t, first.addr, all)
	for i, r := range f.reps {
		r.cmd.Process.Signal(syscall.SIGTERM)
		err := <-r.exited
		r.exited <- err
		if err != nil {
			t.Errorf("replica %d did not stop cleanly: %v", i, err)
		}
	}
	o := audit(t, f.bin, first.cfg, "webchat", replies, all)
	if o.lost+o.duplicated+o.ambiguous > 0 {
		t.Errorf("lost %d, duplicated %d, ambiguous %d; want 0, 0, 0", o.lost, o.duplicated, o.ambiguous)
	}
	if n := f.ref.without.Load(); n > 0 {
		t.Errorf("%d refusals without a Retry-After", n)
	}
	if n := f.ref.noAnswer.Load(); n > 0 {
		t.Errorf("%d deliveries got no answer within the client's 10 s timeout", n)
	}
	return o
}
