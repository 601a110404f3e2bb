// Package gatewaytest is what the fakes of the gateway channels
// (evolutiontest, wppconnecttest) share: the WhatsApp account behind a fake
// gateway (the numbers on WhatsApp, the groups it is in, the media it
// holds, a rate limit, a lost connection), the sends it accepted, and the
// failure classes every gateway channel maps for the contract suite.
//
// gatewaytest embeds fakekit in its Account; it imports the standard
// library, abi, the SPI, channeltest and fakekit.
package gatewaytest

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// Sent is a send a fake accepted.
type Sent struct {
	// Endpoint is the API's name of the send (sendText, send-image, …).
	Endpoint string
	// To is the recipient as the gateway resolved it.
	To string
	// Text is the text, or the media's caption.
	Text string
	// Kind is the media's type ("" for a text), Media its URL, base64 or
	// data: URI, MIME and FileName as sent.
	Kind, Media, MIME, FileName string
	// ID is the message id the fake answered.
	ID string
}

// Account is the WhatsApp account behind a fake gateway. Lock guards its
// exported fields while the fake serves.
type Account struct {
	// Requests counts the fake's requests.
	Requests atomic.Int32

	// Kit: Limited sends answer 429; Media are the bytes of the media
	// messages the account holds, by message id; Sent are the accepted
	// sends.
	fakekit.Kit[Sent]
	// Numbers are the phone numbers (digits) on WhatsApp; Groups the
	// groups' ids (digits) the account is in.
	Numbers, Groups map[string]bool
	// Disconnected is an account not connected to WhatsApp.
	Disconnected bool
}

// NewAccount returns an account with numbers on WhatsApp.
func NewAccount(numbers ...string) *Account {
	a := &Account{Numbers: fakekit.Set(numbers...), Groups: map[string]bool{}}
	a.MediaStore()
	return a
}

// Record accepts s, its ID made by id from the count of sends so far; call
// it with the lock held.
func (a *Account) Record(s Sent, id func(n int) string) Sent {
	s.ID = id(a.Next())
	a.Sent = append(a.Sent, s)
	return s
}

// TextsTo returns the texts and captions accepted for to (as the gateway
// resolves it), in order.
func (a *Account) TextsTo(to string) []string {
	return a.Collect(func(s Sent) (string, bool) { return s.Text, s.To == to })
}

// Serve answers req with r's routes and returns the status.
func Serve(r channel.Router, req *http.Request) int {
	mux := http.NewServeMux()
	r.Routes(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec.Code
}

// Chats are the chats of a gateway channel's failures: Chat one its fake
// accepts, Unknown a number without WhatsApp, Group a group the account is
// not in, Gone an inbound media's id the fake does not have.
type Chats struct {
	Chat, Unknown, Group, Gone string
}

// Failures are the failure classes a gateway channel maps, arranged at its
// fake's account: a 429 answered with Retry-After wait, a number without
// WhatsApp and a group the account is not in (unreachable), and the sends
// refused as unsupported content (an empty text, buttons, a media neither
// a URL nor an id, an inbound media gone, a caption under an audio).
func Failures(a *Account, c Chats, wait time.Duration) []channeltest.Failure {
	to := func(o channel.Outbound) func() channel.Outbound {
		return func() channel.Outbound { o.Chat = c.Chat; return o }
	}
	return []channeltest.Failure{
		channeltest.RateLimited("429", a.LimitNext, c.Chat, wait),
		channeltest.Refusal("a number without WhatsApp", channel.Outbound{Chat: c.Unknown, Text: "x"}, channel.ErrRecipientUnreachable),
		channeltest.Refusal("a group the account is not in", channel.Outbound{Chat: c.Group, Text: "x"}, channel.ErrRecipientUnreachable),
		{Name: "an empty text", Arrange: to(channel.Outbound{Text: " "}), Is: channel.ErrUnsupportedContent},
		{Name: "buttons", Arrange: to(channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}), Is: channel.ErrUnsupportedContent},
		{Name: "an inbound media the gateway no longer has", Arrange: to(channel.Outbound{Media: &channel.Media{Type: "image", Ref: c.Gone}}), Is: channel.ErrUnsupportedContent},
		{Name: "a media neither a URL nor an id", Arrange: to(channel.Outbound{Media: &channel.Media{Type: "image", Ref: "../x"}}), Is: channel.ErrUnsupportedContent},
		{Name: "an audio with a caption", Arrange: to(channel.Outbound{Text: "hear this", Media: &channel.Media{Type: "audio", URL: "https://example.com/a.ogg"}}), Is: channel.ErrUnsupportedContent},
	}
}
