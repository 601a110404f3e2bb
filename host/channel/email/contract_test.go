package email_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/email/emailtest"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
)

// TestContract runs the outbound half of the contract suite over real IMAP
// and SMTP servers (emailtest). The inbound half is a webhook's, and email
// has none: its inbound (admitted once, \Seen after the journal, the
// cursor) is this package's own tests.
func TestContract(t *testing.T) {
	s, _, j, p := running(t)
	png := []byte("\x89PNG\r\n\x1a\nnot really a png")
	// inbound delivers a message with png attached and returns the media
	// the channel admitted.
	inbound := func(t *testing.T, id string) channel.Media {
		before := len(j.Admitted())
		if _, err := s.Append(withAttachment(id, png)); err != nil {
			t.Fatal(err)
		}
		fakekit.WaitFor(t, "the attachment admitted", func() bool { return len(j.Admitted()) > before })
		m := j.Admitted()[before]
		if len(m.Media) != 1 {
			t.Fatalf("the message with an attachment was admitted as %+v", m)
		}
		return m.Media[0]
	}
	chat := "alice@example.org"
	// fail makes the SMTP server answer e at stage, once.
	fail := func(stage string, e *smtp.SMTPError) {
		var once atomic.Bool
		s.Fail(func(at string) *smtp.SMTPError {
			if at != stage || !once.CompareAndSwap(false, true) {
				return nil
			}
			return e
		})
	}
	refused := func(name, stage string, e *smtp.SMTPError, is error) channeltest.Failure {
		return channeltest.Failure{Name: name, Arrange: func() channel.Outbound {
			fail(stage, e)
			return channel.Outbound{Chat: chat, Text: "x"}
		}, Is: is, Permanent: is == nil}
	}
	out := inbound(t, "contract-out@example.org")
	// goneRef names a message the mailbox does not have.
	var ref map[string]any
	if err := json.Unmarshal([]byte(out.Ref), &ref); err != nil {
		t.Fatal(err)
	}
	ref["mid"], ref["uid"] = "gone@example.org", 999999
	goneRef, _ := json.Marshal(ref)
	channeltest.RunSend(t, channeltest.SendContract{
		Type:     "email",
		Channel:  p,
		Chat:     chat,
		MediaOut: out,
		Texts: func(chat string) []string {
			var out []string
			for _, m := range s.Sent() {
				if m.To == chat {
					// Less the line break SMTP's DATA ends a body
					// without one with: framing, not the text.
					text, _ := m.Text()
					out = append(out, strings.TrimSuffix(text, "\r\n"))
				}
			}
			return out
		},
		Failures: []channeltest.Failure{
			refused("550 5.1.1 no such user", "RCPT", &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}, channel.ErrRecipientUnreachable),
			refused("552 5.3.4 too big", "DATA", &smtp.SMTPError{Code: 552, EnhancedCode: smtp.EnhancedCode{5, 3, 4}, Message: "too big"}, channel.ErrPayloadTooLarge),
			refused("554 5.7.1 policy", "DATA", &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "policy"}, nil),
			channeltest.Refusal("not an address", channel.Outbound{Chat: "unknown-root@example.org>", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("buttons", channel.Outbound{Chat: chat, Text: "pick", Buttons: []abi.Button{{ID: "a", Title: "A"}}}, channel.ErrUnsupportedContent),
			{Name: "empty text", Arrange: func() channel.Outbound { return channel.Outbound{Chat: chat} }, Permanent: true},
		},
		NoRateLimit:   "SMTP has no reply asking to wait a given time: a 4xx (421, 451) is a plain retry",
		Down:          s.Down,
		Secrets:       []string{emailtest.Password},
		Unlimited:     "email declares no text limit: a submission server caps a message's size (552, mapped to ErrPayloadTooLarge), not its text",
		InboundImage:  func(t *testing.T) channel.Media { return inbound(t, "contract-image@example.org") },
		ImageBytes:    png,
		GoneMedia:     func() channel.Media { return channel.Media{Type: "image", Ref: string(goneRef)} },
		RefStoredAsIs: "an attachment's reference (its message's Message-ID and UID, its index and digest) is durable JSON without credentials",
	})
}
