package host

import (
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestFetchCrashOnEveryBackend: the orders example calls the API for a
// message and the process dies around the commit of the call's answer (or
// after the reply is journaled), on every backend; the channel redelivers
// the message to a new process on the same store. The reply goes out once.
// The API is called again, under the same Idempotency-Key and counted
// fetch_ambiguous, only when the answer was not yet journaled; once it
// was, the new process reads it back (fetch_replayed) and the API is not
// called again.
func TestFetchCrashOnEveryBackend(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/orders")
	for name, nb := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				op              string
				after, answered bool
			}{
				{"kv.commit", false, false}, // the call was made; its answer never landed
				{"kv.commit", true, true},   // the answer landed; the process died before the guest read it
				{"outbox.put", false, true}, // the answer landed; the turn died before journaling its reply
			} {
				what := map[bool]string{false: "before ", true: "after "}[c.after] + c.op
				t.Run(what, func(t *testing.T) {
					api := &orderAPI{}
					srv := httptest.NewServer(api)
					defer srv.Close()
					shared := nb(t)
					crash := crashpoint.New(shared)
					if c.after {
						crash.CrashAfter(c.op)
					} else {
						crash.CrashBefore(c.op)
					}
					ch := newChannel()
					cfg := testConfig(t, `on_ambiguous = "skip"`)
					cfg.Bot.ID = uniquePrefix("fetchcrash")
					cfg.Bot.Module = module
					cfg.APIs = []config.API{testAPI("orders", srv.URL+"/v1", "s3cret-token", 30*time.Second, true)}
					a := newTestBot(t, cfg, crash, nil, crashProvider{ch: ch, crash: crash})
					if _, err := a.admit(t, "c1", "m1", "order 42"); err != nil {
						t.Fatal(err)
					}
					if !waitFor(60*time.Second, crash.Crashed) {
						t.Fatalf("no crash at %s", what)
					}
					a.Kill()
					nextMilli(t) // B boots strictly after A's last lease
					b := newTestBot(t, cfg, shared, nil, ch)
					defer b.stop(t)
					if _, err := b.admit(t, "c1", "m1", "order 42"); err != nil { // the channel redelivers
						t.Fatal(err)
					}
					if !b.quiet(1, 60*time.Second) {
						t.Fatal("the redelivered message did not settle")
					}
					if n := ch.count("c1", "Order 42: shipped"); n != 1 {
						t.Fatalf("the reply went out %d times, want once: %q", n, ch.texts())
					}
					calls, m := api.calls(), b.Observer().Metrics()
					want := []string{"web:m1:fetch:1"}
					if !c.answered {
						want = append(want, "web:m1:fetch:1")
					}
					switch {
					case !slices.Equal(calls, want):
						t.Fatalf("the API saw the keys %q, want %q", calls, want)
					case c.answered && (m.FetchReplayed != 1 || m.FetchAmbiguous != 0):
						t.Fatalf("a journaled answer: fetch_replayed %d (want 1), fetch_ambiguous %d (want 0)", m.FetchReplayed, m.FetchAmbiguous)
					case !c.answered && (m.FetchReplayed != 0 || m.FetchAmbiguous != 1):
						t.Fatalf("an answer that never landed: fetch_replayed %d (want 0), fetch_ambiguous %d (want 1)", m.FetchReplayed, m.FetchAmbiguous)
					}
				})
			}
		})
	}
}
