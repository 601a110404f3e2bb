package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// slowChannel is a channel whose sends wait until it opens; it counts the sends
// waiting at once.
type slowChannel struct {
	*fakeChannel
	open chan struct{}

	mu            sync.Mutex
	waiting, most int
}

func (g *slowChannel) Send(ctx context.Context, out channel.Outbound) (string, error) {
	g.mu.Lock()
	g.waiting++
	g.most = max(g.most, g.waiting)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return g.fakeChannel.Send(ctx, out)
}

func (g *slowChannel) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most
}

// TestPostedSendsFreeTheInstance: a Reply (post) is made after the handler
// returns its instance, so one instance serves every chat in flight while
// their replies wait on a slow channel; with a waiting Send only one chat
// could be in the channel at a time.
func TestPostedSendsFreeTheInstance(t *testing.T) {
	module := wasmbuild.Go(t, "../examples/echo")
	cfg := testConfig(t, "")
	cfg.Bot.Module, cfg.Bot.Workers, cfg.Bot.Instances = module, 8, 1
	g := &slowChannel{fakeChannel: newChannel(), open: make(chan struct{})}
	b := newTestBot(t, cfg, memory.New(), nil, g)
	defer b.stop(t)
	const chats = 6
	for i := range chats {
		b.admit(t, fmt.Sprint("c", i), fmt.Sprint("m", i), "hi")
	}
	if !waitFor(60*time.Second, func() bool { return g.inFlight() == chats }) {
		t.Fatalf("%d of %d chats' replies reached the channel at once with one instance", g.inFlight(), chats)
	}
	close(g.open)
	if !b.quiet(chats, 60*time.Second) {
		t.Fatal("did not settle")
	}
	for i := range chats {
		if n := g.count(fmt.Sprint("c", i), "echo: hi"); n != 1 {
			t.Fatalf("chat c%d got its reply %d times", i, n)
		}
	}
}

// TestPostedSendsKeepTheHandlersOrder: a Send makes the sends posted before
// it first, so the channel gets a handler's sends in the order it made them,
// under the keys <event id>:1, :2, :3.
func TestPostedSendsKeepTheHandlersOrder(t *testing.T) {
	module := wasmbuild.Go(t, "wasm/testdata/guests/faulty")
	cfg := testConfig(t, "")
	cfg.Bot.Module = module
	ch := newChannel()
	b := newTestBot(t, cfg, memory.New(), nil, ch)
	defer b.stop(t)
	b.admit(t, "c1", "m1", "mixed")
	if !b.quiet(1, 60*time.Second) {
		t.Fatal("did not settle")
	}
	if got := fmt.Sprint(ch.texts()); got != "[mixed 0 mixed 1 mixed 2]" {
		t.Fatalf("channel got %s", got)
	}
	for i := range 3 {
		if r := b.outboxRecord(t, fmt.Sprintf("web:m1:%d", i+1)); string(r.Payload) != fmt.Sprintf(`{"text":"mixed %d"}`, i) {
			t.Fatalf("key web:m1:%d holds %s", i+1, r.Payload)
		}
	}
}

// stuckChannel blocks every send to chat "slow" until release closes.
type stuckChannel struct {
	*fakeChannel
	release chan struct{}
	stuck   atomic.Int32
}

func (c *stuckChannel) Send(ctx context.Context, out channel.Outbound) (string, error) {
	if out.Chat == "slow" {
		c.stuck.Add(1)
		select {
		case <-c.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return c.fakeChannel.Send(ctx, out)
}

// TestSlowDeliveryDoesNotStallRecovery: the sweeper delivers due sends beside
// its loop, so a channel that hangs on one chat's send does not stop it from
// claiming the inbound records that wait for a retry.
func TestSlowDeliveryDoesNotStallRecovery(t *testing.T) {
	cfg := testConfig(t, "")
	ch := &stuckChannel{fakeChannel: newChannel(), release: make(chan struct{})}
	h := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		switch {
		case ev.Chat == "slow":
			_, err := env.Enqueue(ctx, abi.SendRequest{Chat: ev.Chat, Text: "late"})
			return err
		case ev.Attempt == 1:
			return errors.New("first attempt fails") // retried by the sweeper
		}
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "retried"})
		return err
	})
	b := newTestBot(t, cfg, memory.New(), h, ch)
	defer func() {
		close(ch.release)
		b.stop(t)
	}()
	b.admit(t, "slow", "s1", "x")
	if !waitFor(60*time.Second, func() bool { return ch.stuck.Load() > 0 }) {
		t.Fatal("the sweeper never delivered the enqueued send")
	}
	b.admit(t, "other", "o1", "x")
	if !waitFor(60*time.Second, func() bool { return ch.count("other", "retried") == 1 }) {
		t.Fatalf("the retry waited for a hanging delivery to another chat: %q", ch.texts())
	}
}
