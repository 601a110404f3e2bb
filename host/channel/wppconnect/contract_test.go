package wppconnect

import (
	"net/http"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
	"github.com/botrun/botrun/host/channel/wppconnect/wppconnecttest"
)

const (
	session   = "botrun"
	apiToken  = "$2b$10$wppconnect-session-token-0001"
	hookToken = "wpp-webhook-token-0123456789"
	user      = "5511999999999"
	userJID   = user + "@c.us"
)

var photo = []byte("\xff\xd8\xff\xe0 a wppconnect jpeg")

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "wpp", APIURL: api, Token: apiToken, Session: session, WebhookToken: hookToken}, channel.Env{Admitter: admit}))
}

// post is a webhook request for body on the URL with the webhook token.
func post(body []byte) *http.Request {
	return channeltest.Webhook("/webhooks/wpp?"+TokenParameter+"="+hookToken, body)
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := wppconnecttest.New(session, apiToken, user)
	api.Groups["120363012345678901"] = true
	api.Media[wppconnecttest.MessageID(user, "contract-image")] = photo
	other := wppconnecttest.New("another-session", apiToken)
	location := wppconnecttest.Text("3EB0LOC", user, "")
	location["type"], location["lat"], location["lng"] = "location", -22.9, -43.2
	status := wppconnecttest.Text("3EB0STATUS", user, "a status")
	status["chatId"], status["from"] = "status@broadcast", "status@broadcast"
	return channeltest.Channel{
		Type: "wppconnect",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url, admit)
		},
		Signed:     func(_ testing.TB, body []byte) *http.Request { return post(body) },
		QueryToken: TokenParameter,
		TextBody: func(msgID, text string) []byte {
			return api.Event("onmessage", wppconnecttest.Text(msgID, user, text))
		},
		ImageBody: func(_, msgID string) []byte {
			return api.Event("onmessage", wppconnecttest.Image(msgID, user, "", []byte("a thumbnail")))
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			api.Event("onmessage", wppconnecttest.FromMe("3EB0OWN", user, "my own send")),
			api.Event("onanymessage", wppconnecttest.Text("3EB0ANY", user, "seen by onmessage")),
			api.Event("onmessage", status),
			api.Event("onmessage", location),
			api.Event("onack", map[string]any{"id": map[string]any{"_serialized": "true_5511999999999@c.us_3EB0OWN"}, "ack": 3}),
			api.Event("onpresencechanged", map[string]any{"id": userJID, "isOnline": true}),
			api.Event("status-find", map[string]any{"status": "inChat"}),
			other.Event("onmessage", wppconnecttest.Text("3EB0OTHER", user, "for another session")),
		},
		MaxBody:  MaxBody,
		Chat:     userJID,
		MediaOut: channel.Media{Type: "image", URL: "https://example.com/cat.jpg"},
		GoneMedia: func(string) channel.Media {
			return channel.Media{Type: "image", Ref: wppconnecttest.MessageID(user, "GONE")}
		},
		Texts: api.Texts,
		Failures: gatewaytest.Failures(api.Account, gatewaytest.Chats{Chat: userJID, Unknown: "5511000000000@c.us",
			Group: "120363000000000000@g.us", Gone: wppconnecttest.MessageID(user, "GONE")}, 6*time.Second),
		Secrets: []string{apiToken, hookToken},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one authenticated text webhook read, verified, parsed
// and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }
