package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestCoordination (issue 19, item 4) runs three botrun replicas with
// [durability] coordination on one PostgreSQL, Redis or Redis Cluster,
// behind a round-robin balancer: every message of a chat may reach any
// replica. Each chat runs the flow example's signup twice, so every
// conversation spans replicas. Mid-traffic one replica is SIGKILLed and
// another frozen (SIGSTOP) past its leases, then thawed. Afterwards every chat got exactly its replies, once
// each and in order (the gateway deduplicates on Idempotency-Key, so no send
// is ambiguous).
func TestCoordination(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the coordination test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/flow")
	t.Run("postgres", func(t *testing.T) {
		coordination(t, bin, module, fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"co%d_\"", testserver.Postgres(t), os.Getpid()))
	})
	t.Run("redis", func(t *testing.T) {
		coordination(t, bin, module, fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"co%d\"", testserver.Redis(t), os.Getpid()))
	})
	t.Run("redis-cluster", func(t *testing.T) {
		coordination(t, bin, module, fmt.Sprintf("backend = \"redis\"\ncluster = %s\nprefix = \"co%d\"", tomlStrings(testserver.RedisCluster(t)), os.Getpid()))
	})
}

// balancer sends each message to the next replica in turn; a replica that
// is down or does not answer is skipped, as a balancer's health check would.
type balancer struct {
	replicas []*replica
	next     atomic.Int64
	mu       sync.Mutex
	down     map[string]bool
}

func (lb *balancer) setDown(r *replica, down bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.down[r.name] = down
}

func (lb *balancer) isDown(r *replica) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.down[r.name]
}

// deliver posts one message until a replica admits it.
func (lb *balancer) deliver(id, chat, text string) bool {
	body, _ := json.Marshal(httpchan.Inbound{ID: id, Chat: chat, From: "u", Text: text})
	return waitfor.Every(20*time.Millisecond, 5*time.Minute, func() bool {
		r := lb.replicas[int(lb.next.Add(1))%len(lb.replicas)]
		if lb.isDown(r) {
			return false
		}
		req, _ := http.NewRequest("POST", "http://"+r.addr+"/webhooks/gw", bytes.NewReader(body))
		httpchan.SignRequest(req.Header, []byte(killSecret), body, time.Now())
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 202 || resp.StatusCode == 200
	})
}

func coordination(t *testing.T, bin, module, backend string) {
	dir := t.TempDir()
	gw := &gateway{texts: map[string]int{}, dedupe: true, delay: 5 * time.Millisecond}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	lb := &balancer{down: map[string]bool{}}
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		r := newReplica(t, dir, name, module, backend+"\ncoordination = true",
			fmt.Sprintf("[[providers]]\nid = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\ndedupes = true\n", gwSrv.URL, killSecret))
		r.start(t, bin)
		defer r.cmd.Process.Kill()
		lb.replicas = append(lb.replicas, r)
	}
	a, b, c := lb.replicas[0], lb.replicas[1], lb.replicas[2]

	const chats = 30
	script := func(chat int) (msgs, replies []string) {
		for round := range 2 {
			name, city := fmt.Sprintf("n%d-%d", chat, round), fmt.Sprintf("c%d-%d", chat, round)
			msgs = append(msgs, "/signup", name, city)
			replies = append(replies, "What is your name?", "Nice to meet you, "+name+"!",
				"Which city do you live in, "+name+"?", "Thanks "+name+" from "+city+"!")
		}
		return msgs, replies
	}
	var wg sync.WaitGroup
	for i := range chats {
		wg.Go(func() {
			msgs, _ := script(i)
			for n, text := range msgs {
				if !lb.deliver(fmt.Sprintf("m%d-%d", i, n), fmt.Sprint("chat-", i), text) {
					t.Errorf("chat-%d message %d was never admitted", i, n)
					return
				}
			}
		})
	}
	waitSends := func(n int) {
		if !waitfor.True(5*time.Minute, func() bool { return gw.sends() >= n }) {
			t.Fatalf("the gateway got %d sends in 5 minutes, want %d", gw.sends(), n)
		}
	}
	waitSends(30)
	lb.setDown(a, true)
	a.cmd.Process.Signal(syscall.SIGKILL) // in the middle of turns
	a.cmd.Wait()
	waitSends(90)
	lb.setDown(b, true)
	b.cmd.Process.Signal(syscall.SIGSTOP)
	// The freeze under test: longer than its 1.5 s leases.
	time.Sleep(3 * time.Second)
	b.cmd.Process.Signal(syscall.SIGCONT)
	lb.setDown(b, false)
	wg.Wait()
	waitSettled(t, bin, c.cfg, chats*6, 5*time.Minute)
	for _, r := range []*replica{b, c} {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.cmd.Wait()
	}

	outbox, _ := exec.Command(bin, "outbox", "list", "-c", c.cfg, "--json").Output()
	inbox, _ := exec.Command(bin, "inbox", "list", "-c", c.cfg, "--json").Output()
	gw.mu.Lock()
	defer gw.mu.Unlock()
	bad := 0
	for i := range chats {
		_, want := script(i)
		got := gw.chats[fmt.Sprint("chat-", i)]
		if strings.Join(got, " | ") != strings.Join(want, " | ") {
			bad++
			t.Errorf("chat-%d got\n  %q\nwant\n  %q\nits records in the replicas' logs:\n%s\nin the journals:\n%s", i, got, want, logLines(lb.replicas, fmt.Sprintf("gw:m%d-", i)), records(inbox, outbox, fmt.Sprint("chat-", i)))
		}
	}
	// A send the gateway answered from its keys is one a replica sent again:
	// an ambiguous send settled by resending (counted), or a frozen
	// replica's call that was already on the wire when it stopped (counted
	// among its stale leases). Nothing else may repeat a key.
	counted := 0
	for _, r := range []*replica{b, c} {
		for _, name := range []string{"outbox_ambiguous_resolved", "stale_leases"} {
			if m := regexp.MustCompile(name + `=(\d+)`).FindStringSubmatch(r.stderr.String()); m != nil {
				n, _ := strconv.Atoi(m[1])
				counted += n
			}
		}
	}
	if gw.repeats > counted {
		t.Errorf("the gateway answered %d repeated keys, more than the %d resends and stale leases the replicas counted", gw.repeats, counted)
	}
	if gw.bad > 0 {
		t.Errorf("the gateway refused %d sends with a bad signature", gw.bad)
	}
	fmt.Printf("coordination: %d chats x 6 messages over 3 replicas (one SIGKILLed, one SIGSTOPped): %d chats wrong, %d repeated sends answered by the gateway\n", chats, bad, gw.repeats)
}

// records returns the journals' records of chat, one per line.
func records(inbox, outbox []byte, chat string) string {
	var recs []map[string]any
	var ins, outs []map[string]any
	json.Unmarshal(inbox, &ins)
	json.Unmarshal(outbox, &outs)
	recs = append(ins, outs...)
	var out []string
	for _, r := range recs {
		if r["chat"] == chat {
			delete(r, "payload")
			b, _ := json.Marshal(r)
			out = append(out, string(b))
		}
	}
	return strings.Join(out, "\n")
}

// logLines returns the replicas' log lines that mention substr.
func logLines(replicas []*replica, substr string) string {
	var out []string
	for _, r := range replicas {
		for _, l := range strings.Split(r.stderr.String(), "\n") {
			if strings.Contains(l, substr) {
				out = append(out, r.name+": "+l)
			}
		}
	}
	return strings.Join(out, "\n")
}
