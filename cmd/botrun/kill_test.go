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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/waitfor"
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
	// dedupe makes it honour the Idempotency-Key header: a repeated key is
	// answered with the first answer and not sent again.
	dedupe bool
	keys   map[string]string
	// repeats counts the sends it answered from keys.
	repeats int
	// chats lists each chat's delivered texts in the order they arrived.
	chats map[string][]string
	// arrived counts, per chat, the sends that reached it, before their
	// delay.
	arrived map[string]int
}

// arrivals is the number of sends to the chats whose name starts with
// prefix that reached the gateway so far, answered or not yet.
func (g *gateway) arrivals(prefix string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for chat, c := range g.arrived {
		if strings.HasPrefix(chat, prefix) {
			n += c
		}
	}
	return n
}

func (g *gateway) sends() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The sender was killed while it wrote the body: nobody reads an
		// answer, and a cut body is not a bad signature.
		return
	}
	var peek httpchan.Outbound
	json.Unmarshal(body, &peek)
	g.mu.Lock()
	if g.arrived == nil {
		g.arrived = map[string]int{}
	}
	g.arrived[peek.Chat]++
	g.mu.Unlock()
	// The slow channel under test, not a wait.
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
	key := r.Header.Get(httpchan.IdempotencyKeyHeader)
	g.mu.Lock()
	defer g.mu.Unlock()
	if answer, ok := g.keys[key]; ok && g.dedupe && key != "" {
		g.repeats++
		fmt.Fprint(w, answer)
		return
	}
	g.texts[out.Chat+"|"+out.Text]++
	if g.chats == nil {
		g.chats = map[string][]string{}
	}
	g.chats[out.Chat] = append(g.chats[out.Chat], out.Text)
	g.n++
	answer := fmt.Sprintf(`{"id":"%d"}`, g.n)
	if g.keys == nil {
		g.keys = map[string]string{}
	}
	g.keys[key] = answer
	fmt.Fprint(w, answer)
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// bins are the botrun binaries built so far, by build tags, in dir (which
// TestMain removes): linking botrun takes seconds, once per test binary is
// enough.
var bins struct {
	sync.Mutex
	dir    string
	byTags map[string]string
}

