package messenger

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/messenger/messengertest"
)

// TestCapabilities: Messenger limits texts in characters, shows choices and
// typing, and has no edit.
func TestCapabilities(t *testing.T) {
	messagingtest.Capabilities(t, newProvider(t, DefaultAPI, nil), 2000, 0)
}

// TestTokenErrorsArePermanentAndHidden: a revoked page token (190) is not
// retried, and the token never shows in an error.
func TestTokenErrorsArePermanentAndHidden(t *testing.T) {
	srv := httptest.NewServer(messengertest.New("another-token", user))
	defer srv.Close()
	p := newProvider(t, srv.URL+"/"+messengertest.Version, nil)
	_, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "x"})
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), pageToken) {
		t.Fatalf("send with a bad token: %v", err)
	}
}

func TestCheck(t *testing.T) {
	var keys []string
	c := Config{PageToken: "t", AppSecret: "s", VerifyToken: "v", PageID: "1", MediaRefHosts: []string{"cdn.example.com", "https://x"}, APIURL: "http://graph.example.com"}
	c.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if strings.Join(keys, ",") != "api_url,media_ref_hosts[1]" {
		t.Fatalf("problems with %q", keys)
	}
}
