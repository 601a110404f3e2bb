package webchat_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/webchat"
)

// TestContract runs the inbound half of the contract suite: webchat has no
// API to send to (its sends join its transcript, which the page reads), so
// nothing to fake, and no signature or credential by design (the page is
// public; allow_public guards where it is served).
func TestContract(t *testing.T) {
	channeltest.RunInbound(t, channeltest.Channel{
		Type: "webchat",
		New: func(t testing.TB, _ string, admit channel.Admitter) channel.Channel {
			return channeltest.Must[*webchat.Provider](t)(webchat.Open(webchat.Config{ID: "web"}, channel.Env{ID: "web", Admitter: admit}))
		},
		Signed: func(t testing.TB, body []byte) *http.Request {
			r := httptest.NewRequest("POST", "/webchat/web/messages", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		},
		TextBody: func(msgID, text string) []byte {
			b, _ := json.Marshal(map[string]string{"id": msgID, "chat": "visitor-1", "text": text})
			return b
		},
		MaxBody:  webchat.MaxBody,
		Chat:     "visitor-1",
		Unsigned: "webchat's page is public: a visitor has no credential to sign with",
	})
}
