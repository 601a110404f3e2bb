package instagram

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/instagram/instagramtest"
)

// TestCapabilities: Instagram limits texts in bytes only, shows choices and
// typing, and has no edit.
func TestCapabilities(t *testing.T) {
	messagingtest.Capabilities(t, newProvider(t, DefaultAPI, nil), 0, 1000)
}

// TestSendsToTheAccount: the Send API is the account's, with the Bearer
// token; another account's path is refused by the fake.
func TestSendsToTheAccount(t *testing.T) {
	srv := httptest.NewServer(instagramtest.New(token, "17841400000000999", user))
	defer srv.Close()
	p := newProvider(t, srv.URL+"/"+instagramtest.Version, nil)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "x"}); !httpkit.Permanent(err) {
		t.Fatalf("a send on another account's path: %v", err)
	}
	srv2 := httptest.NewServer(instagramtest.New("another-token", accountID, user))
	defer srv2.Close()
	p = newProvider(t, srv2.URL+"/"+instagramtest.Version, nil)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "x"}); !httpkit.Permanent(err) || strings.Contains(err.Error(), token) {
		t.Fatalf("send with a bad token: %v", err)
	}
}

func TestCheck(t *testing.T) {
	var keys []string
	c := Config{Token: "t", AppSecret: "s", VerifyToken: "v", AccountID: "17/../x", MediaRefHosts: []string{"cdninstagram.com", "*.x.com"}}
	c.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if strings.Join(keys, ",") != "account_id,media_ref_hosts[1]" {
		t.Fatalf("problems with %q", keys)
	}
}
