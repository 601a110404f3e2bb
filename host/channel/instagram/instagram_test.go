package instagram

import (
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/instagram/instagramtest"
)

// TestCapabilities: Instagram limits texts in bytes only, shows choices and
// typing, and has no edit.
func TestCapabilities(t *testing.T) {
	messagingtest.Capabilities(t, newProvider(t, DefaultAPI, nil), 0, 1000)
}

// TestSendsToTheAccount: the Send API is the account's, with the Bearer
// token; another account's path and another token are refused, for good.
func TestSendsToTheAccount(t *testing.T) {
	contract().Refused(t, instagramtest.New(token, "17841400000000999", user))
	contract().Refused(t, instagramtest.New("another-token", accountID, user))
}

func TestCheck(t *testing.T) {
	var keys []string
	c := Config{Config: messaging.Config{AppSecret: "s", VerifyToken: "v", MediaRefHosts: []string{"cdninstagram.com", "*.x.com"}}, Token: "t", AccountID: "17/../x"}
	c.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if strings.Join(keys, ",") != "account_id,media_ref_hosts[1]" {
		t.Fatalf("problems with %q", keys)
	}
}
