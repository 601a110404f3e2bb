package events

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/postgres"
	evj "github.com/botrun/botrun/eventjournal"
	"github.com/botrun/botrun/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

var tables atomic.Int64

// pgOutbox is a PostgreSQL store with a table of its own.
func pgOutbox(t *testing.T) durability.Kv {
	s, err := postgres.OpenStore(context.Background(), postgres.Options{URL: testserver.Postgres(t),
		TablePrefix: fmt.Sprintf("ev%d_%d_", os.Getpid(), tables.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kinds open each kind of journal the backend takes, at path.
var kinds = map[string]func(path string) (Journal, error){
	"file": func(path string) (Journal, error) {
		return evj.OpenFile(path, &evj.FileOptions{Lock: true, AppendLog: true, CompactEvery: 50, NoFsync: true})
	},
	"file-snapshot": func(path string) (Journal, error) {
		return evj.OpenFile(path, &evj.FileOptions{Lock: true, NoFsync: true})
	},
	"shared": func(path string) (Journal, error) {
		return evj.OpenShared(path, &evj.SharedOptions{AppendLog: true, CompactEvery: 50, NoFsync: true})
	},
}

// withAppEvents fills j with n of an application's own events first (more
// than a range page, due and not, on channels and without), so the bot's
// journals run beside them. One commit writes them all.
func withAppEvents(t *testing.T, j Journal, n int) {
	var writes []durability.Write
	for i := range n {
		e := evj.EventRecord{ID: fmt.Sprint("app-", i), Channel: []string{"", "orders", "mail"}[i%3], Type: "app.thing",
			Time: int64(i * 3), State: evj.Pending}
		w, err := evj.StoredWrite(&e, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, w)
	}
	if err := j.Kv().Commit(context.Background(), writes); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	for name, open := range kinds {
		for _, outbox := range []string{"sidecar", "postgres"} {
			t.Run(name+"/"+outbox, func(t *testing.T) {
				var opts []durabilitytest.Option
				if name == "file-snapshot" {
					opts = append(opts, durabilitytest.WholeRewrites)
				}
				durabilitytest.Run(t, func(t *testing.T) durability.Backend {
					j, err := open(filepath.Join(t.TempDir(), "events.json"))
					if err != nil {
						t.Fatal(err)
					}
					// A snapshot rewritten whole on every write: fewer.
					n := 300
					if name == "file-snapshot" {
						n = 20
					}
					withAppEvents(t, j, n)
					var kv durability.Kv
					if outbox == "postgres" {
						kv = pgOutbox(t)
					}
					b, err := New(j, kv)
					if err != nil {
						t.Fatal(err)
					}
					return b
				}, opts...)
			})
		}
	}
}

// TestInboundRecordsAreEvents: the bot's inbound records are the journal's
// events on botrun:durable, typed by kind; a Replay through the events API is
// claimed by the bot's next sweep; no worker's claim takes them.
func TestInboundRecordsAreEvents(t *testing.T) {
	for name, open := range kinds {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j, err := open(filepath.Join(t.TempDir(), "events.json"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(j, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			scope := durability.Scope{Bot: "bot", Connection: "default"}
			js, err := b.Open(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			msg := []byte(`{"id":"web:m1","chat":"c1","text":"hi"}`)
			press := []byte(`{"id":"web:m2","chat":"c1","text":"Yes","kind":"` + abi.EventInteraction + `","interaction":{"id":"yes"}}`)
			l := durability.Lease{Owner: "bot-1", Now: 100, Until: 60100}
			js.Inbox.Put(ctx, durability.InboxPut{ID: "web:m1", Provider: "web", Chat: "c1", Payload: msg}, 100, &l)
			js.Inbox.Put(ctx, durability.InboxPut{ID: "web:m2", Provider: "web", Chat: "c1", Payload: press}, 110, nil)
			if err := js.Inbox.Complete(ctx, "web:m1", 1, durability.Completion{Effects: []durability.StateWrite{{Key: "k", Value: []byte("v")}}, Module: "mod", Now: 150}); err != nil {
				t.Fatal(err)
			}
			evs, err := j.List(ctx, evj.Filter{Channel: Channel})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 2 {
				t.Fatalf("events on %s: %+v", Channel, evs)
			}
			id1 := "botrun:" + scope.ID() + "/web:m1"
			if e := evs[0]; e.ID != id1 || e.Type != TypeMessage || e.State != evj.Done || string(e.Payload) != string(msg) || e.Time != 100 {
				t.Fatalf("message event: %+v", e)
			}
			if e := evs[1]; e.Type != TypeInteraction || e.State != evj.Pending {
				t.Fatalf("interaction event: %+v", e)
			}
			// A worker never takes them, nor purges them (the bot's
			// retention does).
			if got, err := j.Claim(ctx, evj.ClaimOptions{Owner: "worker"}); err != nil || len(got) != 0 {
				t.Fatalf("a claim without a channel took %+v, %v", got, err)
			}
			if got, err := j.Claim(ctx, evj.ClaimOptions{Owner: "worker", Channel: Channel}); !errors.Is(err, evj.ErrReserved) || len(got) != 0 {
				t.Fatalf("a claim of %s took %+v, %v (want ErrReserved)", Channel, got, err)
			}
			if n, err := j.Purge(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
				t.Fatalf("the journal's purge deleted %d of the bot's records (%v)", n, err)
			}
			// Replayed through the events API: the bot's sweep claims it.
			if err := j.Replay(ctx, id1); err != nil {
				t.Fatal(err)
			}
			if r, _ := js.Inbox.Get(ctx, "web:m1"); r.State != durability.InboxPending || r.Module != "mod" || r.Chat != "c1" {
				t.Fatalf("inbound record after the journal's replay: %+v", r)
			}
			got, err := js.Inbox.ClaimDue(ctx, durability.ClaimOptions{Lease: durability.Lease{Owner: "bot-1", Now: 200, Until: 60200}, PendingBefore: 200})
			if err != nil || !slices.Equal([]string{got[0].ID, got[1].ID}, []string{"web:m1", "web:m2"}) || got[0].Token != 2 {
				t.Fatalf("sweep after the replay: %+v %v", got, err)
			}
			if v, ok, _ := js.State.Get(ctx, "k"); !ok || string(v) != "v" {
				t.Fatal("state written with the completion is missing")
			}
		})
	}
}

func TestUnlockedFileJournalRefused(t *testing.T) {
	j, err := evj.OpenFile(filepath.Join(t.TempDir(), "events.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := New(j, nil); !errors.Is(err, ErrUnlocked) {
		t.Fatalf("New over an unlocked file journal: %v", err)
	}
}

// TestSplitCommitRefused: with a separate outbox, a commit that spans both
// stores is refused whole, and the inbox offers no CompleteWithSent.
func TestSplitCommitRefused(t *testing.T) {
	ctx := context.Background()
	j, err := kinds["file"](filepath.Join(t.TempDir(), "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(j, pgOutbox(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	js, _ := b.Open(ctx, durability.Scope{Bot: "b"})
	if _, ok := js.Inbox.(durability.CompleteSender); ok {
		t.Fatal("a split backend offers CompleteWithSent")
	}
	err = b.Kv().Commit(ctx, []durability.Write{
		{Key: "s/st/k", Version: durability.AnyVersion, Value: []byte("1")},
		{Key: "s/out/k", Version: durability.AnyVersion, Value: []byte("{}")},
	})
	if err == nil {
		t.Fatal("a commit across the two stores was accepted")
	}
	if _, v, _ := b.Kv().Get(ctx, "s/st/k"); v != 0 {
		t.Fatal("half of a refused commit landed")
	}
}

func FuzzInboundEvent(f *testing.F) {
	f.Add([]byte(`{"id":"botrun:ab/web:1","channel":"botrun:durable","type":"botrun.inbound.message","time":5,"payload":"e30=","meta":{"provider":"web","chat":"c"},"state":"done","attempts":1,"token":1,"updated_at":6}`))
	f.Add([]byte(`{"id":"x","type":"t","state":"pending","meta":{"provider":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := evj.DecodeRecord(b)
		if err != nil {
			return
		}
		rec, err := toInbox("web:1", e)
		if err != nil {
			return
		}
		back := toEvent("ab", rec)
		if back.State != e.State || back.Token != e.Token || string(back.Payload) != string(e.Payload) {
			t.Fatalf("round trip: %+v -> %+v", e, back)
		}
	})
}
