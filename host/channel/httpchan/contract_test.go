package httpchan_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpchan"
	"github.com/botrun/botrun/host/channel/httpchan/httpchantest"
)

const (
	secret  = "a-shared-secret-of-the-gateway"
	chat    = "chat-1"
	unknown = "chat-unknown"
)

// TestContract runs the channel contract suite against the fake gateway.
func TestContract(t *testing.T) {
	gw := httpchantest.New(secret, chat)
	channeltest.Run(t, channeltest.Channel{
		Type: "http",
		Fake: gw,
		New: func(t testing.TB, api string, admit channel.Admitter) channel.Channel {
			return channeltest.Must[*httpchan.Provider](t)(httpchan.Open(httpchan.Config{ID: "gw", URL: api + "/send", Secret: secret}, channel.Env{ID: "gw", Admitter: admit}))
		},
		Signed: func(t testing.TB, body []byte) *http.Request {
			r := httptest.NewRequest("POST", "/webhooks/gw", bytes.NewReader(body))
			httpchan.SignRequest(r.Header, []byte(secret), body, time.Now())
			return r
		},
		SignatureHeader: httpchan.SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return []byte(`{"id":"` + msgID + `","chat":"` + chat + `","from":"u1","text":"` + text + `"}`)
		},
		MaxBody:  httpchan.MaxBody,
		Chat:     chat,
		MediaOut: channel.Media{Type: "image", URL: "https://example.com/a.jpg"},
		Texts:    gw.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("429", gw.LimitNext, chat, httpchantest.RetryAfter*time.Second),
			channeltest.Refusal("an unknown chat (404)", channel.Outbound{Chat: unknown, Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("a media type the gateway does not send (422)", channel.Outbound{Chat: chat, Media: &channel.Media{Type: "sticker", URL: "https://example.com/s.webp"}}, channel.ErrUnsupportedContent),
			channeltest.Refusal("a text over the gateway's limit (413)", channel.Outbound{Chat: chat, Text: string(bytes.Repeat([]byte("a"), httpchantest.TextLimit+1))}, channel.ErrPayloadTooLarge),
		},
		Secrets:        []string{secret},
		Unlimited:      "the generic HTTP channel declares no text limit: its gateway's limit is the gateway's, answered 413",
		NoInboundMedia: "the generic HTTP channel's inbound is text only ({id, chat, from, text})",
	})
}
