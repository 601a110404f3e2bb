package messenger

import (
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
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
	contract().Refused(t, messengertest.New("another-token", user))
}

func TestCheck(t *testing.T) {
	var keys []string
	c := Config{Config: messaging.Config{AppSecret: "s", VerifyToken: "v", MediaRefHosts: []string{"cdn.example.com", "https://x"}, APIURL: "http://graph.example.com"}, PageToken: "t", PageID: "1"}
	c.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if strings.Join(keys, ",") != "api_url,media_ref_hosts[1]" {
		t.Fatalf("problems with %q", keys)
	}
}
