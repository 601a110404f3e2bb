package host

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/wasm"
)

// alertReceiver checks each alert's signature, refuses the first attempt
// (500) and records what it accepted, by idempotency key.
type alertReceiver struct {
	secret string
	mu     sync.Mutex
	tries  map[string]int
	got    map[string]alertBody
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
	var al alertBody
	json.Unmarshal(body, &al)
	a.got[key] = al
}

func (a *alertReceiver) alerts() []alertBody {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []alertBody
	for _, al := range a.got {
		out = append(out, al)
	}
	return out
}

// TestAlertsArePostedSignedAndRetried: with [alerts] url, a handler's error
// reaches the operator's endpoint as signed JSON, through the outbox: the
// first attempt fails and the sweeper retries it under the same key.
func TestAlertsArePostedSignedAndRetried(t *testing.T) {
	rcv := &alertReceiver{secret: "alert-secret-0123456789", tries: map[string]int{}, got: map[string]alertBody{}}
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
	if al.Name != AlertHandlerError || al.ID != "web:m1" || al.Chat != "c1" || al.Error != "no such order 42" || al.Bot == "" || al.At == 0 {
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
