package discord

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/discord/discordtest"
)

const (
	token   = "MTEwMDAw.fake.bot-token-for-tests"
	appID   = "1100000000000000000"
	chat    = "700000000000000001"
	closed  = "700000000000000002" // a DM whose user takes none (50007)
	noPerm  = "700000000000000003" // missing permissions (50013)
	limited = "700000000000000004" // rate limited in the contract
	user    = "600000000000000001"
)

// key is the application's Ed25519 key the tests sign with.
var key = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

func publicHex() string { return hex.EncodeToString(key.Public().(ed25519.PublicKey)) }

// signed returns a webhook request for body, signed now.
func signed(body []byte) *http.Request {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return channeltest.Webhook("/webhooks/dc", body, TimestampHeader, ts, SignatureHeader, Sign(key, ts, body))
}

func newFake() *discordtest.API {
	api := discordtest.New(token, appID, chat, closed, noPerm, limited)
	api.ClosedDMs[closed] = true
	api.NoAccess[noPerm] = true
	return api
}

var photo = []byte("\xff\xd8\xff\xe0 a jpeg")

// contract is the channel (interactions mode) and its fake as the contract
// suite sees them.
func contract() channeltest.Channel {
	api := newFake()
	command := func(msgID, text string, file *discordtest.Attachment) []byte {
		return api.Command(discordtest.Command{ID: api.ID(msgID), Channel: chat, User: user, Name: "ask", Text: text, File: file})
	}
	fail := func(status, code int, message string) func() channel.Outbound {
		return func() channel.Outbound {
			api.FailNext(status, code, message)
			return channel.Outbound{Chat: chat, Text: "x"}
		}
	}
	return channeltest.Channel{
		Type: "discord",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, PublicKey: publicHex(), Mode: ModeInteractions, APIURL: url},
				channel.Env{Admitter: admit})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Signed:          func(_ testing.TB, body []byte) *http.Request { return signed(body) },
		SignatureHeader: SignatureHeader,
		SignsBody:       true,
		TextBody:        func(msgID, text string) []byte { return command(msgID, text, nil) },
		ImageBody: func(base, msgID string) []byte {
			a := api.Attachment(base, chat, "photo.jpg", "image/jpeg", photo, 24*time.Hour)
			return command(msgID, "", &a)
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			[]byte(`{"id":"1200000000000000001","application_id":"` + appID + `","type":1,"token":"t","version":1}`),
			[]byte(`{"id":"1200000000000000002","application_id":"` + appID + `","type":4,"token":"t","channel_id":"` + chat + `","data":{"name":"ask","options":[{"name":"text","type":3,"value":"h","focused":true}]}}`),
			api.Command(discordtest.Command{Channel: chat, User: "600000000000000009", Bot: true, Name: "ask", Text: "a bot's"}),
		},
		MaxBody:  MaxBody,
		Chat:     chat,
		MediaOut: channel.Media{Type: "image", URL: "https://cdn.discordapp.com/attachments/1/2/cat.png"},
		GoneMedia: func(base string) channel.Media {
			a := api.Attachment(base, chat, "gone.jpg", "image/jpeg", photo, 24*time.Hour)
			return channel.Media{Type: "image", Ref: strings.Replace(a.URL, "/gone.jpg", "/other.jpg", 1)}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			{Name: "429 retry_after", Arrange: func() channel.Outbound {
				api.Lock()
				api.Limited, api.RetryAfter = 1, 1.5
				api.Unlock()
				return channel.Outbound{Chat: limited, Text: "x"}
			}, RetryAfter: 1500 * time.Millisecond},
			channeltest.Refusal("10003 unknown channel", channel.Outbound{Chat: "700000000000000099", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("50007 cannot DM", channel.Outbound{Chat: closed, Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("50013 missing permissions", channel.Outbound{Chat: noPerm, Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("50006 empty message", channel.Outbound{Chat: chat}, channel.ErrUnsupportedContent),
			{Name: "40005 too large", Arrange: fail(413, 40005, "Request entity too large"), Is: channel.ErrPayloadTooLarge},
			{Name: "50035 invalid form", Arrange: fail(400, 50035, "Invalid Form Body"), Is: channel.ErrUnsupportedContent},
			{Name: "401 bad token", Arrange: fail(401, 0, "401: Unauthorized"), Permanent: true},
			channeltest.Refusal("not a channel id", channel.Outbound{Chat: "general", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("label over 80", channel.Outbound{Chat: chat, Text: "x", Buttons: []abi.Button{{ID: "a", Title: strings.Repeat("l", 81)}}}, channel.ErrUnsupportedContent),
		},
		Secrets: []string{token},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one signed slash command read, verified, parsed and
// admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }

// admitter records every Admit call, deduplicating on the message id as the
// host does, and fails while fail is set.
type admitter struct {
	mu    sync.Mutex
	calls []channel.Message
	seen  map[string]bool
	fail  int
	// hook runs inside Admit (a test's check of the order of things).
	hook func(channel.Message)
}

func newAdmitter() *admitter { return &admitter{seen: map[string]bool{}} }

func (a *admitter) Admit(_ context.Context, prov string, m channel.Message) (channel.Admission, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail > 0 {
		a.fail--
		return channel.Admission{}, errors.New("journal unavailable")
	}
	a.calls = append(a.calls, m)
	if a.hook != nil {
		a.hook(m)
	}
	dup := a.seen[m.ID]
	a.seen[m.ID] = true
	return channel.Admission{ID: prov + ":" + m.ID, Duplicate: dup}, nil
}

// admitted returns every Admit call that succeeded, in order.
func (a *admitter) admitted() []channel.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]channel.Message(nil), a.calls...)
}

// setup opens an interactions-mode provider (with kv, when not nil) against
// a fresh fake, served.
func setup(t *testing.T, kv durability.Kv) (*Provider, *discordtest.API, *admitter, *httptest.Server) {
	t.Helper()
	api := newFake()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	a := newAdmitter()
	p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, PublicKey: publicHex(), Mode: ModeInteractions, APIURL: srv.URL},
		channel.Env{Admitter: a, Kv: kv, KeyPrefix: "bot/"})
	if err != nil {
		t.Fatal(err)
	}
	return p, api, a, srv
}

// serve delivers a signed webhook body and returns the answer.
func serve(p *Provider, body []byte) *httptest.ResponseRecorder {
	return channeltest.Serve(p, signed(body))
}
