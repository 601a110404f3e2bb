package host

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/botrun/botrun/durability"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/alertsink"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
)

// alertReceiver checks each alert's signature, refuses the first attempt
// (500) and records what it accepted, by idempotency key.
type alertReceiver struct {
	secret string
	mu     sync.Mutex
	tries  map[string]int
	got    map[string]alertsink.Body
	bad    int
}

func (a *alertReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mac := hmac.New(sha256.New, []byte(a.secret))
	mac.Write([]byte(r.Header.Get("X-Botrun-Timestamp") + "."))
	mac.Write(body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !hmac.Equal([]byte(r.Header.Get("X-Botrun-Signature")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil)))) {
		a.bad++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if a.tries[key]++; a.tries[key] == 1 {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	var al alertsink.Body
	json.Unmarshal(body, &al)
	a.got[key] = al
}

func (a *alertReceiver) alerts() []alertsink.Body {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []alertsink.Body
	for _, al := range a.got {
		out = append(out, al)
	}
	return out
}

// TestAlertsArePostedSignedAndRetried: with [alerts] url, a handler's error
// reaches the operator's endpoint as signed JSON, through the outbox: the
// first attempt fails and the sweeper retries it under the same key.
func TestAlertsArePostedSignedAndRetried(t *testing.T) {
	rcv := &alertReceiver{secret: "alert-secret-0123456789", tries: map[string]int{}, got: map[string]alertsink.Body{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cfg := testConfig(t, "[alerts]\nurl = \""+srv.URL+"\"\nsecret = \"alert-secret-0123456789\"\n")
	failing := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		return &wasm.HandlerError{Message: "no such order " + ev.Text}
	})
	b := newTestBot(t, cfg, memory.New(), failing, newChannel())
	defer b.stop(t)
	if _, err := b.admit(t, "c1", "m1", "42"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return len(rcv.alerts()) == 1 }) {
		t.Fatalf("no alert accepted (tries %v, bad signatures %d)", rcv.tries, rcv.bad)
	}
	al := rcv.alerts()[0]
	if al.Name != observe.AlertHandlerError || al.ID != "web:m1" || al.Chat != "c1" || al.Error != "no such order 42" || al.Bot == "" || al.At == 0 {
		t.Fatalf("alert %+v", al)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.bad != 0 {
		t.Fatalf("%d alerts with a bad signature", rcv.bad)
	}
	for key, n := range rcv.tries {
		if n != 2 {
			t.Fatalf("alert %s tried %d times, want 2 (refused once, then accepted once)", key, n)
		}
	}
}

// downOutbox refuses every Put, as a journal that is down does.
type downOutbox struct{ durability.OutboxJournal }

func (downOutbox) Put(context.Context, durability.OutboxPut, int64, *durability.Lease) (durability.PutStatus, durability.OutboxRecord, error) {
	return "", durability.OutboxRecord{}, errors.New("disk full")
}

// downBackend is a backend whose inbox and outbox refuse every Put.
type downBackend struct{ hooked }

func (d *downBackend) Open(ctx context.Context, s durability.Scope) (durability.Journals, error) {
	j, err := d.hooked.Open(ctx, s)
	j.Outbox = downOutbox{j.Outbox}
	return j, err
}

// TestFailClosedAdmissionAlerts: a message the inbox journal cannot record
// is refused (fail-closed) and emits an AlertAdmissionFailed, which the
// operator's listeners (the console's live tail) and [alerts] url get: one
// per minute however many messages are refused, and posted without the
// journal when the outbox cannot journal it either.
func TestFailClosedAdmissionAlerts(t *testing.T) {
	for _, outboxDown := range []bool{false, true} {
		t.Run(fmt.Sprint("outbox down=", outboxDown), func(t *testing.T) {
			var mu sync.Mutex
			var posted []alertsink.Body
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var al alertsink.Body
				json.NewDecoder(r.Body).Decode(&al)
				mu.Lock()
				posted = append(posted, al)
				mu.Unlock()
			}))
			defer srv.Close()
			cfg := testConfig(t, "[alerts]\nurl = \""+srv.URL+"\"\nsecret = \"alert-secret-0123456789\"\n")
			failPut := func() error { return errors.New("disk full") }
			var back durability.Backend = &hooked{Backend: memory.New(), failPut: failPut}
			if outboxDown {
				back = &downBackend{hooked{Backend: memory.New(), failPut: failPut}}
			}
			b := newTestBot(t, cfg, back, reply(""), newChannel())
			defer b.stop(t)
			for _, id := range []string{"m1", "m2", "m3"} {
				if _, err := b.admit(t, "c1", id, "hi"); err == nil {
					t.Fatalf("%s admitted with the inbox journal down", id)
				}
			}
			n := 0
			for len(b.events) > 0 {
				if al := <-b.events; al.Name == observe.AlertAdmissionFailed {
					n++
					if al.ID != "web:m1" || al.Provider != "web" || !strings.Contains(al.Error, "disk full") {
						t.Errorf("alert %+v", al)
					}
				}
			}
			if n != 1 {
				t.Errorf("%d admission alerts for 3 refused messages within a minute, want 1", n)
			}
			if !waitFor(60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(posted) == 1 }) {
				t.Fatal("[alerts] url got no admission alert")
			}
			mu.Lock()
			if posted[0].Name != observe.AlertAdmissionFailed {
				t.Errorf("posted %+v", posted[0])
			}
			mu.Unlock()
		})
	}
}

// TestAdmissionOfAHungUpClientDoesNotAlert: a message whose request ended
// (the client hung up) before the inbox journal recorded it is not admitted,
// but that is no failure of the journal: no AlertAdmissionFailed.
func TestAdmissionOfAHungUpClientDoesNotAlert(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failPut := func() error { cancel(); return context.Canceled }
	b := newTestBot(t, testConfig(t, ""), &hooked{Backend: memory.New(), failPut: failPut}, reply(""), newChannel())
	defer b.stop(t)
	if _, err := b.Admit(ctx, "web", channel.Message{ID: "m1", Chat: "c1", From: "u", Text: "hi"}); err == nil {
		t.Fatal("admitted with the request ended")
	}
	for len(b.events) > 0 {
		if al := <-b.events; al.Name == observe.AlertAdmissionFailed {
			t.Errorf("an admission alert for a client that hung up: %+v", al)
		}
	}
}