// buildBotrun builds botrun, with the build tags given (botrun_testchannels
// adds the test channels), once per test binary.
func buildBotrun(t *testing.T, tags ...string) string {
	t.Helper()
	bins.Lock()
	defer bins.Unlock()
	key := strings.Join(tags, ",")
	if bin, ok := bins.byTags[key]; ok {
		return bin
	}
	if bins.dir == "" {
		dir, err := os.MkdirTemp("", "botrun-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		bins.dir, bins.byTags = dir, map[string]string{}
	}
	bin := filepath.Join(bins.dir, fmt.Sprintf("botrun-%d", len(bins.byTags)))
	if out, err := exec.Command("go", "build", "-tags", key, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bins.byTags[key] = bin
	return bin
}

// removeBins removes the binaries buildBotrun built.
func removeBins() {
	bins.Lock()
	defer bins.Unlock()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
}

// startBotrun starts botrun on cfgPath and waits until it answers /healthz
// at addr.
func startBotrun(t *testing.T, bin, cfgPath, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, cfgPath)
	cmd.Stderr, cmd.Stdout = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := waitHealthy(addr, 60*time.Second); err != nil {
		cmd.Process.Kill()
		t.Fatalf("botrun did not come up within 60 s: %v", err)
	}
	return cmd
}

// TestSIGKILL runs botrun as a child process on each backend, drives traffic
// over many chats, SIGKILLs it at seeded random moments and restarts it, then
// checks that every admitted message was handled and no reply went out twice
// except the sends the journal counts as ambiguous. On the signed HTTP
// channel with a gateway that does not deduplicate, a crash between the
// gateway's answer and the record leaves a send ambiguous (skip: it may be
// lost). On webchat (delivery and record commit together) and on the HTTP
// channel with a gateway that deduplicates on Idempotency-Key (dedupes =
// true), nothing is lost, doubled or ambiguous. Two processes sharing one
// events journal (shared = true) are SIGKILLed in turn, with the same audit.
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SIGKILL test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	t.Run("http/sqlite", func(t *testing.T) {
		sigkill(t, bin, module, killRun{channel: "http", backend: "sqlite", messages: 400, replicas: 1})
	})
	var repeats, closedRuns atomic.Int64
	// The runs wait on kills and restarts more than they compute: two at a
	// time (go test's -parallel is the core count).
	t.Run("closed", func(t *testing.T) {
		for _, channel := range []string{"webchat", "http-dedupe"} {
			for _, backend := range []string{"sqlite", "file", "events", "postgres", "redis", "redis-cluster"} {
				t.Run(channel+"/"+backend, func(t *testing.T) {
					t.Parallel()
					o := sigkill(t, bin, module, killRun{channel: channel, backend: backend, messages: 200, replicas: 1})
					if o.lost+o.duplicated+o.ambiguous > 0 {
						t.Errorf("%s on %s: lost %d, duplicated %d, ambiguous %d; the channel closes the window: want 0, 0, 0", channel, backend, o.lost, o.duplicated, o.ambiguous)
					}
					repeats.Add(int64(o.repeats))
					closedRuns.Add(1)
				})
			}
		}
	})
	// Two processes on one shared events journal, SIGKILLed in turn: the
	// window is open on http without dedupe (only the sends counted
	// ambiguous may be lost), closed on webchat.
	t.Run("shared", func(t *testing.T) {
		for _, channel := range []string{"http", "webchat"} {
			t.Run(channel+"/events-shared", func(t *testing.T) {
				t.Parallel()
				// Paced over the kills, with slow gateway sends: kills
				// land in sends of both processes.
				o := sigkill(t, bin, module, killRun{channel: channel, backend: "events-shared", messages: 200, replicas: 2,
					pace: 600 * time.Millisecond, delay: 150 * time.Millisecond})
				if channel == "http" && o.takenOver == 0 {
					t.Error("no record was taken over after a kill: the run did not exercise a crash")
				}
				if channel == "webchat" && o.lost+o.duplicated+o.ambiguous > 0 {
					t.Errorf("webchat on a shared events journal: lost %d, duplicated %d, ambiguous %d; want 0, 0, 0", o.lost, o.duplicated, o.ambiguous)
				}
			})
		}
	})
	// The kills left sends in flight that botrun sent again under their
	// key: the gateway's deduplication, not luck, kept them single.
	if closedRuns.Load() > 0 && repeats.Load() == 0 {
		t.Error("no send reached the deduplicating gateway twice: the runs did not exercise the ambiguous window")
	}
}

// backendKeys are the [durability] keys of a backend for a run in dir.
func backendKeys(t *testing.T, backend, dir string) string {
	switch backend {
	case "sqlite":
		return fmt.Sprintf("backend = \"sqlite\"\npath = %q", filepath.Join(dir, "bot.db"))
	case "file":
		return fmt.Sprintf("backend = \"file\"\npath = %q", filepath.Join(dir, "bot.journal"))
	case "events":
		return fmt.Sprintf("backend = \"events\"\npath = %q", filepath.Join(dir, "events.json"))
	case "events-shared":
		return fmt.Sprintf("backend = \"events\"\npath = %q\nshared = true", filepath.Join(dir, "events.json"))
	case "postgres":
		return fmt.Sprintf("backend = \"postgres\"\nurl = %q\ntable_prefix = \"kill%d_%d_\"", testserver.Postgres(t), os.Getpid(), runs.Add(1))
	case "redis":
		return fmt.Sprintf("backend = \"redis\"\nurl = %q\nprefix = \"kill%d_%d\"", testserver.Redis(t), os.Getpid(), runs.Add(1))
	case "redis-cluster":
		return fmt.Sprintf("backend = \"redis\"\ncluster = %s\nprefix = \"kill%d_%d\"", tomlStrings(testserver.RedisCluster(t)), os.Getpid(), runs.Add(1))
	}
	t.Fatalf("unknown backend %s", backend)
	return ""
}

var runs atomic.Int64

// tomlStrings is ss as a TOML array of strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// killReplica is one botrun process of a SIGKILL run.
type killReplica struct {
	addr, cfg string
	cmd       *exec.Cmd
}

