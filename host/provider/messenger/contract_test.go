package messenger

import (
	"testing"

	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/provider/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/provider/messenger/messengertest"
	"github.com/botrun/botrun/host/provider/providertest"
)

const (
	pageToken = "EAAB-page-token-test"
	appSecret = "fb-app-secret-123"
	pageID    = "104050205060708"
	user      = "6543210987654321"
)

func newProvider(t testing.TB, api string, admit provider.Admitter) *Provider {
	p, err := Open(Config{ID: "fb", PageToken: pageToken, AppSecret: appSecret, VerifyToken: "verify-me", PageID: pageID, APIURL: api}, provider.Env{Admitter: admit})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// contract is the channel and its fake as the contract suite sees them.
func contract() messagingtest.Contract {
	return messagingtest.Contract{
		Type: "messenger", ID: "fb", Object: "page", Owner: pageID, AppSecret: appSecret,
		Fake: messengertest.New(pageToken, user), User: user,
		New: func(t testing.TB, url string, admit provider.Admitter) provider.Provider {
			return newProvider(t, url+"/"+messengertest.Version, admit)
		},
		Secrets: []string{pageToken, appSecret, "verify-me"},
	}
}

func TestContract(t *testing.T) { providertest.Run(t, contract().Channel()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { providertest.Bench(b, contract().Channel()) }
