package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/wasm"
)

// panicky is a channel whose loop panics on its first run and whose
// webhook panics on every request but /ok.
type panicky struct {
	*channel
	runs atomic.Int32
}

func (p *panicky) Run(ctx context.Context) {
	if p.runs.Add(1) == 1 {
		var m map[string]int
		m["boom"]++
	}
	<-ctx.Done()
}

func (p *panicky) Send(ctx context.Context, out provider.Outbound) (string, error) {
	if out.Text == "boom" {
		var m map[string]int
		m["boom"]++
	}
	return p.channel.Send(ctx, out)
}

func (p *panicky) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/web", func(http.ResponseWriter, *http.Request) { panic("the request's body") })
	mux.HandleFunc("POST /webhooks/web/ok", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
}

// A panic in a channel's loop, webhook handler or send does not take the
// process down: the loop is run again, the request answered 500, the send
// retried later, each counted for the channel, and the bot serves on.
func TestAChannelPanicIsRecoveredAndCounted(t *testing.T) {
	ch := &panicky{channel: newChannel()}
	b, err := New(context.Background(), testConfig(t, ""), Options{Logger: discard, Backend: memory.New(),
		Guest: native(func(context.Context, abi.Event, wasm.Env) error { return nil }), Providers: []provider.Provider{ch}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	b.Start()
	deadline := time.Now().Add(time.Minute)
	for ch.runs.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the loop was not run again after its panic")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h := b.Handler()
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/web", strings.NewReader("{}")))
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("a panicking webhook answered %d", rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/webhooks/web/ok", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("the webhook after the panics answered %d", rec.Code)
	}
	// Retried as a lost connection is, dead when the retries run out.
	if res, err := b.Send(context.Background(), "web", "c", "boom", "k1"); err != nil || res.Status == abi.SendSent || !strings.Contains(res.Error, "panicked while sending") {
		t.Fatalf("a send that panicked: %+v, %v", res, err)
	}
	if res, err := b.Send(context.Background(), "web", "c", "hi", "k2"); err != nil || res.Status != abi.SendSent {
		t.Fatalf("the send after: %+v, %v", res, err)
	}
	families, err := b.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range families {
		if f.GetName() == "botrun_channel_panics_total" {
			for _, m := range f.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == "web" {
					got = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got < 4 {
		t.Errorf("botrun_channel_panics_total{channel=\"web\"} = %v, want 3 and one a send attempt", got)
	}
}
