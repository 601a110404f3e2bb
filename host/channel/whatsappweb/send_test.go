package whatsappweb_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/whatsappweb"
)

func TestSendText(t *testing.T) {
	b, _ := connectedBot(t, nil)
	ctx := context.Background()
	ref, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "echo: hola", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	sent := b.net.Sent()
	if len(sent) != 1 || sent[0].To != alice || sent[0].Message.GetConversation() != "echo: hola" || !sent[0].Delivered || string(sent[0].ID) != ref {
		t.Fatalf("sent %+v, ref %q", sent, ref)
	}
	// The message id comes from the outbox key: every attempt of one send
	// carries the same id, in WhatsApp Web's shape.
	again, _ := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "echo: hola", Key: "k1"})
	other, _ := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "echo: hola", Key: "k2"})
	if again != ref || other == ref || len(ref) != 22 || !strings.HasPrefix(ref, whatsmeow.WebMessageIDPrefix) {
		t.Fatalf("refs %q %q %q", ref, again, other)
	}
	// A phone number is a chat too.
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: "+" + alice.User, Text: "by number"}); err != nil {
		t.Fatal(err)
	}
	if s := b.net.Sent(); s[len(s)-1].To != alice {
		t.Fatalf("sent to %s", s[len(s)-1].To)
	}
}

func TestSendRefusesBeforeAnyRequest(t *testing.T) {
	b, _ := connectedBot(t, nil)
	ctx := context.Background()
	cases := []struct {
		name string
		msg  channel.Outbound
		want error
	}{
		{"buttons", channel.Outbound{Chat: alice.String(), Text: "pick", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}, channel.ErrUnsupportedContent},
		{"list", channel.Outbound{Chat: alice.String(), Text: "pick", List: &abi.List{Button: "Sizes"}}, channel.ErrUnsupportedContent},
		{"empty text", channel.Outbound{Chat: alice.String(), Text: "  "}, channel.ErrUnsupportedContent},
		{"too long", channel.Outbound{Chat: alice.String(), Text: strings.Repeat("ñ", whatsappweb.TextLimit+1)}, channel.ErrPayloadTooLarge},
		{"not a chat", channel.Outbound{Chat: "alice", Text: "hi"}, channel.ErrRecipientUnreachable},
		{"a device JID", channel.Outbound{Chat: alice.User + ":3@s.whatsapp.net", Text: "hi"}, channel.ErrRecipientUnreachable},
		{"an unknown server", channel.Outbound{Chat: alice.User + "@s.whatsapp.netx", Text: "hi"}, channel.ErrRecipientUnreachable},
		{"another server", channel.Outbound{Chat: "123@newsletter", Text: "hi"}, channel.ErrRecipientUnreachable},
		{"unknown media type", channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "hologram", URL: "https://x.example/a"}}, channel.ErrUnsupportedContent},
		{"media without a source", channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "image"}}, channel.ErrUnsupportedContent},
		{"audio with a text", channel.Outbound{Chat: alice.String(), Text: "listen", Media: &channel.Media{Type: "audio", URL: "https://x.example/a.ogg"}}, channel.ErrUnsupportedContent},
		{"a ref of another channel", channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "image", Ref: "AgACAgQAAxkBAAI"}}, channel.ErrUnsupportedContent},
	}
	for _, tc := range cases {
		_, err := b.p.Send(ctx, tc.msg)
		errorIs(t, tc.name, err, tc.want)
		if !httpkit.Permanent(err) {
			t.Errorf("%s: %v is not permanent", tc.name, err)
		}
	}
	if s := b.net.Sent(); len(s) != 0 {
		t.Fatalf("refused sends reached WhatsApp: %+v", s)
	}
}

func TestSendErrorsMapOntoTheTaxonomy(t *testing.T) {
	b, _ := connectedBot(t, nil)
	ctx := context.Background()
	to := channel.Outbound{Chat: alice.String(), Text: "hi"}

	// Not on WhatsApp: asked before the send, which WhatsApp would accept
	// and deliver nowhere.
	_, err := b.p.Send(ctx, channel.Outbound{Chat: "+15559990000", Text: "hi"})
	errorIs(t, "a number without an account", err, channel.ErrRecipientUnreachable)
	if s := b.net.Sent(); len(s) != 0 {
		t.Fatalf("sent to a number without an account: %+v", s)
	}
	// A group the account is not in.
	_, err = b.p.Send(ctx, channel.Outbound{Chat: group.String(), Text: "hi"})
	errorIs(t, "a group the account is not in", err, channel.ErrRecipientUnreachable)
	b.net.Group(group)
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: group.String(), Text: "hi all"}); err != nil {
		t.Fatalf("a group the account is in: %v", err)
	}

	rateLimited := []error{
		fmt.Errorf("failed to get device list: %w", whatsmeow.ErrIQRateOverLimit),
		fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 429),
		fmt.Errorf("failed to get device list: %w", whatsmeow.ErrIQResourceLimit),
	}
	for _, e := range rateLimited {
		b.net.Fail("SendMessage", e)
		_, err := b.p.Send(ctx, to)
		if httpkit.RetryAfter(err) != 30*time.Second || httpkit.Permanent(err) {
			t.Errorf("%v mapped to %v, want rate limited 30s", e, err)
		}
	}
	b.net.Fail("IsOnWhatsApp", whatsmeow.ErrIQRateOverLimit)
	_, err = b.p.Send(ctx, channel.Outbound{Chat: "+15554445555", Text: "hi"})
	if httpkit.RetryAfter(err) != 30*time.Second {
		t.Errorf("a rate-limited recipient check: %v", err)
	}
	permanent := map[error]error{
		fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 403): channel.ErrRecipientUnreachable,
		fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 406): channel.ErrUnsupportedContent,
	}
	for e, want := range permanent {
		b.net.Fail("SendMessage", e)
		_, err := b.p.Send(ctx, to)
		errorIs(t, e.Error(), err, want)
	}
	retryable := []error{
		whatsmeow.ErrMessageTimedOut,
		fmt.Errorf("failed to send message node: %w", whatsmeow.ErrNotConnected),
		&whatsmeow.DisconnectedError{Action: "message send"},
		fmt.Errorf("%w %d", whatsmeow.ErrServerReturnedError, 500),
	}
	for _, e := range retryable {
		b.net.Fail("SendMessage", e)
		_, err := b.p.Send(ctx, to)
		if err == nil || httpkit.Permanent(err) || httpkit.RetryAfter(err) != 0 {
			t.Errorf("%v mapped to %v, want a plain retryable error", e, err)
		}
	}
}

func TestSendMediaByURLAndByRef(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake image bytes")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(png)
	}))
	defer srv.Close()
	b, c := connectedBot(t, func(c *whatsappweb.Config) { c.HTTPClient = srv.Client() })
	ctx := context.Background()
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "look", Media: &channel.Media{Type: "image", URL: srv.URL + "/cat.png"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "document", URL: srv.URL + "/files/report.png", Caption: "the report"}}); err != nil {
		t.Fatal(err)
	}
	sent := b.net.Sent()
	img, doc := sent[0].Message.GetImageMessage(), sent[1].Message.GetDocumentMessage()
	if img.GetCaption() != "look" || img.GetMimetype() != "image/png" || len(img.GetMediaKey()) != 32 || img.GetFileLength() != uint64(len(png)) {
		t.Fatalf("image message %v", img)
	}
	if doc.GetFileName() != "report.png" || doc.GetCaption() != "the report" {
		t.Fatalf("document message %v", doc)
	}
	// The recipient can download what was sent.
	if got, err := c.Download(ctx, img); err != nil || string(got) != string(png) {
		t.Fatalf("the recipient downloads %q, %v", got, err)
	}
	_, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "image", URL: srv.URL + "/gone.png"}})
	errorIs(t, "a media URL answering 404", err, channel.ErrUnsupportedContent)

	// An inbound media ref is forwarded as it is, without an upload.
	in := b.net.Media("IMG9", whatsmeow.MediaImage, []byte("inbound image"))
	c.Emit(b.net.Incoming("IMG9", alice, aliceDevice, &waE2E.Message{ImageMessage: &waE2E.ImageMessage{DirectPath: proto.String(in.DirectPath),
		MediaKey: in.MediaKey, FileSHA256: in.FileSHA256, FileEncSHA256: in.FileEncSHA256, FileLength: proto.Uint64(in.FileLength), Mimetype: proto.String("image/jpeg")}}))
	ref := b.admit.Admitted()[0].Media[0].Ref
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "back to you", Media: &channel.Media{Type: "image", Ref: ref}}); err != nil {
		t.Fatal(err)
	}
	fwd := b.net.Sent()[2].Message.GetImageMessage()
	if fwd.GetDirectPath() != in.DirectPath || fwd.GetCaption() != "back to you" {
		t.Fatalf("forwarded as %v", fwd)
	}
	if got, err := c.Download(ctx, fwd); err != nil || string(got) != "inbound image" {
		t.Fatalf("the forward downloads %q, %v", got, err)
	}
}

