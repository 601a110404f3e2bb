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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/admin"
	"github.com/botrun/botrun/host/channel/leadertest"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/internal/faultnet"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// leaderLease is the session's lease in the failover test: a replica takes
// a dead leader's session over about this long after its last renewal.
const leaderLease = 1500 * time.Millisecond

const leaderAdminToken = "leader-test-admin-token"

// TestLeaderFailover runs three botrun replicas on one shared backend with
// a channel whose session only the leader may hold (session = "leader",
// the fake "leader-test" channel): only the leader connects, admits and
// sends; sends journaled on a standby (an operator's, through its admin
// API, and the replies of handlers it runs) are handed to the leader and
// delivered once, none dead, none charged as attempts for the standby's
// refusals. The leader is SIGKILLed while messages flow: another replica
// takes the session over within about one lease, and everything is
// delivered. In the "cut-off" runs the leader is not killed: its link to the
// database is blackholed (a TCP proxy drops its packets), so it cannot renew
// the session's lease; it must stop its session by its own clock before
// the lease expires (no two sessions ever overlap), another replica takes
// the session over, and once the link heals the old leader stands by.
func TestLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the leader failover test takes a while")
	}
	bin := buildBotrun(t, "botrun_testchannels") // with leadertest's "leader-test"
	module := wasmbuild.Go(t, "../../examples/echo")
	same := func(keys string) []string { return []string{keys, keys, keys} }
	t.Run("postgres", func(t *testing.T) {
		leaderFailover(t, bin, module, same(fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"lt%d_\"", testserver.Postgres(t), os.Getpid())), nil)
	})
	t.Run("redis", func(t *testing.T) {
		leaderFailover(t, bin, module, same(fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"lt%d\"", testserver.Redis(t), os.Getpid())), nil)
	})
	for _, backend := range []string{"postgres", "redis"} {
		t.Run(backend+"/cut-off", func(t *testing.T) {
			keys, proxies := proxied(t, backend, 3)
			leaderFailover(t, bin, module, keys, proxies)
		})
	}
}