// killRun is one SIGKILL run: messages over channel, through replicas
// botrun processes on backend.
type killRun struct {
	channel, backend   string
	messages, replicas int
	// pace is the longest pause between a traffic worker's messages
	// (default 5ms), delay the gateway's time per send.
	pace, delay time.Duration
}

// sigkill drives the run's messages through its botrun processes on one
// backend, each chat routed to one of them (to another while it is down),
// SIGKILLs them in turn at seeded random moments and restarts them, then
// audits the journal against the channel.
func sigkill(t *testing.T, bin, module string, run killRun) outcome {
	channel, backend, messages, replicas := run.channel, run.backend, run.messages, run.replicas
	if run.pace == 0 {
		run.pace = 5 * time.Millisecond
	}
	dir := t.TempDir()
	gw := &gateway{texts: map[string]int{}, dedupe: channel == "http-dedupe", delay: run.delay}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	entry := fmt.Sprintf("id = \"gw\"\ntype = \"http\"\nurl = %q\nsecret = %q\ndedupes = %v", gwSrv.URL, killSecret, gw.dedupe)
	if channel == "webchat" {
		entry = "id = \"web\"\ntype = \"webchat\"\nrate_limit = 0"
	}
	keys := backendKeys(t, backend, dir)
	reps := make([]*killReplica, replicas)
	for i := range reps {
		r := &killReplica{addr: freePort(t), cfg: filepath.Join(dir, fmt.Sprintf("bot%d.toml", i))}
		os.WriteFile(r.cfg, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 8
data_dir = %q
[http]
listen = %q
[durability]
%s
instance_id = "kill-test-%d"
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
%s
`, module, testDataDir(), r.addr, keys, i, killAdminToken, entry)), 0o644)
		reps[i] = r
	}

	// make test kills each run's processes 10 times (14 runs: 140 kills);
	// make soak 20 times.
	const chats = 40
	kills := 10
	if os.Getenv("BOTRUN_SOAK") != "" {
		kills = 20
	}
	rng := rand.New(rand.NewPCG(20261129, uint64(len(channel+backend))))
	var admitted sync.Map // text -> chat
	var next atomic.Int64
	stopTraffic := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for {
				i := next.Add(1) - 1
				if i >= int64(messages) {
					return
				}
				text := fmt.Sprintf("msg-%d", i)
				c := (int(i) + w) % chats
				chat := fmt.Sprintf("chat-%d", c)
				// The chat's replica first, then the next: the channel
				// redelivers, as a load balancer would, until one is up.
				try, stopped := c, false
				waitfor.Every(20*time.Millisecond, 10*time.Minute, func() bool {
					select {
					case <-stopTraffic:
						stopped = true
						return true
					default:
					}
					if deliver(client, reps[try%replicas].addr, channel, text, chat) {
						admitted.Store(text, chat)
						return true
					}
					try++
					return false
				})
				if stopped {
					return
				}
				// The traffic's shape: messages at random intervals.
				time.Sleep(rand.N(run.pace))
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

	for _, r := range reps {
		r.cmd = startBotrun(t, bin, r.cfg, r.addr)
	}
	for k := range kills {
		r := reps[k%replicas]
		// The crash point under test: a seeded random moment.
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		r.cmd.Process.Signal(syscall.SIGKILL)
		r.cmd.Wait()
		// The last restart lets everything through, then stops gracefully.
		r.cmd = startBotrun(t, bin, r.cfg, r.addr)
	}
	wg.Wait()
	// Generous: on a loaded machine the sends the kills left in flight wait
	// out their leases and backoffs before the last run settles them.
	first := reps[0]
	n := 0
	if !waitfor.Every(200*time.Millisecond, 5*time.Minute, func() bool {
		n = 0
		admitted.Range(func(_, _ any) bool { n++; return true })
		return n == messages && settled(first.addr)
	}) {
		for _, r := range reps {
			r.cmd.Process.Kill()
		}
		t.Fatalf("not settled after the last restart (%d of %d admitted)", n, messages)
	}
	all := map[string]string{}
	admitted.Range(func(k, v any) bool { all[k.(string)] = v.(string); return true })
	delivered := gw.delivered
	if channel == "webchat" {
		delivered = transcript(t, first.addr, all)
	}
	for _, r := range reps {
		r.cmd.Process.Signal(syscall.SIGTERM)
		r.cmd.Wait()
	}

	o := audit(t, bin, first.cfg, channel, delivered, all)
	gw.mu.Lock()
	o.repeats = gw.repeats
	gw.mu.Unlock()
	if gw.bad > 0 {
		t.Errorf("the gateway saw %d sends with a bad signature", gw.bad)
	}
	t.Logf("%s/%s: replicas %d, kills %d, messages %d, handled %d (%d more than once), lost %d, duplicated %d, ambiguous %d, repeated keys %d",
		channel, backend, replicas, kills, messages, o.handled, o.takenOver, o.lost, o.duplicated, o.ambiguous, o.repeats)
	fmt.Printf("SIGKILL %s/%s (%d replicas): kills %d, messages %d, lost %d, duplicated %d, ambiguous %d, repeated keys %d\n",
		channel, backend, replicas, kills, messages, o.lost, o.duplicated, o.ambiguous, o.repeats)
	return o
}

// deliver sends one inbound message to the running bot on channel, and
// reports whether it was admitted.
func deliver(client *http.Client, addr, channel, text, chat string) bool {
	var req *http.Request
	if channel == "webchat" {
		body, _ := json.Marshal(map[string]string{"id": text, "chat": chat, "from": "u", "text": text})
		req, _ = http.NewRequest("POST", "http://"+addr+"/webchat/web/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	} else {
		body, _ := json.Marshal(httpchan.Inbound{ID: text, Chat: chat, From: "u", Text: text})
		req, _ = http.NewRequest("POST", "http://"+addr+"/webhooks/gw", bytes.NewReader(body))
		httpchan.SignRequest(req.Header, []byte(killSecret), body, time.Now())
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 202 || resp.StatusCode == 200
}

// transcript counts the replies in the running bot's webchat transcript, per
// "chat|text", for the chats of admitted.
func transcript(t *testing.T, addr string, admitted map[string]string) func(reply string) int {
	counts := map[string]int{}
	seen := map[string]bool{}
	for _, chat := range admitted {
		if seen[chat] {
			continue
		}
		seen[chat] = true
		for after := int64(0); ; {
			resp, err := http.Get(fmt.Sprintf("http://%s/webchat/web/messages?chat=%s&after=%d", addr, chat, after))
			if err != nil {
				t.Fatalf("reading the transcript of %s: %v", chat, err)
			}
			var page struct {
				Messages []struct {
					Seq  int64
					Text string
				}
			}
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("reading the transcript of %s: HTTP %d, %v", chat, resp.StatusCode, err)
			}
			if len(page.Messages) == 0 {
				break
			}
			for _, m := range page.Messages {
				counts[chat+"|"+m.Text]++
				after = m.Seq
			}
		}
	}
	return func(reply string) int { return counts[reply] }
}

// delivered counts what the gateway accepted, per "chat|text".
func (g *gateway) delivered(reply string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.texts[reply]
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

// cliRecord is an inbox or outbox record as botrun's --json prints it:
// times in RFC 3339, a JSON payload as JSON.
type cliRecord struct {
	ID, Key, Provider, Chat, Owner, Ref, Error string
	State                                      string
	Attempts                                   int
	Payload                                    json.RawMessage
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
	// repeats are the sends a deduplicating gateway answered from its keys.
	repeats int
}

// audit checks every admitted message (text -> chat) against the journal, read
// through the CLI, and the channel's count of each reply: each was handled,
// and its reply went out exactly once unless the journal counts that send
// ambiguous (unknown).
func audit(t *testing.T, bin, cfg, channel string, delivered func(reply string) int, admitted map[string]string) outcome {
	t.Helper()
	var o outcome
	prefix := "gw:"
	if channel == "webchat" {
		prefix = "web:"
	}
	done := map[string]bool{}
	for _, r := range list[cliRecord](t, bin, cfg, "inbox") {
		done[r.ID] = r.State == string(durability.InboxDone)
		if r.Attempts > 1 {
			o.takenOver++
		}
	}
	unknown := map[string]bool{}
	for _, r := range list[cliRecord](t, bin, cfg, "outbox") {
		if r.State == string(durability.OutboxUnknown) {
			var m struct{ Text string }
			json.Unmarshal(r.Payload, &m)
			unknown[r.Chat+"|"+m.Text] = true
		}
	}
	o.ambiguous = len(unknown)
	for text, chat := range admitted {
		if done[prefix+text] {
			o.handled++
		} else {
			t.Errorf("admitted %s was not handled", text)
		}
		reply := chat + "|echo: " + text
		n := delivered(reply)
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

// TestSIGKILLBroadcast: an operator broadcasts to 1,000 chats through the
// admin API of a bot that is SIGKILLed again and again while it delivers
// (and while the broadcast is journaled: the operator posts it again until
// it is accepted). After the last restart every chat has exactly one copy;
// only the sends the journal counts ambiguous may be missing (skip).
func TestSIGKILLBroadcast(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the SIGKILL test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) { sigkillBroadcast(t, bin, module, backend) })
	}
}

func sigkillBroadcast(t *testing.T, bin, module, backend string) {
	dir := t.TempDir()
	gw := &gateway{texts: map[string]int{}, delay: time.Millisecond}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	addr := freePort(t)
	cfgPath := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
[bot]
module = %q
workers = 16
data_dir = %q
[http]
listen = %q
[durability]
%s
instance_id = "kill-test"
poll = "50ms"
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
`, module, testDataDir(), addr, backendKeys(t, backend, dir), killAdminToken, gwSrv.URL, killSecret)), 0o644)

	const chats, kills = 1000, 10
	fans := make([]string, chats)
	for i := range fans {
		fans[i] = fmt.Sprintf("fan-%d", i)
	}
	body, _ := json.Marshal(map[string]any{"provider": "gw", "chats": fans, "text": "news", "key_prefix": "news:1"})
	start := func() *exec.Cmd { return startBotrun(t, bin, cfgPath, addr) }
	// post sends the broadcast until the running bot accepts it, or its
	// process ends.
	post := func(done <-chan struct{}) bool {
		for {
			req, _ := http.NewRequest("POST", "http://"+addr+"/admin/broadcast", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+killAdminToken)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					return true
				}
			}
			select {
			case <-done:
				return false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	rng := rand.New(rand.NewPCG(20261202, uint64(len(backend))))
	var accepted atomic.Bool
	for range kills {
		cmd := start()
		done := make(chan struct{})
		posted := make(chan struct{})
		go func() {
			defer close(posted)
			if !accepted.Load() && post(done) {
				accepted.Store(true)
			}
		}()
		// The crash point under test: a seeded random moment.
		time.Sleep(time.Duration(30+rng.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		close(done)
		<-posted
	}
	cmd := start()
	if !post(make(chan struct{})) { // accepted or not before, once more: journals only the missing chats
		t.Fatal("the broadcast was never accepted")
	}
	if !waitfor.Every(200*time.Millisecond, 120*time.Second, func() bool { return settled(addr) }) {
		cmd.Process.Kill()
		t.Fatal("not settled after the last restart")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()

	unknown := map[string]bool{}
	journaled := 0
	for _, r := range list[cliRecord](t, bin, cfgPath, "outbox") {
		if strings.HasPrefix(r.Key, "news:1:") {
			journaled++
		}
		if r.State == string(durability.OutboxUnknown) {
			unknown[r.Chat] = true
		}
	}
	if journaled != chats {
		t.Fatalf("%d broadcast sends journaled, want %d", journaled, chats)
	}
	lost, doubled := 0, 0
	for _, chat := range fans {
		n := gw.delivered(chat + "|news")
		switch {
		case n == 1:
		case n == 0 && unknown[chat]:
			lost++
		case n > 1 && unknown[chat]:
			doubled++
		default:
			t.Errorf("chat %s got %d copies and its send is not counted ambiguous", chat, n)
		}
	}
	fmt.Printf("SIGKILL broadcast %s: kills %d, chats %d, lost %d, doubled %d, ambiguous %d\n", backend, kills, chats, lost, doubled, len(unknown))
}