func TestSendMediaURLRefusesInternalAddresses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("secret")) }))
	defer srv.Close()
	b, _ := connectedBot(t, nil) // the default client: no internal addresses
	_, err := b.p.Send(context.Background(), channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "image", URL: srv.URL + "/x.png?sig=SECRET"}})
	errorIs(t, "a media URL on loopback", err, channel.ErrUnsupportedContent)
	if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "x.png") {
		t.Fatalf("the send error names the media URL's path or query: %v", err)
	}
}

// TestSendMediaURLErrorNamesTheHostOnly: a failed fetch's error (stored and
// logged by the outbox) keeps the URL's scheme and host only.
func TestSendMediaURLErrorNamesTheHostOnly(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	b, _ := connectedBot(t, func(c *whatsappweb.Config) { c.HTTPClient = srv.Client() })
	_, err := b.p.Send(context.Background(), channel.Outbound{Chat: alice.String(), Media: &channel.Media{Type: "image", URL: srv.URL + "/private/x.png?sig=SECRET"}})
	if err == nil || httpkit.Permanent(err) {
		t.Fatalf("a media URL that does not answer: %v, want a retryable error", err)
	}
	if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "private") {
		t.Fatalf("the send error names the media URL's path or query: %v", err)
	}
	mustContain(t, "the send error", err.Error(), srv.Listener.Addr().String())
}

func TestTypingMarksReadAndSendClearsIt(t *testing.T) {
	b, c := connectedBot(t, nil)
	ctx := context.Background()
	for _, id := range []types.MessageID{"M1", "M2"} {
		c.Emit(b.net.Incoming(id, alice, aliceDevice, &waE2E.Message{Conversation: proto.String("hi")}))
	}
	if err := b.p.Typing(ctx, alice.String(), "M2"); err != nil {
		t.Fatal(err)
	}
	reads := b.net.Reads()
	if len(reads) != 1 || reads[0].Chat != alice || len(reads[0].IDs) != 1 || reads[0].IDs[0] != "M2" {
		t.Fatalf("reads after typing: %+v", reads)
	}
	pres, available := b.net.Presences()
	if available != 1 || len(pres) != 1 || pres[0].State != types.ChatPresenceComposing {
		t.Fatalf("presences %+v, available %d", pres, available)
	}
	if _, err := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "answer"}); err != nil {
		t.Fatal(err)
	}
	reads = b.net.Reads()
	if len(reads) != 2 || reads[1].IDs[0] != "M1" || reads[1].Sender != alice {
		t.Fatalf("reads after the send: %+v", reads)
	}
	pres, _ = b.net.Presences()
	if pres[len(pres)-1].State != types.ChatPresencePaused {
		t.Fatalf("presences %+v", pres)
	}
	// Typing in answer to a message admitted before a restart marks it read
	// all the same.
	if err := b.p.Typing(ctx, alice.String(), "OLD1"); err != nil {
		t.Fatal(err)
	}
	reads = b.net.Reads()
	if len(reads) != 3 || reads[2].IDs[0] != "OLD1" || reads[2].Sender != alice {
		t.Fatalf("reads after typing to an unknown message: %+v", reads)
	}
	// Nothing left unread: the next send marks nothing.
	b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "more"})
	if n := len(b.net.Reads()); n != 3 {
		t.Fatalf("%d read receipts", n)
	}
}

func TestEdit(t *testing.T) {
	b, _ := connectedBot(t, nil)
	ctx := context.Background()
	ref, _ := b.p.Send(ctx, channel.Outbound{Chat: alice.String(), Text: "draft", Key: "e1"})
	if err := b.p.Edit(ctx, alice.String(), ref, "final"); err != nil {
		t.Fatal(err)
	}
	pm := b.net.Sent()[1].Message.GetEditedMessage().GetMessage().GetProtocolMessage()
	if pm.GetType() != waE2E.ProtocolMessage_MESSAGE_EDIT || pm.GetKey().GetID() != ref || pm.GetEditedMessage().GetConversation() != "final" {
		t.Fatalf("edit sent as %v", pm)
	}
	errorIs(t, "an edit of no message", b.p.Edit(ctx, alice.String(), "not an id!", "x"), channel.ErrUnsupportedContent)
}
