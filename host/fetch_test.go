package host

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// orderAPI is an order-status API: GET /v1/orders/<id> with the bearer
// token, 404 for an unknown order. It records each call's
// Idempotency-Key.
type orderAPI struct {
	mu   sync.Mutex
	keys []string
}

func (a *orderAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer s3cret-token" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	a.keys = append(a.keys, r.Header.Get("Idempotency-Key"))
	a.mu.Unlock()
	switch r.URL.Path {
	case "/v1/orders/42":
		w.Write([]byte("shipped\n"))
	default:
		http.NotFound(w, r)
	}
}

func (a *orderAPI) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.keys)
}

// TestFetchJournaledAndReplayed: the orders example calls the API through
// the host with the entry's credentials and the derived Idempotency-Key; a
// replayed message reads the journaled answer and the API is not called
// again; with journal = false a replay calls again; the credentials are in
// no journal.
func TestFetchJournaledAndReplayed(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/orders")
	api := &orderAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	for _, journal := range []bool{true, false} {
		name := map[bool]string{true: "journal", false: "no-journal"}[journal]
		t.Run(name, func(t *testing.T) {
			before := len(api.calls())
			dbPath := filepath.Join(t.TempDir(), "bot.db")
			backend, err := sqlite.Open(context.Background(), sqlite.Options{Path: dbPath})
			if err != nil {
				t.Fatal(err)
			}
			defer backend.Close()
			cfg := testConfig(t, "")
			cfg.Bot.Module = module
			retries := 0
			cfg.APIs = []config.API{{Name: "orders", URL: srv.URL + "/v1", Headers: map[string]string{"Authorization": "Bearer s3cret-token"},
				Timeout: config.Duration(30 * time.Second), MaxResponse: 1 << 20, Retries: &retries, Journal: &journal, AllowPrivate: true}}
			ch := newChannel()
			b := newTestBot(t, cfg, backend, nil, ch)
			stopped := false
			defer func() {
				if !stopped {
					b.stop(t)
				}
			}()
			b.admit(t, "c1", "m1", "order 42")
			b.admit(t, "c1", "m2", "order 7")
			if !b.quiet(2, 60*time.Second) {
				t.Fatal("the messages did not settle")
			}
			if ch.count("c1", "Order 42: shipped") != 1 || ch.count("c1", "There is no order 7.") != 1 {
				t.Fatalf("replies %q", ch.texts())
			}
			if got := api.calls()[before:]; !slices.Equal(got, []string{"web:m1:fetch:1", "web:m2:fetch:1"}) {
				t.Fatalf("the API saw keys %q, want one call per message under its derived key", got)
			}
			if err := b.Operator().ReplayInbound(context.Background(), "web:m1"); err != nil {
				t.Fatal(err)
			}
			if !waitFor(60*time.Second, func() bool { return b.inboxState(t, "web:m1").Attempts == 1 && b.quiet(2, time.Millisecond) }) {
				t.Fatal("the replay did not settle")
			}
			m := b.Observer().Metrics()
			calls := api.calls()[before:]
			if journal {
				if len(calls) != 2 || m.FetchReplayed != 1 || m.FetchCalls != 2 {
					t.Fatalf("journaled: the replay made %d API calls in all (want 2), fetch_replayed %d (want 1), fetch_calls %d", len(calls), m.FetchReplayed, m.FetchCalls)
				}
			} else if len(calls) != 3 || calls[2] != "web:m1:fetch:1" || m.FetchReplayed != 0 {
				t.Fatalf("not journaled: the replay's calls %q (want the same key again), fetch_replayed %d", calls, m.FetchReplayed)
			}
			if ch.count("c1", "Order 42: shipped") != 1 {
				t.Fatalf("the replay sent its reply again: %q", ch.texts())
			}
			b.stop(t)
			stopped = true
			for _, f := range []string{dbPath, dbPath + "-wal"} {
				if raw, err := os.ReadFile(f); err == nil && bytes.Contains(raw, []byte("s3cret-token")) {
					t.Fatalf("%s holds the API's credential", filepath.Base(f))
				}
			}
		})
	}
}
