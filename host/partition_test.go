package host

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/faultnet"
	"github.com/botrun/botrun/internal/testserver"
)

// TestTurnsInFlightStopWhenTheJournalIsCutOff cuts a bot off its journal
// (PostgreSQL, Redis: a proxy that blackholes the link, the hard case: no
// error, no answer) while a turn runs: the turn's heartbeat cannot extend
// its lease, and the turn is stopped (its context cancelled) once the lease
// has expired, not left running while another replica may claim the
// record. After the link heals the record is reclaimed and answered once.
func TestTurnsInFlightStopWhenTheJournalIsCutOff(t *testing.T) {
	for _, name := range []string{"postgres", "redis"} {
		t.Run(name, func(t *testing.T) { turnsStopWhenCutOff(t, name) })
	}
}

func turnsStopWhenCutOff(t *testing.T, backend string) {
	var raw string
	if backend == "postgres" {
		raw = testserver.Postgres(t)
	} else {
		raw = testserver.Redis(t)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultnet.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	var store durability.Backend
	if backend == "postgres" {
		store, err = postgres.Open(context.Background(), postgres.Options{URL: u.String(), TablePrefix: processPrefix})
	} else {
		store, err = redis.Open(context.Background(), redis.Options{URL: u.String(), Prefix: processPrefix})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	entered := make(chan struct{}, 4)
	stopped := make(chan time.Time, 4)
	handler := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		if ev.Attempt == 1 {
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				stopped <- time.Now()
				return ctx.Err()
			case <-time.After(2 * time.Minute):
				return nil
			}
		}
		_, err := env.Post(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		return err
	})
	cfg := testConfig(t, "")
	cfg.Bot.ID = uniquePrefix("cutoff")
	ch := newChannel()
	tb := newTestBotWith(t, cfg, Options{Backend: store, Guest: handler, Channels: []channel.Channel{ch}})
	defer tb.stop(t)
	if _, err := tb.admit(t, "c1", "m1", "m1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the turn never started")
	}
	lease := cfg.Durability.Inbox.Lease.D()
	cut := time.Now()
	proxy.Blackhole()
	var at time.Time
	select {
	case at = <-stopped:
	case <-time.After(time.Minute):
		t.Fatalf("the turn still runs a minute after the journal was cut off (lease %s)", lease)
	}
	t.Logf("%s: the turn stopped %s after the cut (lease %s)", backend, at.Sub(cut).Round(time.Millisecond), lease)
	// By its lease's expiry (the last extension came before the cut), plus
	// a second for a loaded machine's scheduling.
	if took := at.Sub(cut); took > lease+time.Second {
		t.Errorf("the turn stopped %s after the cut, past its lease (%s)", took, lease)
	}
	proxy.Heal()
	if !waitFor(time.Minute, func() bool { return ch.count("c1", "echo: m1") > 0 }) {
		t.Fatalf("m1 was not answered after the link healed: %v", ch.texts())
	}
	tb.sweeps(t, 3)
	if n := ch.count("c1", "echo: m1"); n != 1 {
		t.Errorf("m1 answered %d times, want once", n)
	}
}
