package host

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestStateWritesCapped checks the state limits of SPEC.md 4.2 through a real
// guest: an event sets at most 64 keys and 1 MiB of keys and values (the rest
// of its state_set calls get TOO_LARGE and the guest carries on), and a
// chat's state stops growing at bot.max_chat_state (4 MiB by default), while
// writes that do not grow it still land. Only what was accepted is committed.
func TestStateWritesCapped(t *testing.T) {
	module := wasmbuild.Go(t, "wasm/testdata/guests/hostile")
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	backend := memory.New()
	ch := newChannel()
	b := newTestBot(t, cfg, backend, nil, ch)
	defer b.stop(t)
	j, err := backend.Open(context.Background(), Scope(cfg))
	if err != nil {
		t.Fatal(err)
	}
	stored := func(chat, prefix string, n int) int {
		got := 0
		for i := range n {
			if _, ok, err := j.State.Get(context.Background(), fmt.Sprintf("chat/web/%s/%s%d", chat, prefix, i)); err != nil {
				t.Fatal(err)
			} else if ok {
				got++
			}
		}
		return got
	}
	const tooLarge = "first error: botrun.state_set: TOO_LARGE"
	events := 0
	run := func(chat, cmd, want string) {
		t.Helper()
		events++
		if _, err := b.admit(t, chat, fmt.Sprint("s", events), cmd); err != nil {
			t.Fatal(err)
		}
		if !b.quiet(events, 60*time.Second) {
			t.Fatalf("%q did not settle", cmd)
		}
		if r := b.inboxState(t, fmt.Sprint("web:s", events)); r.State != durability.InboxDone {
			t.Fatalf("%q: record %+v, want done", cmd, r)
		}
		if got := ch.texts(); len(got) != events || got[events-1] != want {
			t.Fatalf("%q answered %q, want %q", cmd, got, want)
		}
	}

	// 150 values of 1 MiB: none fits beside its key in the event's 1 MiB.
	run("c1", "state 150 1048576 big", "state set 0 of 150; "+tooLarge)
	// 150 values of 256 KiB: three fit.
	run("c1", "state 150 262144 k", "state set 3 of 150; "+tooLarge)
	// 100 small keys: 64 fit.
	run("c1", "state 100 10 n", "state set 64 of 100; "+tooLarge)
	if got := [3]int{stored("c1", "big", 150), stored("c1", "k", 150), stored("c1", "n", 100)}; got != [3]int{0, 3, 64} {
		t.Fatalf("committed keys %v, want [0 3 64]", got)
	}

	// The chat quota: four events of 3 x 300,002 bytes, then the fifth
	// crosses 4 MiB at its second key. Overwriting keys at the same size
	// still works; another chat has its own quota.
	for _, p := range []string{"a", "b", "c", "d"} {
		run("c2", "state 3 300000 "+p, "state set 3 of 3; first error: ")
	}
	run("c2", "state 3 300000 e", "state set 1 of 3; "+tooLarge)
	run("c2", "state 3 300000 a", "state set 3 of 3; first error: ")
	run("c3", "state 3 300000 a", "state set 3 of 3; first error: ")
	v, ok, err := j.State.Get(context.Background(), rules.UsageKey("chat/web/c2/"))
	if err != nil || !ok {
		t.Fatalf("usage record: %v %v", ok, err)
	}
	if n, _ := strconv.Atoi(string(v)); n != 13*300002 || stored("c2", "e", 3) != 1 {
		t.Fatalf("chat c2 holds %s bytes and %d e keys, want %d and 1", v, stored("c2", "e", 3), 13*300002)
	}
}
