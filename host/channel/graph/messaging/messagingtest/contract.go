package messagingtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Contract is a Messenger Platform channel and its fake as the contract
// suite (channeltest) sees them.
type Contract struct {
	// Type is the channel's type; ID its provider id (the webhook's path).
	Type, ID string
	// Object and Owner are the webhook bodies' object and entry id.
	Object, Owner string
	// AppSecret signs the webhooks.
	AppSecret string
	// Fake is the channel's fake; User a recipient it knows.
	Fake *API
	User string
	// New builds the channel with api (the fake's server URL) as the
	// origin of its api_url.
	New func(t testing.TB, api string, admit channel.Admitter) channel.Channel
	// Secrets must never show in a stored reference or an error.
	Secrets []string
}

// Users the contract's fake knows in a state other than reachable.
const (
	ClosedUser      = "7000000000000002"
	UnavailableUser = "7000000000000003"
	UnknownUser     = "7000000000000004"
)

// Signed returns a webhook request for body, signed with c.AppSecret.
func (c Contract) Signed(t testing.TB, body []byte) *http.Request {
	return channeltest.Webhook("/webhooks/"+c.ID, body, graph.SignatureHeader, graph.Sign(c.AppSecret, body))
}

// Channel is the contract suite's view: the failure classes the Send API's
// errors map onto, the events the channel ignores, durable media on the
// fake's CDN.
func (c Contract) Channel() channeltest.Channel {
	api, user, owner := c.Fake, c.User, c.Owner
	api.Lock()
	api.Closed[ClosedUser] = true
	api.Unavailable[UnavailableUser] = true
	photo := []byte("\xff\xd8\xff\xe0 a " + c.Type + " jpeg")
	api.Media["photo.jpg"] = photo
	api.Unlock()
	body := func(events ...map[string]any) []byte { return Body(c.Object, owner, events...) }
	return channeltest.Channel{
		Type:            c.Type,
		Fake:            api,
		New:             c.New,
		Signed:          c.Signed,
		SignatureHeader: graph.SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return body(Text(user, owner, "m_"+msgID, text))
		},
		ImageBody: func(base, msgID string) []byte {
			return body(Media(user, owner, "m_"+msgID, "image", MediaURL(base, "photo.jpg")))
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			body(Echo(owner, user, "m_echo", "our own reply")),
			body(Delivery(user, owner, "m_OUT1"), Read(user, owner)),
			body(Reaction(user, owner, "m_OUT1")),
			body(Media(user, owner, "m_location", "location", "")),
			Body(c.Object, "another-"+owner, Text(user, "another-"+owner, "m_other", "not ours")),
			[]byte(`{"object":"` + c.Object + `","entry":[{"id":"` + owner + `","time":1,"changes":[{"field":"comments","value":{}}]}]}`),
		},
		MaxBody:  messaging.MaxBody,
		Chat:     user,
		MediaOut: channel.Media{Type: "image", URL: "https://example.com/a.jpg"},
		GoneMedia: func(base string) channel.Media {
			return channel.Media{Type: "image", Ref: MediaURL(base, "expired.jpg")}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("613 rate limit", api.LimitNext, user, time.Minute),
			channeltest.Refusal("10/2018278 outside the window", channel.Outbound{Chat: ClosedUser, Text: "x"}, channel.ErrOutsideSessionWindow),
			channeltest.Refusal("551 unavailable", channel.Outbound{Chat: UnavailableUser, Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("100/2018001 no such user", channel.Outbound{Chat: UnknownUser, Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("100 empty message", channel.Outbound{Chat: user}, channel.ErrUnsupportedContent),
		},
		Secrets: c.Secrets,
	}
}

// Refused fails t unless a send through fake, a Send API that refuses the
// channel's token or its path (a fake for another token or account), fails
// permanently (it is not retried) with none of c.Secrets in its error.
func (c Contract) Refused(t *testing.T, fake *API) {
	t.Helper()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	_, err := c.New(t, srv.URL, nil).Send(context.Background(), channel.Outbound{Chat: c.User, Text: "x"})
	if !httpkit.Permanent(err) {
		t.Fatalf("a send the Send API refuses: %v, want a permanent failure", err)
	}
	for _, s := range c.Secrets {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("a refused send's error shows a secret: %v", err)
		}
	}
}

// Capabilities fails t unless p, a Messenger Platform channel, shows choices
// and typing, has no edit, and limits texts to exactly runes characters and
// bytes bytes (0: no such limit).
func Capabilities(t testing.TB, p channel.Channel, runes, bytes int) {
	t.Helper()
	_, edits := p.(channel.Editor)
	_, types := p.(channel.Typist)
	gotRunes, gotBytes, chooses := 0, 0, false
	if l, ok := p.(channel.Limiter); ok {
		gotRunes, gotBytes = l.TextLimits(channel.Outbound{})
		// A button template's text holds less than a plain text.
		template, _ := l.TextLimits(channel.Outbound{Buttons: []abi.Button{{ID: "y", Title: "Yes"}}})
		chooses = template == messaging.MaxTemplateText
	}
	if gotRunes != runes || gotBytes != bytes || edits || !types || !chooses {
		t.Fatalf("text limit %d characters and %d bytes (want %d and %d), edit %v, typing %v, choices %v", gotRunes, gotBytes, runes, bytes, edits, types, chooses)
	}
}
