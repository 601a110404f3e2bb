package twilio

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/twilio/twiliotest"
)

const (
	sid       = "AC0123456789abcdef0123456789abcdef"
	authToken = "twilio-auth-token-1"
	publicURL = "https://bot.example.com/webhooks/tw"
	user      = "+15551234567"
)

// TestSignatureTestVector is Twilio's published example.
func TestSignatureTestVector(t *testing.T) {
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
		"From": {"+12349013030"}, "To": {"+18005551212"}}
	if got := Sign("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params); got != "0/KCTR6DLpKmkAf8muzZqo1nDgQ=" {
		t.Fatalf("signature %q, want 0/KCTR6DLpKmkAf8muzZqo1nDgQ=", got)
	}
}

func signed(t testing.TB, body []byte) *http.Request {
	params, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/webhooks/tw", strings.NewReader(string(body)))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set(SignatureHeader, Sign(authToken, publicURL, params))
	return r
}

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "tw", AccountSID: sid, AuthToken: authToken, From: "+15550001111", PublicURL: publicURL, APIURL: api}, channel.Env{Admitter: admit}))
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := twiliotest.New(sid, authToken, user, "whatsapp:+15550000003")
	api.Unsubscribed["+15550000002"] = true
	api.Closed["whatsapp:+15550000003"] = true
	photo := []byte("\xff\xd8\xff\xe0 an mms jpeg")
	api.Media["ME0001"] = photo
	return channeltest.Channel{
		Type: "twilio",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url, admit)
		},
		Signed:          signed,
		SignatureHeader: SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return []byte(api.Inbound("SM"+msgID, user, text).Encode())
		},
		ImageBody: func(base, msgID string) []byte {
			return []byte(api.Inbound("SM"+msgID, user, "", api.MediaURL(base, "ME0001")).Encode())
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			[]byte(api.StatusCallback("SM0001", user, "delivered").Encode()),
			[]byte(api.StatusCallback("SM0001", user, "undelivered").Encode()),
		},
		MaxBody:  MaxBody,
		Chat:     user,
		MediaOut: channel.Media{Type: "image", URL: "https://demo.twilio.com/owl.png"},
		GoneMedia: func(base string) channel.Media {
			return channel.Media{Type: "image", Ref: api.MediaURL(base, "ME9999")}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("429 / 20429", api.LimitNext, user, 3e9),
			channeltest.Refusal("21610 unsubscribed", channel.Outbound{Chat: "+15550000002", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("21211 invalid To", channel.Outbound{Chat: "+1555", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("63016 outside the WhatsApp window", channel.Outbound{Chat: "whatsapp:+15550000003", Text: "x"}, channel.ErrOutsideSessionWindow),
			channeltest.Refusal("21602 no body", channel.Outbound{Chat: user}, channel.ErrUnsupportedContent),
			channeltest.Refusal("media that is not a URL", channel.Outbound{Chat: user, Media: &channel.Media{Type: "image", Ref: "ME0001"}}, channel.ErrUnsupportedContent),
		},
		Secrets: []string{authToken},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }

// TestMediaURLsOnlyFromTwilio: a media URL is journaled and fetched with the
// account's credentials only over https on a twilio.com host, or on api_url.
func TestMediaURLsOnlyFromTwilio(t *testing.T) {
	p := newProvider(t, "", nil)
	for raw, want := range map[string]bool{
		"https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1": true,
		"https://media.twiliocdn.com.twilio.com/x":                              true,
		"http://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1":  false,
		"https://api.twilio.com.evil.example/x":                                 false,
		"https://eviltwilio.com/x":                                              false,
		"https://user:pass@api.twilio.com/x":                                    false,
		"ftp://api.twilio.com/x":                                                false,
	} {
		_, got := p.SerializeMediaRef(channel.Media{Ref: raw})
		if got != want {
			t.Errorf("%s: durable %v, want %v", raw, got, want)
		}
		if _, err := p.LoadMedia(context.Background(), channel.Media{Ref: raw}, 10); !want && err == nil {
			t.Errorf("%s: fetched", raw)
		}
	}
}

// TestWrongAccountRefused: a correctly signed webhook for another account
// (the same auth token reused) is refused.
func TestWrongAccountRefused(t *testing.T) {
	p := newProvider(t, "", nil)
	other := twiliotest.New("AC_other", authToken)
	rec := channeltest.Serve(p, signed(t, []byte(other.Inbound("SM1", user, "hi").Encode())))
	if rec.Code != 403 {
		t.Fatalf("HTTP %d, want 403", rec.Code)
	}
}

func FuzzDecodeWebhook(f *testing.F) {
	api := twiliotest.New(sid, authToken)
	f.Add([]byte(api.Inbound("SM1", user, "hola").Encode()))
	f.Add([]byte(api.Inbound("SM2", user, "", "https://api.twilio.com/x").Encode()))
	f.Add([]byte(api.StatusCallback("SM3", user, "sent").Encode()))
	f.Add([]byte("NumMedia=11&MessageSid=x&From=y"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeWebhook(b)
		if err != nil {
			return
		}
		msg, ok, err := Inbound(v)
		if err == nil && ok && (msg.ID == "" || msg.Chat == "" || len(msg.Media) > 10) {
			t.Fatalf("admissible message %+v", msg)
		}
	})
}
