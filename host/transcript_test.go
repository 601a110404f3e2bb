package host

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/sqlite"
)

// TestTranscriptSeqPerChat: each chat counts its own seq, so concurrent
// replies to many chats never conflict, and one chat's entries keep the order
// of its appends. A chat written by an earlier version (one provider-wide seq)
// continues above that seq, as do new chats.
func TestTranscriptSeqPerChat(t *testing.T) {
	kv, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "bot.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	ctx := context.Background()
	tr := &kvTranscript{kv: kv, prefix: "s/tr/"}
	// As an earlier version left it: chat "old" has entry 7 of the
	// provider-wide seq, which reached 9.
	seven := int64(7)
	if err := kv.Commit(ctx, []durability.Write{
		{Key: "s/tr/web/seq", Version: durability.AnyVersion, Value: []byte("9")},
		{Key: "s/tr/web/chat/old/" + pad(7), Version: durability.AnyVersion, Value: []byte(`{"chat":"old","text":"before"}`), Group: "s/tr/web/chat/old/", Order: &seven},
	}); err != nil {
		t.Fatal(err)
	}
	if seq, err := tr.Append(ctx, "web", "old", "after"); err != nil || seq != 10 {
		t.Fatalf("first append to a chat of the earlier version: seq %d, %v; want 10", seq, err)
	}
	var wg sync.WaitGroup
	for c := range 20 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := tr.Append(ctx, "web", fmt.Sprint("c", c), fmt.Sprint(i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for c := range 20 {
		es, err := tr.After(ctx, "web", fmt.Sprint("c", c), 0, 100)
		if err != nil || len(es) != 10 {
			t.Fatalf("chat c%d: %d entries, %v", c, len(es), err)
		}
		// Every chat starts above the earlier version's seq.
		for i, e := range es {
			if e.Seq != int64(10+i) || e.Text != fmt.Sprint(i) {
				t.Fatalf("chat c%d entry %d: %+v, want seq %d text %d", c, i, e, 10+i, i)
			}
		}
	}
	es, err := tr.After(ctx, "web", "old", 7, 10)
	if err != nil || len(es) != 1 || es[0].Seq != 10 || es[0].Text != "after" {
		t.Fatalf("chat old after 7: %+v, %v", es, err)
	}
}
