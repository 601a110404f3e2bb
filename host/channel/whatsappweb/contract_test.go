package whatsappweb_test

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/types"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/whatsappweb"
)

// TestContract runs the outbound half of the contract suite over the fake
// WhatsApp network (whatsappwebtest). The inbound half is a webhook's, and
// whatsapp-web has none: its inbound (events, acknowledgement after the
// journal, redelivery) is inbound_test.go's.
func TestContract(t *testing.T) {
	b, c := connectedBot(t, nil)
	dev := c.Device()
	var secrets []string
	for _, k := range [][]byte{dev.NoiseKey.Priv[:], dev.IdentityKey.Priv[:]} {
		secrets = append(secrets, hex.EncodeToString(k), base64.StdEncoding.EncodeToString(k))
	}
	fail := func(name string, err error, is error) channeltest.Failure {
		return channeltest.Failure{Name: name, Arrange: func() channel.Outbound {
			b.net.Fail("SendMessage", err)
			return channel.Outbound{Chat: alice.String(), Text: "x"}
		}, Is: is}
	}
	// wait is the wait the channel asks for after a rate limit.
	const wait = 30 * time.Second
	out, _ := inboundImage(t, b, c, "CONTRACT-OUT", false)
	gone, path := inboundImage(t, b, c, "CONTRACT-GONE", false)
	b.net.Expire(path, true)
	channeltest.RunSend(t, channeltest.SendContract{
		Type:          whatsappweb.Type,
		NoCredentials: "the device is linked by pairing (botrun pair, a QR code), its keys kept in the session store, not in the entry",
		Channel:       b.p,
		Chat:          alice.String(),
		MediaOut:      out,
		Texts: func(chat string) []string {
			var texts []string
			for _, s := range b.net.Sent() {
				if s.To.String() != chat {
					continue
				}
				if text := s.Message.GetConversation() + s.Message.GetExtendedTextMessage().GetText(); text != "" {
					texts = append(texts, text)
				}
			}
			return texts
		},
		Failures: []channeltest.Failure{
			channeltest.RateLimited("IQ rate over limit", func(n int) {
				for range n {
					b.net.Fail("SendMessage", fmt.Errorf("failed to get device list: %w", whatsmeow.ErrIQRateOverLimit))
				}
			}, alice.String(), wait),
			{Name: "server error 429", Arrange: func() channel.Outbound {
				b.net.Fail("SendMessage", fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 429))
				return channel.Outbound{Chat: alice.String(), Text: "x"}
			}, RetryAfter: wait},
			fail("server error 403", fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 403), channel.ErrRecipientUnreachable),
			fail("server error 406", fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 406), channel.ErrUnsupportedContent),
			channeltest.Refusal("a number without an account", channel.Outbound{Chat: "+15559990000", Text: "hi"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("a group the account is not in", channel.Outbound{Chat: types.NewJID("120363040000000009", types.GroupServer).String(), Text: "hi"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("not a chat", channel.Outbound{Chat: "alice", Text: "hi"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("buttons", channel.Outbound{Chat: alice.String(), Text: "pick", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}, channel.ErrUnsupportedContent),
		},
		Down:         b.net.Down,
		Secrets:      secrets,
		InboundImage: func(t *testing.T) channel.Media { m, _ := inboundImage(t, b, c, "CONTRACT-IMG", false); return m },
		ImageBytes:   photo,
		GoneMedia:    func() channel.Media { return gone },
	})
}
