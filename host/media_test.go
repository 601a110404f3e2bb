package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/wasm"
)

// countingLoader downloads "bytes of <ref>" and counts the downloads per ref;
// "gone" is no longer on the channel.
type countingLoader struct {
	*fakeChannel
	mu        sync.Mutex
	downloads map[string]int
}

func (c *countingLoader) LoadMedia(_ context.Context, m channel.Media, _ int64) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.downloads[m.Ref]++
	if m.Ref == "gone" {
		return nil, fmt.Errorf("%w: HTTP 404", channel.ErrMediaUnavailable)
	}
	return []byte("bytes of " + m.Ref), nil
}

func (c *countingLoader) count(ref string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downloads[ref]
}

// TestMediaLoadCachedPerEvent: a guest that loads the same media index twice
// in one event downloads it once (a final failure is kept too); the next
// event downloads again.
func TestMediaLoadCachedPerEvent(t *testing.T) {
	loads := make(chan []string, 4)
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		var out []string
		for _, i := range []int{0, 1, 0, 1, 0} {
			b, err := env.LoadMedia(ctx, i)
			var u *abi.MediaUnavailableError
			switch {
			case err == nil:
				out = append(out, string(b))
			case errors.As(err, &u):
				out = append(out, u.Reason)
			default:
				return err
			}
		}
		loads <- out
		return nil
	})
	ch := &countingLoader{fakeChannel: newChannel(), downloads: map[string]int{}}
	b := newTestBot(t, testConfig(t, ""), memory.New(), h, ch)
	defer b.stop(t)
	media := []channel.Media{{Type: "image", Ref: "photo"}, {Type: "image", Ref: "gone"}}
	want := []string{"bytes of photo", "rehydrate-failed", "bytes of photo", "rehydrate-failed", "bytes of photo"}
	for n, id := range []string{"m1", "m2"} {
		if _, err := b.Admit(context.Background(), "web", channel.Message{ID: id, Chat: "c1", Media: media}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-loads:
			if !slices.Equal(got, want) {
				t.Fatalf("event %s: media_load gave %q, want %q", id, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("event %s was not handled", id)
		}
		if p, g := ch.count("photo"), ch.count("gone"); p != n+1 || g != n+1 {
			t.Fatalf("after %d event(s): photo downloaded %d times, gone %d; want once per event", n+1, p, g)
		}
	}
}