// leaderFailover runs the test on three replicas, each on its [durability]
// keys; with proxies (each replica's link to the database) the leader is
// cut off instead of killed.
func leaderFailover(t *testing.T, bin, module string, backends []string, proxies []*faultnet.Proxy) {
	dir := t.TempDir()
	net := leadertest.NewNetwork()
	srv := httptest.NewServer(net)
	defer srv.Close()
	mk := func(i int, name string) *replica {
		return newReplica(t, dir, name, module, backends[i], fmt.Sprintf(`# Few retries: a send charged for a standby's refusals would soon be dead.
retries = 2
[admin]
token = %q
[[providers]]
id = "sess"
type = "leader-test"
url = %q
session = "leader"
session_lease = %q
`, leaderAdminToken, srv.URL, leaderLease))
	}
	replicas := []*replica{mk(0, "replica-a"), mk(1, "replica-b"), mk(2, "replica-c")}
	byPID := map[int]*replica{}
	for _, r := range replicas {
		r.start(t, bin)
		defer r.cmd.Process.Kill()
		byPID[r.cmd.Process.Pid] = r
	}
	// leader waits until a replica other than not holds the session.
	leader := func(not *replica) (*replica, int64) {
		t.Helper()
		var pid int
		var token int64
		if !waitfor.True(2*time.Minute, func() bool {
			pid, token = net.Holder()
			return pid != 0 && byPID[pid] != nil && byPID[pid] != not
		}) {
			t.Fatalf("no replica holds the session; sessions %+v", net.Sessions())
		}
		return byPID[pid], token
	}
	first, firstToken := leader(nil)
	var standby *replica
	for _, r := range replicas {
		if r != first {
			standby = r
			break
		}
	}
	statusLeader(t, bin, standby.cfg, first.name, firstToken)

	// Each message's reply key is "sess:<id>:1"; an operator's send's key
	// is its own.
	var keys []string
	exact := map[string]bool{} // keys no kill touched: one call each
	push := func(batch string, n int, untouched bool) {
		for i := range n {
			id := fmt.Sprintf("%s-%d", batch, i)
			net.Push(leadertest.Message{ID: id, Chat: fmt.Sprintf("chat-%d", i%4), Text: id})
			keys = append(keys, "sess:"+id+":1")
			exact["sess:"+id+":1"] = untouched
		}
	}
	sendOn := func(r *replica, batch string, n int, untouched bool) {
		for i := range n {
			key := fmt.Sprintf("op-%s-%d", batch, i)
			adminSend(t, r, key, fmt.Sprintf("chat-%d", i%4), key)
			keys = append(keys, key)
			exact[key] = untouched
		}
	}
	waitDelivered := func(what string) {
		t.Helper()
		missing := 0
		if !waitfor.Every(20*time.Millisecond, 2*time.Minute, func() bool {
			missing = 0
			for _, k := range keys {
				if _, ok := net.Delivered(k); !ok {
					missing++
				}
			}
			return missing == 0
		}) {
			t.Fatalf("%s: %d of %d sends never delivered; sessions %+v", what, missing, len(keys), net.Sessions())
		}
	}

	// 1. Messages through the leader's session, and an operator's sends
	// journaled on a standby.
	push("m1", 12, true)
	sendOn(standby, "s1", 12, true)
	waitDelivered("before the kill")

	// 2. More of both; the leader is SIGKILLed while they flow.
	before := len(keys)
	push("m2", 16, false)
	sendOn(standby, "s2", 8, false)
	if !waitfor.True(time.Minute, func() bool {
		delivered := 0
		for _, k := range keys[before:] {
			if _, ok := net.Delivered(k); ok {
				delivered++
			}
		}
		return delivered >= 4
	}) {
		t.Fatal("nothing of the second batch was delivered")
	}
	var heal func()
	if proxies == nil {
		first.cmd.Process.Signal(syscall.SIGKILL)
	} else {
		p := proxies[slices.Index(replicas, first)]
		p.Blackhole()
		heal = p.Heal
	}
	killed := time.Now()
	if heal == nil {
		first.cmd.Wait()
	}
	second, secondToken := leader(first)
	takeover := time.Since(killed)
	if secondToken <= firstToken {
		t.Errorf("the new leader's token %d is not greater than the dead one's %d", secondToken, firstToken)
	}
	var last *replica // the standby after the failover
	for _, r := range replicas {
		if r != first && r != second {
			last = r
		}
	}

	// 3. After the failover: the new leader admits and sends, and the
	// remaining standby hands its operator's sends to it.
	push("m3", 8, true)
	sendOn(last, "s3", 8, true)
	waitDelivered("after the failover")
	alive := []*replica{second, last}
	if heal != nil {
		// The old leader's link heals: it stands by, and the session
		// stays where it is.
		heal()
		alive = append(alive, first)
		push("m4", 8, true)
		waitDelivered("after the link healed")
		if pid, _ := net.Holder(); byPID[pid] != second {
			t.Errorf("the session moved after the old leader's link healed: held by pid %d", pid)
		}
	}
	pushed := 12 + 16 + 8
	if heal != nil {
		pushed += 8
	}
	waitSettled(t, bin, second.cfg, pushed, 2*time.Minute)
	// The sends settle too: one the dead leader delivered but did not mark
	// may be claimed first by the standby, which hands it back to wait for
	// the new leader's sweep (ProviderNotLeader, a short retry).
	var unsent []string
	if !waitfor.Every(200*time.Millisecond, 2*time.Minute, func() bool {
		unsent = nil
		for _, r := range list[cliRecord](t, bin, second.cfg, "outbox") {
			if r.State != string(durability.OutboxSent) {
				unsent = append(unsent, fmt.Sprintf("%s is %s (%s)", r.Key, r.State, r.Error))
			}
		}
		return len(unsent) == 0
	}) {
		t.Fatalf("sends not sent after 2 minutes: %v", unsent)
	}
	statusLeader(t, bin, last.cfg, second.name, secondToken)

	for _, r := range alive {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.cmd.Wait()
	}
	outbox := list[cliRecord](t, bin, second.cfg, "outbox")
	byKey := map[string]cliRecord{}
	for _, r := range outbox {
		byKey[r.Key] = r
		if r.State != string(durability.OutboxSent) {
			t.Errorf("send %s is %s (%s), want sent", r.Key, r.State, r.Error)
		}
	}
	texts := net.Texts()
	for _, k := range keys {
		rec, ok := byKey[k]
		pid, delivered := net.Delivered(k)
		calls := net.Calls(k)
		switch {
		case !ok:
			t.Errorf("%s was never journaled", k)
		case !delivered:
			t.Errorf("%s was never delivered", k)
		case byPID[pid] == nil:
			t.Errorf("%s delivered by an unknown process %d", k, pid)
		case exact[k] && (calls != 1 || rec.Attempts != 1):
			// A kill could not touch it: one call, and the refusals of
			// the standbys are not attempts.
			t.Errorf("%s: %d calls and %d attempts, want one of each", k, calls, rec.Attempts)
		case rec.Attempts > calls+1:
			t.Errorf("%s: %d attempts for %d calls: a refusal was charged", k, rec.Attempts, calls)
		}
		if want := k; strings.HasPrefix(k, "sess:") {
			want = "echo: " + strings.TrimSuffix(strings.TrimPrefix(k, "sess:"), ":1")
			if texts[k] != want {
				t.Errorf("%s delivered %q, want %q", k, texts[k], want)
			}
		} else if texts[k] != want {
			t.Errorf("%s delivered %q", k, texts[k])
		}
	}
	if s := net.Strays(); len(s) != 0 {
		t.Errorf("a process without the session called the channel: %v", s)
	}
	if n := net.Overlaps(); n != 0 {
		t.Errorf("%d sessions connected while another was", n)
	}
	refused := 0
	for _, r := range []*replica{second, last} {
		if m := regexp.MustCompile(`provider_not_leader=(\d+)`).FindStringSubmatch(r.stderr.String()); m != nil {
			n, _ := strconv.Atoi(m[1])
			refused += n
		}
	}
	if refused == 0 {
		t.Error("no standby counted a ProviderNotLeader refusal")
	}
	how := "SIGKILL"
	if heal != nil {
		how = "leader's link was blackholed"
	}
	fmt.Printf("leader failover: lease %s, the session taken over %s after the %s (%s → %s); %d sends, %d refused on standbys, sessions %d, overlapping %d\n",
		leaderLease, takeover.Round(10*time.Millisecond), how, first.name, second.name, len(keys), refused, len(net.Sessions()), net.Overlaps())
}

