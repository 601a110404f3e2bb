package instagram

import (
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/instagram/instagramtest"
)

const (
	token     = "IGAA-token-test"
	appSecret = "ig-app-secret-123"
	accountID = "17841400000000001"
	user      = "1234567890123456"
)

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{Config: messaging.Config{ID: "ig", AppSecret: appSecret, VerifyToken: "verify-me", APIURL: api}, Token: token, AccountID: accountID}, channel.Env{Admitter: admit}))
}

// contract is the channel and its fake as the contract suite sees them.
func contract() messagingtest.Contract {
	return messagingtest.Contract{
		Type: "instagram", ID: "ig", Object: "instagram", Owner: accountID, AppSecret: appSecret,
		Fake: instagramtest.New(token, accountID, user), User: user,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url+"/"+instagramtest.Version, admit)
		},
		Secrets: []string{token, appSecret, "verify-me"},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract().Channel()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract().Channel()) }
