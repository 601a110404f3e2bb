package host

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/wasm"
)

// panicky is a channel whose loop panics on its first run and whose
// webhook panics on every request but /ok.
type panicky struct {
	*fakeChannel
	runs atomic.Int32
}

func (p *panicky) Run(ctx context.Context) {
	if p.runs.Add(1) == 1 {
		var m map[string]int
		m["boom"]++
	}
	<-ctx.Done()
}

func (p *panicky) Send(ctx context.Context, out channel.Outbound) (string, error) {
	if out.Text == "boom" {
		var m map[string]int
		m["boom"]++
	}
	return p.fakeChannel.Send(ctx, out)
}

func (p *panicky) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webhooks/web", func(http.ResponseWriter, *http.Request) { panic("the request's body") })
	mux.HandleFunc("POST /webhooks/web/ok", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
}

// started starts a bot on backend with the channel ch and a guest that
// does nothing, stopped when the test ends.
func started(t *testing.T, backend durability.Backend, ch channel.Channel) *Bot {
	t.Helper()
	b, err := New(context.Background(), testConfig(t, ""), Options{Logger: discard, Backend: backend,
		Guest: native(func(context.Context, abi.Event, wasm.Env) error { return nil }), Channels: []channel.Channel{ch}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) })
	b.Start()
	return b
}

// A panic in a channel's loop, webhook handler or send does not take the
// process down: the loop is run again, the request answered 500, the send
// retried later, each counted for the channel, and the bot serves on.
func TestAChannelPanicIsRecoveredAndCounted(t *testing.T) {
	ch := &panicky{fakeChannel: newChannel()}
	b := started(t, memory.New(), ch)
	if !waitFor(time.Minute, func() bool { return ch.runs.Load() >= 2 }) {
		t.Fatal("the loop was not run again after its panic")
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
	if got := channelPanics(t, b, "web"); got < 4 {
		t.Errorf("botrun_channel_panics_total{channel=\"web\"} = %v, want 3 and one a send attempt", got)
	}
}

// reconcilePanics is a reconciling channel whose Reconcile panics.
type reconcilePanics struct {
	*fakeChannel
	asked atomic.Int32
}

func (r *reconcilePanics) Reconcile(context.Context, channel.Outbound) (bool, error) {
	r.asked.Add(1)
	var m map[string]int
	m["boom"]++
	return false, nil
}

// preparePanics is a transactional channel whose PrepareSend panics for
// the text "boom" (and declines the others) and whose Delivered panics.
type preparePanics struct{ *fakeChannel }

func (p preparePanics) PrepareSend(_ context.Context, out channel.Outbound, _ bool) (string, []durability.Write, error) {
	if out.Text == "boom" {
		var m map[string]int
		m["boom"]++
	}
	if out.Text == "delivered" {
		return "ref-d", nil, nil
	}
	return "", nil, channel.ErrNotTransactional
}

func (preparePanics) Delivered(channel.Outbound, string) {
	var m map[string]int
	m["boom"]++
}

// channelPanics reads botrun_channel_panics_total{channel=id}.
func channelPanics(t *testing.T, b *Bot, id string) float64 {
	t.Helper()
	families, err := b.Observer().Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "botrun_channel_panics_total" {
			for _, m := range f.GetMetric() {
				if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == id {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A panic in a channel's Reconcile (asking about a send a crash left in
// flight), PrepareSend or Delivered does not take the process down: it is
// counted, the prepared send retried later as a lost connection is, and
// the bot sends on.
func TestAChannelPanicInReconcileOrPrepareIsRecovered(t *testing.T) {
	t.Run("Reconcile", func(t *testing.T) {
		ch := &reconcilePanics{fakeChannel: newChannel()}
		shared := memory.New()
		j, err := shared.Open(context.Background(), durability.Scope{Bot: "bot", Connection: "default"})
		if err != nil {
			t.Fatal(err)
		}
		payload, _ := json.Marshal(rules.OutboxMessage{Text: "in flight"})
		expired := durability.Lease{Owner: "dead", Now: nowMs() - 2000, Until: nowMs() - 1000}
		if _, _, err := j.Outbox.Put(context.Background(), durability.OutboxPut{Key: "old", Provider: "web", Chat: "c", Payload: payload}, expired.Now, &expired); err != nil {
			t.Fatal(err)
		}
		b := started(t, shared, ch)
		if !waitFor(time.Minute, func() bool { return ch.asked.Load() >= 1 && channelPanics(t, b, "web") >= 1 }) {
			t.Fatalf("Reconcile asked %d times, %v panics counted", ch.asked.Load(), channelPanics(t, b, "web"))
		}
		if res, err := b.Send(context.Background(), "web", "c2", "hi", "k1"); err != nil || res.Status != abi.SendSent {
			t.Fatalf("the send after: %+v, %v", res, err)
		}
	})
	t.Run("PrepareSend", func(t *testing.T) {
		ch := preparePanics{fakeChannel: newChannel()}
		b := started(t, memory.New(), ch)
		if res, err := b.Send(context.Background(), "web", "c", "boom", "k1"); err != nil || res.Status == abi.SendSent || !strings.Contains(res.Error, "panicked while preparing a send") {
			t.Fatalf("a send whose PrepareSend panicked: %+v, %v", res, err)
		}
		if res, err := b.Send(context.Background(), "web", "c", "delivered", "k2"); err != nil || res.Status != abi.SendSent {
			t.Fatalf("a send whose Delivered panicked: %+v, %v", res, err)
		}
		if res, err := b.Send(context.Background(), "web", "c", "hi", "k3"); err != nil || res.Status != abi.SendSent {
			t.Fatalf("the send after: %+v, %v", res, err)
		}
		if got := channelPanics(t, b, "web"); got < 2 {
			t.Errorf("botrun_channel_panics_total{channel=\"web\"} = %v, want 2 at least", got)
		}
	})
}