// adminSend journals a send on replica r through its admin API.
func adminSend(t *testing.T, r *replica, key, chat, text string) {
	t.Helper()
	body, _ := json.Marshal(admin.SendBody{Provider: "sess", Chat: chat, Text: text, Key: key})
	req, _ := http.NewRequest("POST", "http://"+r.addr+"/admin/send", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+leaderAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /admin/send to %s: %v", r.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /admin/send to %s: HTTP %d", r.name, resp.StatusCode)
	}
}

// statusLeader checks that botrun status names leader, with token, as the
// session's leader, in JSON and in its table.
func statusLeader(t *testing.T, bin, cfg, leader string, token int64) {
	t.Helper()
	var st struct {
		Sessions []ops.SessionStatus
		Replicas []ops.ReplicaStatus
	}
	out, err := exec.Command(bin, "status", "-c", cfg, "--json").Output()
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("botrun status --json: %v\n%s", err, out)
	}
	// A loaded machine may make the leader miss a renewal and take its
	// session again under a new token: the token only grows.
	if len(st.Sessions) != 1 || st.Sessions[0].Provider != "sess" || st.Sessions[0].Leader != leader || st.Sessions[0].Token < token {
		t.Fatalf("botrun status: sessions %+v, want sess led by %s with token %d or later", st.Sessions, leader, token)
	}
	token = st.Sessions[0].Token
	led := false
	for _, r := range st.Replicas {
		led = led || r.Owner == leader && len(r.Leads) == 1 && r.Leads[0] == "sess"
	}
	if !led {
		t.Fatalf("botrun status: replicas %+v, want %s leading sess", st.Replicas, leader)
	}
	table, err := exec.Command(bin, "status", "-c", cfg).Output()
	if err != nil || !regexp.MustCompile(`(?m)^sess\s+`+regexp.QuoteMeta(leader)+`\s+`+strconv.FormatInt(token, 10)+`\s`).Match(table) {
		t.Fatalf("botrun status: %v\n%s", err, table)
	}
}
