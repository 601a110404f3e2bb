package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/wasm"
)

// gate is a handler that blocks every event until open is closed, and counts
// the runs of each event.
type gate struct {
	started chan string
	open    chan struct{}
	mu      sync.Mutex
	runs    map[string]int
}

func newGate() *gate {
	return &gate{started: make(chan string, 1000), open: make(chan struct{}), runs: map[string]int{}}
}

func (g *gate) handler() Guest {
	return native(func(ctx context.Context, ev abi.Event, _ wasm.Env) error {
		g.started <- ev.ID
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
		g.runs[ev.ID]++
		g.mu.Unlock()
		return nil
	})
}

func (g *gate) ran(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runs[id]
}

// TestAdmissionQueueBounded: with both workers busy, a flood of webhooks
// past bot.max_queue is answered 503 with Retry-After and nothing is
// journaled for the refused messages; every admitted one is handled, and the
// refused ones are handled once the channel redelivers them.
func TestAdmissionQueueBounded(t *testing.T) {
	const maxQueue, flood = 5, 40
	cfg := testConfig(t, "")
	cfg.Bot.MaxQueue = maxQueue // workers = 2
	g := newGate()
	b := webchatBot(t, cfg, g.handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, ln)
	post := func(id string) (int, string) {
		body, _ := json.Marshal(map[string]string{"chat": "chat-" + id, "from": "u", "text": "hi", "id": id})
		resp, err := http.Post("http://"+ln.Addr().String()+"/webchat/web/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	// Two messages occupy both workers.
	for _, id := range []string{"m0", "m1"} {
		if code, _ := post(id); code != http.StatusAccepted {
			t.Fatalf("%s: %d, want 202", id, code)
		}
		<-g.started
	}
	// The flood, all at once.
	codes := make([]int, flood)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() {
			code, retry := post(fmt.Sprint("f", i))
			codes[i] = code
			if secs, err := strconv.Atoi(retry); code == http.StatusServiceUnavailable && (err != nil || secs < 1) {
				t.Errorf("f%d: 503 with Retry-After %q, want whole seconds", i, retry)
			}
		})
	}
	wg.Wait()
	var admitted, refused []string
	for i, code := range codes {
		switch code {
		case http.StatusAccepted:
			admitted = append(admitted, fmt.Sprint("f", i))
		case http.StatusServiceUnavailable:
			refused = append(refused, fmt.Sprint("f", i))
		default:
			t.Fatalf("f%d: %d, want 202 or 503", i, code)
		}
	}
	if len(admitted) != maxQueue {
		t.Fatalf("%d of the flood admitted while both workers were busy, want max_queue = %d", len(admitted), maxQueue)
	}
	for _, id := range refused {
		if _, err := b.inbox.Get(context.Background(), "web:"+id); !errors.Is(err, durability.ErrNotFound) {
			t.Fatalf("refused %s was journaled (%v)", id, err)
		}
	}
	if got := b.Observer().Metrics().InboundRefused; got != int64(len(refused)) {
		t.Errorf("inbound_refused = %d, want %d", got, len(refused))
	}
	close(g.open)
	// The channel redelivers what was refused.
	for _, id := range refused {
		if !waitFor(60*time.Second, func() bool { code, _ := post(id); return code == http.StatusAccepted }) {
			t.Fatalf("%s was never admitted on redelivery", id)
		}
	}
	all := append([]string{"m0", "m1"}, append(admitted, refused...)...)
	if !waitFor(60*time.Second, func() bool {
		for _, id := range all {
			if r, err := b.inbox.Get(context.Background(), "web:"+id); err != nil || r.State != durability.InboxDone {
				return false
			}
		}
		return true
	}) {
		t.Fatal("not every admitted message was handled")
	}
	for _, id := range all {
		if n := g.ran("web:" + id); n != 1 {
			t.Errorf("%s ran %d times, want once", id, n)
		}
	}
}

// extendCounter wraps a backend's inbox to count lease extensions per record.
type extendCounter struct {
	durability.Backend
	mu      sync.Mutex
	extends map[string]int
}

