package metawhatsapp

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/metawhatsapp/metawhatsapptest"
)

// TestTyping: typing marks the answered message read with a typing
// indicator; without a message to answer it is refused; WhatsApp has no edit.
func TestTyping(t *testing.T) {
	api := metawhatsapptest.New(token, phoneID, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := newProvider(t, srv.URL+"/"+metawhatsapptest.Version, nil)
	if err := p.Typing(context.Background(), user, "wamid.IN1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Typing(context.Background(), user, ""); !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Fatalf("typing without a message: %v", err)
	}
	if err := p.Typing(context.Background(), user, "not-a-wamid"); err == nil {
		t.Fatal("the fake accepted a bad message id")
	}
	api.Lock()
	defer api.Unlock()
	if len(api.Read) != 1 || api.Read[0] != "wamid.IN1" {
		t.Fatalf("read %v", api.Read)
	}
	if _, ok := any(p).(channel.Editor); ok {
		t.Fatal("the WhatsApp Cloud channel claims edits; the API has none")
	}
}
