package metawhatsapp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/metawhatsapp/metawhatsapptest"
)

const (
	token     = "EAAG-test-token"
	appSecret = "app-secret-123"
	phoneID   = "1098765"
	user      = "15551234567"
)

func signed(t testing.TB, body []byte) *http.Request {
	return channeltest.Webhook("/webhooks/wa", body, SignatureHeader, Sign(appSecret, body))
}

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "wa", Token: token, AppSecret: appSecret, VerifyToken: "verify-me", PhoneNumberID: phoneID, APIURL: api}, channel.Env{Admitter: admit}))
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := metawhatsapptest.New(token, phoneID, user)
	api.Closed["15550000002"] = true
	api.Unreachable["15550000003"] = true
	photo := []byte("\xff\xd8\xff\xe0 a whatsapp jpeg")
	api.Media["4490709327384033"] = photo
	mw := metawhatsapptest.Notification
	return channeltest.Channel{
		Type: "meta-whatsapp",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url+"/"+metawhatsapptest.Version, admit)
		},
		Signed:          signed,
		SignatureHeader: SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return mw(phoneID, []map[string]any{metawhatsapptest.TextMessage(user, "wamid."+msgID, text)}, nil)
		},
		ImageBody: func(_, msgID string) []byte {
			return mw(phoneID, []map[string]any{metawhatsapptest.ImageMessage(user, "wamid."+msgID, "4490709327384033", "")}, nil)
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			mw(phoneID, nil, []map[string]any{metawhatsapptest.Status("wamid.OUT1", user, "delivered"), metawhatsapptest.Status("wamid.OUT1", user, "read")}),
			mw("another-number", []map[string]any{metawhatsapptest.TextMessage(user, "wamid.other", "not ours")}, nil),
			mw(phoneID, []map[string]any{{"from": user, "id": "wamid.react", "timestamp": "1", "type": "reaction", "reaction": map[string]any{"message_id": "wamid.OUT1", "emoji": "👍"}}}, nil),
			[]byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"account_update","value":{}}]}]}`),
		},
		MaxBody:   MaxBody,
		Chat:      user,
		MediaOut:  channel.Media{Type: "image", Ref: "4490709327384033", Caption: "look"},
		GoneMedia: func(string) channel.Media { return channel.Media{Type: "image", Ref: "999000999"} },
		Texts:     api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("130429 throughput", api.LimitNext, user, 1e9),
			channeltest.Refusal("131047 outside the 24 h window", channel.Outbound{Chat: "15550000002", Text: "x"}, channel.ErrOutsideSessionWindow),
			channeltest.Refusal("131026 undeliverable", channel.Outbound{Chat: "15550000003", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("100 empty text", channel.Outbound{Chat: user}, channel.ErrUnsupportedContent),
			{Name: "100 media without id or link", Arrange: func() channel.Outbound {
				return channel.Outbound{Chat: user, Media: &channel.Media{Type: "image"}}
			}, Permanent: true},
		},
		Secrets: []string{token, appSecret, "verify-me"},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }

// TestVerificationHandshake: GET /webhooks/<id> is the hub.challenge
// handshake (graph.Verify, tested in package graph).
func TestVerificationHandshake(t *testing.T) {
	p := newProvider(t, "http://127.0.0.1:1/v21.0", nil)
	rec := channeltest.Serve(p, httptest.NewRequest("GET", "/webhooks/wa?hub.mode=subscribe&hub.verify_token=verify-me&hub.challenge=1158201444", nil))
	if rec.Code != 200 || rec.Body.String() != "1158201444" {
		t.Fatalf("the handshake: %d %q", rec.Code, rec.Body.String())
	}
}

// TestTokenErrorsArePermanentAndHidden: a revoked token (code 190) is not
// retried, and the token never shows in an error.
func TestTokenErrorsArePermanentAndHidden(t *testing.T) {
	api := metawhatsapptest.New("another-token", phoneID, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := newProvider(t, srv.URL+"/"+metawhatsapptest.Version, nil)
	_, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "x"})
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), token) {
		t.Fatalf("send with a bad token: %v", err)
	}
}

// TestMediaDownloadStaysOnMetaHosts: the Bearer token is sent only to Meta's
// hosts or the configured API.
func TestMediaDownloadStaysOnMetaHosts(t *testing.T) {
	p := newProvider(t, "https://graph.facebook.com/v21.0", nil)
	for raw, want := range map[string]bool{
		"https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1": true,
		"https://graph.facebook.com/v21.0/x":                               true,
		"http://lookaside.fbsbx.com/x":                                     false,
		"https://fbsbx.com.evil.example/x":                                 false,
		"https://evil.example/?h=fbsbx.com":                                false,
	} {
		u, _ := url.Parse(raw)
		if got := p.downloadAllowed(u); got != want {
			t.Errorf("%s: allowed %v, want %v", raw, got, want)
		}
	}
}

func FuzzDecodeNotification(f *testing.F) {
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.TextMessage(user, "wamid.1", "hola")}, nil))
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.ImageMessage(user, "wamid.2", "123", "c")}, nil))
	f.Add(metawhatsapptest.Notification(phoneID, nil, []map[string]any{metawhatsapptest.Status("wamid.3", user, "read")}))
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.ButtonReply(user, "wamid.4", "wamid.OUT1", "yes", "Yes")}, nil))
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.ListReply(user, "wamid.5", "wamid.OUT2", "row-1", "Row 1", "the first")}, nil))
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.QuickReply(user, "wamid.6", "wamid.OUT3", "STOP", "Stop")}, nil))
	f.Add(metawhatsapptest.Notification(phoneID, []map[string]any{metawhatsapptest.ButtonReply(user, "wamid.7", "", "", "No id")}, nil))
	f.Add([]byte(`{"object":"page"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeNotification(b)
		if err != nil {
			return
		}
		for _, e := range n.Entry {
			for _, c := range e.Changes {
				for _, m := range c.Value.Messages {
					msg, ok := m.inbound()
					if ok && (msg.ID == "" || msg.Chat == "") {
						t.Fatalf("admissible message without id or chat: %+v", msg)
					}
					if ok && msg.Interaction != nil && msg.Interaction.ID == "" {
						t.Fatalf("an interaction without id: %+v", msg.Interaction)
					}
				}
			}
		}
	})
}