func (c *extendCounter) Open(ctx context.Context, s durability.Scope) (durability.Journals, error) {
	j, err := c.Backend.Open(ctx, s)
	j.Inbox = &countingInbox{InboxJournal: j.Inbox, c: c}
	return j, err
}

func (c *extendCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.extends[id]
}

type countingInbox struct {
	durability.InboxJournal
	c *extendCounter
}

func (i *countingInbox) Extend(ctx context.Context, id string, token, until int64) error {
	i.c.mu.Lock()
	i.c.extends[id]++
	i.c.mu.Unlock()
	return i.InboxJournal.Extend(ctx, id, token, until)
}

// TestHeartbeatStartsWithTurn: records waiting in a chat's queue get no lease
// extensions (no heartbeat) while the chat's earlier turn runs and its own
// heartbeat ticks. A queued record whose lease expired and that another
// replica claimed meanwhile is skipped when its turn comes (the fencing token
// decides); the others extend their expired leases at their turn and run
// once.
func TestHeartbeatStartsWithTurn(t *testing.T) {
	const queued = 20
	cfg := testConfig(t, "[durability]\npoll = \"1h\"\n[durability.inbox]\nlease = \"300ms\"\n")
	counter := &extendCounter{Backend: memory.New(), extends: map[string]int{}}
	g := newGate()
	b := newTestBot(t, cfg, counter, g.handler())
	defer b.stop(t)
	ctx := context.Background()
	if _, err := b.admit(t, "c1", "m0", "first"); err != nil {
		t.Fatal(err)
	}
	<-g.started
	for i := 1; i <= queued; i++ {
		if _, err := b.admit(t, "c1", fmt.Sprint("m", i), "next"); err != nil {
			t.Fatal(err)
		}
	}
	// The running turn's heartbeat extends its lease every 100ms: wait for
	// three extensions after the last admission.
	base := counter.count("web:m0")
	if !waitFor(60*time.Second, func() bool { return counter.count("web:m0") >= base+3 }) {
		t.Fatal("the running turn's heartbeat never extended its lease")
	}
	for i := 1; i <= queued; i++ {
		if n := counter.count(fmt.Sprint("web:m", i)); n != 0 {
			t.Fatalf("queued record m%d had its lease extended %d times before its turn", i, n)
		}
	}
	// m1's lease expires while it waits; another replica claims it.
	m1 := b.inboxState(t, "web:m1")
	if !waitFor(60*time.Second, func() bool { return time.Now().UnixMilli() > m1.LeaseUntil }) {
		t.Fatal("m1's lease never expired")
	}
	now := time.Now().UnixMilli()
	if _, err := b.inbox.Claim(ctx, "web:m1", durability.Lease{Owner: "replica-2", Now: now, Until: now + time.Hour.Milliseconds()}); err != nil {
		t.Fatalf("another replica could not claim m1 after its lease expired: %v", err)
	}
	stale := b.Observer().Metrics().StaleLeases
	close(g.open)
	if !waitFor(60*time.Second, func() bool {
		for i := 0; i <= queued; i++ {
			if i != 1 && g.ran(fmt.Sprint("web:m", i)) == 0 {
				return false
			}
		}
		return b.dispatch.Idle()
	}) {
		t.Fatal("the queued records did not all run")
	}
	for i := 0; i <= queued; i++ {
		id := fmt.Sprint("web:m", i)
		r := b.inboxState(t, id)
		switch {
		case i == 1:
			if g.ran(id) != 0 || r.Owner != "replica-2" || r.State != durability.InboxProcessing {
				t.Errorf("m1, claimed by another replica while queued, ran %d times here; record %s owned by %s", g.ran(id), r.State, r.Owner)
			}
		case g.ran(id) != 1 || r.State != durability.InboxDone || r.Attempts != 1:
			t.Errorf("%s ran %d times, record %s after %d attempts; want once, done, 1", id, g.ran(id), r.State, r.Attempts)
		}
	}
	if got := b.Observer().Metrics().StaleLeases; got != stale+1 {
		t.Errorf("stale_leases went from %d to %d, want one more (m1)", stale, got)
	}
}
