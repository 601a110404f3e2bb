package messenger

import (
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/messenger/messengertest"
)

const (
	pageToken = "EAAB-page-token-test"
	appSecret = "fb-app-secret-123"
	pageID    = "104050205060708"
	user      = "6543210987654321"
)

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{Config: messaging.Config{ID: "fb", AppSecret: appSecret, VerifyToken: "verify-me", APIURL: api}, PageToken: pageToken, PageID: pageID}, channel.Env{Admitter: admit}))
}

// contract is the channel and its fake as the contract suite sees them.
func contract() messagingtest.Contract {
	return messagingtest.Contract{
		Type: "messenger", ID: "fb", Object: "page", Owner: pageID, AppSecret: appSecret,
		Fake: messengertest.New(pageToken, user), User: user,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url+"/"+messengertest.Version, admit)
		},
		Secrets: []string{pageToken, appSecret, "verify-me"},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract().Channel()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract().Channel()) }
