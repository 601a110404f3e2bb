package evolution

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/evolution/evolutiontest"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
)

const (
	apiKey   = "evo-instance-token-0001"
	jwtKey   = "evolution-jwt-key-0123456789"
	instance = "botrun"
	user     = "5511999999999"
	userJID  = user + "@s.whatsapp.net"
)

var photo = []byte("\xff\xd8\xff\xe0 an evolution jpeg")

// newProvider opens the channel at api; jwt is its jwt_key ("" checks the
// body's apikey instead).
func newProvider(t testing.TB, api string, admit channel.Admitter, jwt string) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "evo", APIURL: api, APIKey: apiKey, Instance: instance, JWTKey: jwt}, channel.Env{Admitter: admit}))
}

// post is a webhook request for body, with a JWT signed by key ("" none).
func post(body []byte, key string) *http.Request {
	r := httptest.NewRequest("POST", "/webhooks/evo", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set(SignatureHeader, "Bearer "+evolutiontest.JWT(key, time.Now()))
	}
	return r
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := evolutiontest.New(apiKey, instance, user)
	api.Media["contract-image"] = photo
	other := evolutiontest.New(apiKey, "another-instance", user)
	return channeltest.Channel{
		Type: "evolution",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url, admit, jwtKey)
		},
		Signed:          func(_ testing.TB, body []byte) *http.Request { return post(body, jwtKey) },
		SignatureHeader: SignatureHeader,
		TextBody: func(msgID, text string) []byte {
			return api.Upsert(evolutiontest.Text(msgID, user, text))
		},
		ImageBody: func(_, msgID string) []byte {
			return api.Upsert(evolutiontest.Image(msgID, user, "", photo))
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			api.Upsert(evolutiontest.FromMe("BAE5OWN", user, "my own send")),
			api.Upsert(evolutiontest.Text("3EB0STATUS", "status@broadcast", "a status")),
			api.Event("messages.update", apiKey, map[string]any{"keyId": "BAE5OWN", "remoteJid": userJID, "fromMe": true, "status": "READ"}),
			api.Event("connection.update", apiKey, map[string]any{"instance": instance, "state": "open"}),
			api.Event("send.message", apiKey, evolutiontest.FromMe("BAE5OWN2", user, "sent")),
			other.Upsert(evolutiontest.Text("3EB0OTHER", user, "for another instance")),
		},
		MaxBody:   MaxBody,
		Chat:      userJID,
		MediaOut:  channel.Media{Type: "image", URL: "https://example.com/cat.jpg", MIME: "image/jpeg"},
		GoneMedia: func(string) channel.Media { return channel.Media{Type: "image", Ref: "3EB0GONE"} },
		Texts:     api.Texts,
		Failures: gatewaytest.Failures(api.Account, gatewaytest.Chats{Chat: user, Unknown: "5511000000000",
			Group: "120363000000000000@g.us", Gone: "3EB0GONE"}, 4*time.Second),
		Secrets: []string{apiKey, jwtKey},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one authenticated text webhook read, verified, parsed
// and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }
