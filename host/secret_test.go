package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestGuestRandomSeededBySecret checks that a guest's random bytes are keyed by
// a per-bot secret kept in the backend: two bots with their own backends read
// different bytes for the same event id (which the sender picks); the same
// backend reads the same bytes after a restart and on replicas that start
// together; and the bytes are not those an event id alone derives.
func TestGuestRandomSeededBySecret(t *testing.T) {
	module := wasmbuild.Go(t, "wasm/testdata/guests/faulty")
	ev := abi.Event{ID: "web:chosen-by-the-sender", Provider: "web", Chat: "c1", Text: "entropy", Attempt: 1, ReceivedAt: 1764412800000}
	dir := t.TempDir()
	openDB := func(name string) durability.Backend {
		b, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(dir, name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	// entropy starts a bot on backend and returns what its guest sends for ev.
	entropy := func(backend durability.Backend) string {
		cfg, err := parseConfig(t, "")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Bot.Module = module
		cfg.Bot.DataDir = wasmbuild.DataDir // the shared compile cache
		b, err := New(context.Background(), cfg, Options{Logger: discard, Backend: backend})
		if err != nil {
			t.Error(err)
			return ""
		}
		defer b.Stop(context.Background())
		log := &sendLog{state: map[string][]byte{}}
		if _, err := b.guest.Handle(context.Background(), ev, log); err != nil {
			t.Error(err)
		}
		return log.String()
	}

	a := openDB("a.db")
	first, restarted := entropy(a), entropy(a)
	other := entropy(openDB("b.db"))
	if first == "" || first != restarted {
		t.Fatalf("the same backend across a restart: %q then %q, want the same bytes", first, restarted)
	}
	if other == first {
		t.Fatalf("two bots with their own backends read the same random bytes for event %s: %q", ev.ID, first)
	}

	// The bytes the event id alone used to seed are not what the guest reads.
	old := rand.NewChaCha8(sha256.Sum256([]byte("botrun/random/" + ev.ID)))
	var b [8]byte
	old.Read(b[:])
	if strings.Contains(first, hex.EncodeToString(b[:])) {
		t.Fatalf("the guest read the bytes sha256(event id) seeds: %q", first)
	}
	cfg, err := parseConfig(t, "")
	if err != nil {
		t.Fatal(err)
	}
	j, err := a.Open(context.Background(), Scope(cfg))
	if err != nil {
		t.Fatal(err)
	}
	v, ok, err := j.State.Get(context.Background(), rules.RandomSecretKey)
	if err != nil || !ok || len(v) != randomSecretSize {
		t.Fatalf("secret in the backend = %x %v %v, want %d random bytes", v, ok, err, randomSecretSize)
	}

	// Replicas starting together on one database agree on one secret.
	shared := filepath.Join(dir, "shared.db")
	var wg sync.WaitGroup
	got := make([]string, 4)
	for i := range got {
		wg.Go(func() {
			b, err := sqlite.Open(context.Background(), sqlite.Options{Path: shared})
			if err != nil {
				t.Error(err)
				return
			}
			defer b.Close()
			got[i] = entropy(b)
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] == "" || got[i] != got[0] || got[i] == first {
			t.Fatalf("replicas started together read %q, want one value of their own", got)
		}
	}
}
