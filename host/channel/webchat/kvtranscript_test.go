package webchat

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/durability/postgres"
	"github.com/botrun/botrun/durability/redis"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/internal/testserver"
)

var prefixes atomic.Int64

func uniquePrefix(p string) string {
	return fmt.Sprintf("%s%d_%d_", p, os.Getpid(), prefixes.Add(1))
}

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

// TestTranscriptSeqPerChat: each chat counts its own seq, so concurrent
// replies to many chats never conflict, and one chat's entries keep the order
// of its appends. A chat written by an earlier version (one provider-wide seq)
// continues above that seq, as do new chats.
func TestTranscriptSeqPerChat(t *testing.T) {
	for _, bk := range []struct {
		name string
		open func() (durability.Backend, error)
	}{
		{"memory", func() (durability.Backend, error) { return memory.New(), nil }},
		{"sqlite", func() (durability.Backend, error) {
			return sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "bot.db")})
		}},
		{"postgres", func() (durability.Backend, error) {
			return postgres.Open(context.Background(), postgres.Options{URL: testserver.Postgres(t), TablePrefix: uniquePrefix("tr")})
		}},
		{"redis", func() (durability.Backend, error) {
			return redis.Open(context.Background(), redis.Options{URL: testserver.Redis(t), Prefix: uniquePrefix("tr")})
		}},
		{"redis-cluster", func() (durability.Backend, error) {
			return redis.Open(context.Background(), redis.Options{Cluster: testserver.RedisCluster(t), Prefix: uniquePrefix("tr")})
		}},
	} {
		t.Run(bk.name, func(t *testing.T) {
			backend, err := bk.open()
			if err != nil {
				t.Fatal(err)
			}
			defer backend.Close()
			transcriptSeqPerChat(t, backend.(interface{ Kv() durability.Kv }).Kv())
		})
	}
}

func transcriptSeqPerChat(t *testing.T, kv durability.Kv) {
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
	if seq, err := tr.Append(ctx, "web", Entry{Chat: "old", Text: "after"}); err != nil || seq != 10 {
		t.Fatalf("first append to a chat of the earlier version: seq %d, %v; want 10", seq, err)
	}
	var wg sync.WaitGroup
	for c := range 20 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := tr.Append(ctx, "web", Entry{Chat: fmt.Sprint("c", c), Text: fmt.Sprint(i)}); err != nil {
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
	// Another process (a replica, or this one restarted) reads the same
	// entries from the store, and appends after them.
	other := &kvTranscript{kv: kv, prefix: "s/tr/"}
	if es, err := other.After(ctx, "web", "c3", 9, 100); err != nil || len(es) != 10 || es[9].Seq != 19 {
		t.Fatalf("chat c3 read by another process: %+v, %v", es, err)
	}
	if seq, err := other.Append(ctx, "web", Entry{Chat: "c3", Text: "from the other"}); err != nil || seq != 20 {
		t.Fatalf("append by another process: seq %d, %v", seq, err)
	}
	if seq, err := tr.Append(ctx, "web", Entry{Chat: "c3", Text: "back here"}); err != nil || seq != 21 {
		t.Fatalf("append after another process's: seq %d, %v (a stale cache must not reuse a seq)", seq, err)
	}
	es, err = tr.After(ctx, "web", "c3", 18, 100)
	if err != nil || len(es) != 3 || es[0].Seq != 19 || es[1].Text != "from the other" || es[2].Seq != 21 {
		t.Fatalf("chat c3 after 18: %+v, %v", es, err)
	}
}
