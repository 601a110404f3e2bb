package whatsappweb

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/kvlease"
)

// untouchedClient is a connected client no call may reach: every method
// panics (its embedded interface is nil).
type untouchedClient struct{ Client }

// TestNothingIsAdmittedOrSentWithoutTheLease: a process whose lease ended
// while its client is still set (frozen past its lease, then thawed)
// neither journals an inbound message nor sends.
func TestNothingIsAdmittedOrSentWithoutTheLease(t *testing.T) {
	j := channeltest.NewJournal()
	kv := memory.NewKv()
	p, err := Open(Config{ID: "wa", Store: filepath.Join(t.TempDir(), "s.db")}, channel.Env{ID: "wa", Kv: kv, Admitter: j})
	if err != nil {
		t.Fatal(err)
	}
	lease := kvlease.New(kv, "session", "me", time.Minute)
	p.fence = lease // as RunSession records it
	p.setClient(untouchedClient{})
	ctx := context.Background()

	_, err = p.Send(ctx, channel.Outbound{Chat: "120363000000000001@g.us", Text: "hello"})
	if !errors.Is(err, errHeldElsewhere) || httpkit.Permanent(err) {
		t.Fatalf("a send without the lease: %v, want a retryable 'held elsewhere'", err)
	}
	if err := p.Edit(ctx, "120363000000000001@g.us", "3EB0AAAA", "hello"); !errors.Is(err, errHeldElsewhere) {
		t.Fatalf("an edit without the lease: %v", err)
	}

	alice := types.NewJID("15552223333", types.DefaultUserServer)
	h := &handler{p: p, ctx: ctx, log: p.log, end: func(ending) {}, redeliver: make(chan struct{}, 1)}
	e := &events.Message{Info: types.MessageInfo{ID: "ABC", MessageSource: types.MessageSource{Chat: alice, Sender: alice}},
		Message: &waE2E.Message{Conversation: proto.String("hi")}}
	if h.message(e) {
		t.Fatal("a message was acknowledged without the lease")
	}
	if n := len(j.Admitted()); n != 0 {
		t.Fatalf("%d messages journaled without the lease", n)
	}

	// Holding it, the same message is journaled.
	if ok, _, err := lease.TryAcquire(ctx); !ok || err != nil {
		t.Fatalf("taking the lease: %v %v", ok, err)
	}
	if !h.message(e) || len(j.Admitted()) != 1 {
		t.Fatal("a message was not journaled under the lease")
	}
}

// TestMediaFetcherUsesNoProxy: through a proxy, the proxy would dial the
// media URL's address, and the internal-address guard would not apply.
func TestMediaFetcherUsesNoProxy(t *testing.T) {
	if tr := mediaFetcher().Transport.(*http.Transport); tr.Proxy != nil {
		t.Fatal("the outbound media fetcher uses a proxy")
	}
}
