package whatsappweb_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/types/events"
	_ "modernc.org/sqlite"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/whatsappweb"
	"github.com/botrun/botrun/host/channel/whatsappweb/whatsappwebtest"
	"github.com/botrun/botrun/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

func TestPairShowsQRCodesUntilLinkedAndRecordsTheDevice(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	net.LinkAfter(2)
	b := newBot(t, net, nil, nil)
	out := b.pair()
	// Two codes drawn in half blocks, then the device linked.
	if n := strings.Count(out, "Scan it with WhatsApp"); n != 2 {
		t.Fatalf("%d QR codes shown, want 2:\n%s", n, out)
	}
	mustContain(t, "the pairing output", out, "█", "▀", "linked as "+device().String())
	// The device is the provider's, recorded under the bot's key prefix, and
	// its keys are in whatsmeow's tables in the bot's own SQLite file.
	v, _, err := b.kv.Get(context.Background(), "/bot/default/whatsapp-web/wa/device")
	if err != nil || string(v) != device().String() {
		t.Fatalf("recorded device %q, %v", v, err)
	}
	db := b.sqlDB()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM whatsmeow_device`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("whatsmeow_device in the bot's file: %d rows, %v", n, err)
	}
	// Pairing again leaves the session as it is.
	again := b.pair()
	mustContain(t, "a second pairing", again, "already paired as "+device().String())
}

// sqlDB opens the bot's SQLite file read-only for inspection.
func (b *bot) sqlDB() *sql.DB {
	db, _, err := b.kv.(interface {
		OpenSQL() (*sql.DB, string, error)
	}).OpenSQL()
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { db.Close() })
	return db
}

func TestPairByPhoneCode(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	net.LinkAfter(0) // the phone scans no QR code: only the pairing code links
	b := newBot(t, net, nil, func(c *whatsappweb.Config) { c.PairPhone = "+1 555 000 1111" })
	out := b.pair()
	mustContain(t, "the pairing output", out, "Link with phone number instead", "ABCD-1234", "linked as")
	if strings.Contains(out, "█") {
		t.Fatalf("a QR code drawn when pairing by code:\n%s", out)
	}
}

func TestPairTimesOutWhenNoPhoneLinks(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	net.LinkAfter(0)
	b := newBot(t, net, nil, nil)
	var out bytes.Buffer
	png := filepath.Join(t.TempDir(), "qr.png")
	err := whatsappweb.Pair(context.Background(), b.cfg, b.env, whatsappweb.PairOptions{Out: &out, PNG: png})
	if !errors.Is(err, whatsappweb.ErrPairing) || !strings.Contains(err.Error(), "run the command again") {
		t.Fatalf("pairing with a phone that never scans: %v", err)
	}
	mustContain(t, "the output", out.String(), "also written to "+png)
	// The unfinished pairing left no device and released the lease: a
	// later pairing goes through.
	net.LinkAfter(1)
	b.pair()
}

func TestUnpairedSessionSaysHowToPairAndConnectsOncePaired(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	b := newBot(t, net, nil, nil)
	b.run()
	line := "whatsapp-web wa: not paired: run botrun whatsapp pair -c <your bot.toml> --provider wa"
	fakekit.WaitFor(t, "the not-paired line", func() bool { return strings.Contains(b.logs.String(), line) })
	if _, err := b.p.Send(context.Background(), channel.Outbound{Chat: alice.String(), Text: "hi"}); err == nil || httpkit.Permanent(err) {
		t.Fatalf("a send while unpaired: %v, want a retryable error", err)
	}
	// Pairing while the bot runs: the bot connects by itself.
	b.pair()
	b.online()
	if n := strings.Count(b.logs.String(), line); n != 1 {
		t.Fatalf("the not-paired line logged %d times, want once", n)
	}
	b.stop()
	if b.p.Connected() {
		t.Fatal("still connected after Run returned")
	}
}

func TestSessionStateChangesAreLogged(t *testing.T) {
	b, c := connectedBot(t, nil)
	fakekit.WaitFor(t, "the connected line", func() bool { return strings.Contains(b.logs.String(), "whatsapp-web: connected") })
	c.Drop()
	c.Emit(&events.KeepAliveTimeout{ErrorCount: 2})
	c.Emit(&events.KeepAliveRestored{})
	mustContain(t, "the log", b.logs.String(), "connection lost; reconnecting", "keepalive timed out", "keepalive restored", "lease_token=1")
	if strings.Count(b.logs.String(), "whatsapp-web: connected") != 2 {
		t.Fatalf("the reconnection is not logged:\n%s", b.logs.String())
	}
}

func TestARefusedConnectionEndsTheSession(t *testing.T) {
	b, c := connectedBot(t, nil)
	c.Emit(&events.ConnectFailure{Reason: events.ConnectFailureServiceUnavailable + 1, Message: "odd"})
	fakekit.WaitFor(t, "the next session's wait", func() bool { return strings.Contains(b.logs.String(), "next session") })
	if b.p.Connected() || c.Connected() {
		t.Fatal("still connected after WhatsApp refused the connection")
	}
	mustContain(t, "the log", b.logs.String(), "WhatsApp refused the connection; trying again in a minute", "after=\"connection refused\" wait=1m0s")
}

func TestLoggedOutIsAnAlertNotACrashLoop(t *testing.T) {
	b, c := connectedBot(t, nil)
	c.LogOut()
	fakekit.WaitFor(t, "the logged-out alert", func() bool { return len(b.alerts.list()) == 1 })
	if a := b.alerts.list()[0]; !strings.HasPrefix(a, whatsappweb.AlertLoggedOut+": ") || !strings.Contains(a, "pair it again") {
		t.Fatalf("alert %q", a)
	}
	line := "not paired: run botrun whatsapp pair"
	fakekit.WaitFor(t, "the session to go back to unpaired", func() bool { return strings.Contains(b.logs.String(), line) })
	mustContain(t, "the log", b.logs.String(), "level=ERROR msg=\"whatsapp-web wa: logged out")
	if strings.Contains(b.logs.String(), "forgetting the logged-out device failed") {
		t.Fatalf("the logged-out device was not forgotten:\n%s", b.logs.String())
	}
	if _, v, _ := b.kv.Get(context.Background(), "/bot/default/whatsapp-web/wa/device"); v != 0 {
		t.Fatal("the logged-out device is still recorded as the provider's")
	}
	clients := len(b.net.Clients())
	// Many unpaired polls later: no reconnection attempt, one line.
	time.Sleep(20 * b.cfg.UnpairedPoll)
	if n := len(b.net.Clients()); n != clients {
		t.Fatalf("%d connection attempts after the logout", n-clients)
	}
	if n := strings.Count(b.logs.String(), line); n != 1 {
		t.Fatalf("the not-paired line logged %d times", n)
	}
	// Pairing again brings it back.
	b.pair()
	b.online()
}

func TestAnotherConnectionReplacingTheSessionIsAnAlert(t *testing.T) {
	b, c := connectedBot(t, nil)
	// The same keys connected elsewhere (outside botrun's lease).
	other := b.net.NewClient(c.Device(), nil)
	if err := other.ConnectContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	fakekit.WaitFor(t, "the replaced alert", func() bool { return len(b.alerts.list()) == 1 })
	if a := b.alerts.list()[0]; !strings.HasPrefix(a, whatsappweb.AlertReplaced) {
		t.Fatalf("alert %q", a)
	}
	fakekit.WaitFor(t, "the session to end", func() bool { return !b.p.Connected() })
}

func TestASecondReplicaWaitsForTheSession(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	first := newBot(t, net, nil, nil)
	first.pair()
	first.run()
	c1 := first.online()
	// A second process on the same backend and session.
	clients := len(net.Clients())
	second := newBot(t, net, first.kv, nil)
	second.run()
	fakekit.WaitFor(t, "the second replica to wait", func() bool { return second.waitedFor.Load() == first.lease.Name() })
	if second.p.Connected() || len(net.Clients()) != clients {
		t.Fatalf("the waiting replica connected (%d clients)", len(net.Clients())-clients)
	}
	// The first stops: the second takes the session over, with a greater
	// fencing token, and nothing was ever replaced.
	first.stop()
	c2 := second.online()
	if c2 == c1 {
		t.Fatal("the second replica did not connect a client of its own")
	}
	mustContain(t, "the second's log", second.logs.String(), "lease_token=2") // the first held 1
	for _, l := range []string{first.logs.String(), second.logs.String()} {
		if strings.Contains(l, "took this session over") {
			t.Fatalf("two connections of one session:\n%s", l)
		}
	}
}

func TestAReplicaThatLosesTheLeaseDisconnects(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	b := newBot(t, net, nil, nil)
	b.pair()
	b.run()
	b.online()
	// Someone overwrites the lease (a replica whose clock ran ahead): this
	// one stops renewing and disconnects.
	ctx := context.Background()
	key := "/bot/default/session/wa"
	_, v, _ := b.kv.Get(ctx, key)
	b.kv.Commit(ctx, []durability.Write{{Key: key, Version: v, Next: v + 1, Value: []byte(`{"owner":"elsewhere","token":7,"until":99999999999999}`)}})
	fakekit.WaitFor(t, "the disconnection", func() bool { return !b.p.Connected() && net.Online(device()) == nil })
	mustContain(t, "the log", b.logs.String(), "whatsapp-web: disconnected")
	fakekit.WaitFor(t, "the wait for the lease", func() bool { return b.waitedFor.Load() == "elsewhere" })
}

func TestSessionInPostgres(t *testing.T) {
	url := testserver.Postgres(t)
	net := whatsappwebtest.NewNetwork(account)
	b := newBot(t, net, memory.NewKv(), func(c *whatsappweb.Config) { c.Store = url })
	db, err := postgres.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(`DELETE FROM whatsmeow_device WHERE jid = $1`, device().String())
		db.Close()
	})
	b.pair()
	b.run()
	b.online()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM whatsmeow_device WHERE jid = $1`, device().String()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the device in PostgreSQL: %d rows, %v", n, err)
	}
}

func TestSessionInAFileOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	cfg := whatsappweb.Config{Store: "wa.db"}
	cfg.Check(channel.Setting{ID: "wa", Dir: dir}, func(k, f string, a ...any) { t.Fatalf("%s: %s", k, f) })
	if cfg.Store != filepath.Join(dir, "wa.db") {
		t.Fatalf("store %q is not resolved against the config's directory", cfg.Store)
	}
	net := whatsappwebtest.NewNetwork(account)
	// No Kv: a single process, the file's only device.
	b := newBot(t, net, noKv{}, func(c *whatsappweb.Config) { c.Store = cfg.Store })
	b.pair()
	b.run()
	b.online()
}

func TestOpenNeedsSQLForTheDefaultSession(t *testing.T) {
	_, err := whatsappweb.Open(whatsappweb.Config{ID: "wa"}, channel.Env{Kv: memory.NewKv()})
	if err == nil || !strings.Contains(err.Error(), "set store to a SQLite file path") {
		t.Fatalf("the memory backend as the session: %v", err)
	}
}

func TestUnpairedBotStopsPromptly(t *testing.T) {
	net := whatsappwebtest.NewNetwork(account)
	b := newBot(t, net, nil, func(c *whatsappweb.Config) { c.UnpairedPoll = time.Hour })
	b.run()
	fakekit.WaitFor(t, "the not-paired line", func() bool { return strings.Contains(b.logs.String(), "not paired") })
	b.stop() // fails the test if Run does not return
}
