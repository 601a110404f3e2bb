package gohighlevel

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/gohighlevel/gohighleveltest"
	"github.com/botrun/botrun/host/channel/httpkit"
)

const (
	token   = "pit-0123456789abcdef"
	contact = "ocQHyuzHvysMo5N5VsXc"
)

func open(t testing.TB, api, location string, env channel.Env) *Provider {
	p, err := Open(Config{ID: "ghl", APIURL: api, Token: token, LocationID: location, PublicKey: gohighleveltest.PublicKey(), MessageType: "SMS"}, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// signed is a webhook request as GoHighLevel makes it.
func signed(t testing.TB, body []byte) *http.Request {
	return channeltest.Webhook("/webhooks/ghl", body, SignatureHeader, gohighleveltest.Sign(body))
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	const location = "ve9EPM428h8vShlRW1KT"
	api := gohighleveltest.New(token, location, contact, "dndContact0000000001")
	api.DND["dndContact0000000001"] = true
	photo := []byte("\xff\xd8\xff\xe0 an mms jpeg")
	api.Media["photo.jpg"] = photo
	other := gohighleveltest.New(token, "otherLocation0000001")
	return channeltest.Channel{
		Type: "gohighlevel",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return open(t, url, location, channel.Env{Admitter: admit})
		},
		Signed:          signed,
		SignatureHeader: SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return api.Inbound("wh-"+msgID, "m"+msgID, contact, "SMS", text)
		},
		ImageBody: func(base, msgID string) []byte {
			return api.Inbound("wh-"+msgID, "m"+msgID, contact, "SMS", "", api.MediaURL(base, "photo.jpg"))
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			api.Webhook("OutboundMessage", "wh-out", map[string]any{"messageId": "mOut", "contactId": contact, "body": "sent", "direction": "outbound", "messageType": "SMS"}),
			api.Webhook("ContactCreate", "wh-contact", map[string]any{"id": contact}),
			api.Inbound("wh-email", "mEmail", contact, "Email", "an email"),
			api.Inbound("wh-wa", "mWA", contact, "TYPE_WHATSAPP", "a WhatsApp message"),
			other.Inbound("wh-other", "mOther", contact, "SMS", "another location's"),
		},
		MaxBody:  MaxBody,
		Chat:     contact,
		MediaOut: channel.Media{Type: "image", URL: "https://example.com/owl.png"},
		GoneMedia: func(base string) channel.Media {
			return channel.Media{Type: "image", Ref: api.MediaURL(base, "gone.jpg")}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("429", api.LimitNext, contact, 3e9),
			channeltest.Refusal("unknown contact", channel.Outbound{Chat: "noSuchContact", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("DND", channel.Outbound{Chat: "dndContact0000000001", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("empty text", channel.Outbound{Chat: contact}, channel.ErrUnsupportedContent),
			channeltest.Refusal("media that is not a URL", channel.Outbound{Chat: contact, Media: &channel.Media{Type: "image", Ref: "photo.jpg"}}, channel.ErrUnsupportedContent),
			channeltest.Refusal("buttons", channel.Outbound{Chat: contact, Text: "x", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}, channel.ErrUnsupportedContent),
		},
		Secrets: []string{token},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// clock is a test's time, moved by hand.
type clock struct{ at time.Time }

func (c *clock) now() time.Time { return c.at }

// TestRateLimit: 100 sends in any 10 s per location, then a
// RateLimitedError with the wait until the oldest leaves the window, and no
// request; a second entry of the location shares the window.
func TestRateLimit(t *testing.T) {
	const location = "rateLimitedLocation1"
	api := gohighleveltest.New(token, location, contact)
	c := &clock{at: time.Unix(1764412800, 0)}
	api.Clock = c.now // the fake counts requests on the test's clock too
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := open(t, srv.URL, location, channel.Env{})
	p.now = c.now
	ctx := context.Background()
	for i := range Burst {
		if _, err := p.Send(ctx, channel.Outbound{Chat: contact, Text: "x"}); err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
		if i == Burst/2 {
			c.at = c.at.Add(time.Second)
		}
	}
	_, err := p.Send(ctx, channel.Outbound{Chat: contact, Text: "x"})
	if got := httpkit.RetryAfter(err); got != Per-time.Second || !errors.Is(err, ErrRateLimited) || httpkit.Permanent(err) {
		t.Fatalf("send 101: %v (retry after %s), want a rate limit of %s", err, got, Per-time.Second)
	}
	api.Lock()
	n := len(api.Requests)
	api.Unlock()
	if n != Burst {
		t.Fatalf("%d requests, want %d: the held-back send made one", n, Burst)
	}
	c.at = c.at.Add(Per - time.Second)
	twin := open(t, srv.URL, location, channel.Env{})
	twin.now = c.now
	for i := range Burst/2 + 1 { // the 51 made at the start have left the window
		if _, err := twin.Send(ctx, channel.Outbound{Chat: contact, Text: "x"}); err != nil {
			t.Fatalf("10 s later, send %d: %v", i+1, err)
		}
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: contact, Text: "x"}); httpkit.RetryAfter(err) != time.Second {
		t.Fatalf("send %d 10 s later: %v, want a rate limit of 1s", Burst/2+2, err)
	}
}

// TestReplays: a webhook stamped more than 5 minutes from now is refused,
// and so is a webhookId seen with another body, after a restart too (the
// ids are in the Kv) until they are purged; the same body again is a
// redelivery.
func TestReplays(t *testing.T) {
	const location = "replayLocation000001"
	api := gohighleveltest.New(token, location, contact)
	kv := memory.NewKv()
	env := channel.Env{Admitter: &channeltest.Recorder{}, Kv: kv, KeyPrefix: "bot/"}
	c := &clock{at: time.Now()}
	p := open(t, "", location, env)
	p.now = c.now
	at := func(d time.Duration, id string) []byte {
		return api.Webhook("InboundMessage", id, map[string]any{"timestamp": c.at.Add(d).UnixMilli(), "messageId": "m-" + id,
			"contactId": contact, "body": "hi", "messageType": "SMS", "direction": "inbound"})
	}
	stamp := strconv.FormatInt(c.at.UnixMilli(), 10)
	for _, tt := range []struct {
		name string
		body []byte
		want int
	}{
		{"6 minutes old", at(-6*time.Minute, "w1"), 401},
		{"6 minutes ahead", at(6*time.Minute, "w2"), 401},
		{"no timestamp", []byte(`{"type":"InboundMessage","locationId":"` + location + `","webhookId":"w3","messageId":"m","contactId":"c","body":"x","messageType":"SMS"}`), 401},
		{"4 minutes old", at(-4*time.Minute, "w4"), 200},
		{"4 minutes ahead", at(4*time.Minute, "w5"), 200},
		{"no webhookId", []byte(`{"type":"InboundMessage","locationId":"` + location + `","messageId":"m","contactId":"c","body":"x","messageType":"SMS","timestamp":` + stamp + `}`), 400},
		{"a bad webhookId", at(0, "w/6"), 400},
		{"a fresh one", at(0, "w7"), 200},
		{"its redelivery", at(0, "w7"), 200},
		{"its id with another body", at(time.Second, "w7"), 403},
	} {
		if got := channeltest.Serve(p, signed(t, tt.body)).Code; got != tt.want {
			t.Errorf("%s: HTTP %d, want %d", tt.name, got, tt.want)
		}
	}
	restarted := open(t, "", location, env)
	restarted.now = c.now
	if got := channeltest.Serve(restarted, signed(t, at(2*time.Second, "w7"))).Code; got != 403 {
		t.Fatalf("after a restart, w7 with another body: HTTP %d, want 403", got)
	}
	if n, err := restarted.seen.purge(context.Background(), c.at.Add(Keep)); err != nil || n != 3 {
		t.Fatalf("purge: %d, %v; want the 3 ids seen", n, err)
	}
	if got := channeltest.Serve(restarted, signed(t, at(3*time.Second, "w7"))).Code; got != 200 {
		t.Fatalf("w7 once forgotten: HTTP %d, want 200", got)
	}
	if b, v, _ := kv.Get(context.Background(), "bot/gohighlevel/ghl/webhook/w7"); v == 0 || len(b) != 32 {
		t.Fatalf("the id is not kept under the key prefix: %q, version %d", b, v)
	}
	mem := open(t, "", location, channel.Env{Admitter: &channeltest.Recorder{}})
	mem.now = c.now
	for i, want := range []int{200, 200, 403} {
		if got := channeltest.Serve(mem, signed(t, at(time.Duration(i/2)*time.Second, "w8"))).Code; got != want {
			t.Fatalf("without a Kv, delivery %d of w8: HTTP %d, want %d", i+1, got, want)
		}
	}
}

// TestKvFailure: a webhookId that cannot be remembered is not admitted: 429,
// the status GoHighLevel retries.
func TestKvFailure(t *testing.T) {
	const location = "kvFailLocation000001"
	api := gohighleveltest.New(token, location, contact)
	rec := &channeltest.Recorder{}
	p := open(t, "", location, channel.Env{Admitter: rec, Kv: failingKv{memory.NewKv()}})
	if got := channeltest.Serve(p, signed(t, api.Inbound("wk1", "mk1", contact, "SMS", "hi"))).Code; got != 429 || len(rec.Take()) != 0 {
		t.Fatalf("HTTP %d, want 429 and nothing admitted", got)
	}
}

// TestRetriesPastTheWindow: a message the host does not take is answered
// 429, and GoHighLevel's retries of the same payload (10 minutes later, its
// timestamp long stale) are let in, after a restart too, for RetryKeep; a
// stale webhook botrun never answered 429 is refused.
func TestRetriesPastTheWindow(t *testing.T) {
	const location = "retryLocation0000001"
	api := gohighleveltest.New(token, location, contact)
	admit := &flaky{}
	env := channel.Env{Admitter: admit, Kv: memory.NewKv(), KeyPrefix: "bot/"}
	c := &clock{at: time.Now()}
	p := open(t, "", location, env)
	p.now = c.now
	body := api.Inbound("wr1", "mr1", contact, "SMS", "later")
	admit.fail = true
	if got := channeltest.Serve(p, signed(t, body)).Code; got != 429 {
		t.Fatalf("not admitted: HTTP %d, want 429", got)
	}
	admit.fail = false
	c.at = c.at.Add(10 * time.Minute)
	restarted := open(t, "", location, env)
	restarted.now = c.now
	if got := channeltest.Serve(restarted, signed(t, body)).Code; got != 200 || len(admit.Take()) != 1 {
		t.Fatalf("its retry 10 minutes later: HTTP %d, want 200 and the message admitted", got)
	}
	if got := channeltest.Serve(restarted, signed(t, api.Inbound("wr2", "mr2", contact, "SMS", "old"))).Code; got != 401 {
		t.Fatalf("a webhook 10 minutes old, never answered 429: HTTP %d, want 401", got)
	}
	c.at = c.at.Add(RetryKeep)
	if n, err := restarted.seen.purge(context.Background(), c.now()); err != nil || n != 1 {
		t.Fatalf("purge after RetryKeep: %d, %v", n, err)
	}
	if got := channeltest.Serve(restarted, signed(t, body)).Code; got != 401 {
		t.Fatalf("a retry after RetryKeep: HTTP %d, want 401", got)
	}
}

// flaky admits, or fails every message while fail is set.
type flaky struct {
	channeltest.Recorder
	fail bool
}

func (f *flaky) Admit(ctx context.Context, prov string, m channel.Message) (channel.Admission, error) {
	if f.fail {
		return channel.Admission{}, errors.New("journal unavailable")
	}
	return f.Recorder.Admit(ctx, prov, m)
}

type failingKv struct{ *memory.Kv }

func (failingKv) Commit(context.Context, []durability.Write) error {
	return errors.New("store unavailable")
}

// TestInbound: attachments by extension, TYPE_SMS read as SMS, the contact
// is the chat.
func TestInbound(t *testing.T) {
	const location = "inboundLocation00001"
	api := gohighleveltest.New(token, location, contact)
	rec := &channeltest.Recorder{}
	p := open(t, "", location, channel.Env{Admitter: rec})
	body := api.Inbound("wi1", "mi1", contact, "TYPE_SMS", "look", "https://storage.googleapis.com/msgsndr/x/media/a.PNG",
		"https://assets.cdn.filesafe.space/x/b.pdf", "https://x.leadconnectorhq.com/v.mp4")
	if got := channeltest.Serve(p, signed(t, body)).Code; got != 200 {
		t.Fatalf("HTTP %d", got)
	}
	got := rec.Take()
	if len(got) != 1 || got[0].Chat != contact || got[0].Text != "look" || len(got[0].Media) != 3 ||
		got[0].Media[0].Type != "image" || got[0].Media[1].Type != "document" || got[0].Media[2].Type != "video" {
		t.Fatalf("admitted %+v", got)
	}
	for _, m := range got[0].Media {
		if _, ok := p.SerializeMediaRef(m); !ok {
			t.Errorf("%s is not durable", m.Ref)
		}
	}
	for _, raw := range []string{"https://storage.googleapis.com/another-bucket/a.png", "https://evil.example/a.png", "http://assets.cdn.filesafe.space/a.png"} {
		if _, ok := p.SerializeMediaRef(channel.Media{Ref: raw}); ok {
			t.Errorf("%s is durable", raw)
		}
	}
}

// TestCheck: every key is required or checked; a public key set must be a
// PEM RSA key of 2048 bits or more (none: GoHighLevel's published one).
func TestCheck(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	for _, tt := range []struct {
		name, key, say string
	}{
		{"not PEM", "0123456789abcdef", "not a PEM key"},
		{"a certificate", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})), "want PUBLIC KEY"},
		{"EC", pemOf(t, &ec.PublicKey), "want an RSA or an Ed25519 key"},
		{"1024 bits", pemOf(t, &small.PublicKey), "at least 2048"},
	} {
		var says []string
		(&Config{Token: token, LocationID: "loc1", PublicKey: tt.key, MessageType: "SMS"}).Check(channel.Setting{}, func(key, format string, args ...any) {
			if key == "public_key" {
				says = append(says, fmt.Sprintf(format, args...))
			}
		})
		if !strings.Contains(strings.Join(says, " "), tt.say) {
			t.Errorf("%s: public_key problems %q, want one saying %q", tt.name, says, tt.say)
		}
	}
	var keys []string
	(&Config{LocationID: "a/b", MessageType: "Email", MediaRefHosts: []string{"x"}}).Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if got := strings.Join(keys, ","); got != "token,location_id,message_type,media_ref_hosts[0]" {
		t.Fatalf("problems with %s", got)
	}
	keys = nil
	oneLine := strings.ReplaceAll(gohighleveltest.PublicKey(), "\n", `\n`)
	(&Config{APIURL: DefaultAPI, Token: token, LocationID: "loc1", PublicKey: oneLine, MessageType: "WhatsApp"}).Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if len(keys) > 0 {
		t.Fatalf("a complete entry (its key on one line): problems with %v", keys)
	}
}

func pemOf(t *testing.T, pub any) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestNoEditNoTyping: GoHighLevel has neither.
func TestNoEditNoTyping(t *testing.T) {
	channeltest.NoEditsNoTyping(t, open(t, "", "loc1", channel.Env{}))
}

func FuzzDecodeWebhook(f *testing.F) {
	api := gohighleveltest.New(token, "loc1", contact)
	f.Add(api.Inbound("w1", "m1", contact, "SMS", "hola"))
	f.Add(api.Inbound("w2", "m2", contact, "SMS", "", "https://storage.googleapis.com/msgsndr/loc1/media/a.jpg"))
	f.Add(api.Webhook("OutboundMessage", "w3", nil))
	f.Add([]byte(`{"type":"InboundMessage","webhookId":"w","messageId":"m","contactId":"c","timestamp":1764412800,"attachments":[""]}`))
	f.Add([]byte(`{"timestamp":"x","webhookId":"w","attachments":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := DecodeWebhook(b)
		if err != nil {
			return
		}
		if w.WebhookID == "" || len(w.WebhookID) > 128 {
			t.Fatalf("webhookId %q accepted", w.WebhookID)
		}
		if msg, ok := w.Inbound(); ok && (msg.ID == "" || msg.Chat == "") {
			t.Fatalf("admissible message %+v", msg)
		}
	})
}

// TestPublishedKeys: without public_key the channel verifies with
// GoHighLevel's published keys: both parse, and a webhook signed with
// another key is refused under either header; an Ed25519 signature is
// checked when X-GHL-Signature is present.
func TestPublishedKeys(t *testing.T) {
	if k, err := ParsePublicKey(DefaultPublicKey); err != nil {
		t.Fatalf("the bundled RSA key: %v", err)
	} else if _, ok := k.(*rsa.PublicKey); !ok {
		t.Fatalf("the bundled RSA key is a %T", k)
	}
	ed, ok := parseEd25519(DefaultEd25519Key)
	if !ok {
		t.Fatal("the bundled Ed25519 key does not parse")
	}
	p, err := Open(Config{ID: "ghl", Token: token, LocationID: "loc1"}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.key.Equal(mustKey(t, DefaultPublicKey)) || !p.ed.Equal(ed) {
		t.Fatal("an entry without public_key does not use GoHighLevel's published keys")
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	body := []byte(`{"type":"InboundMessage"}`)
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(priv, body))
	if !VerifyEd25519(pub, body, sig) || VerifyEd25519(pub, []byte(`{}`), sig) || VerifyEd25519(ed, body, sig) {
		t.Fatal("VerifyEd25519 accepts what it should not, or refuses its own key's signature")
	}
}

func mustKey(t *testing.T, s string) any {
	t.Helper()
	k, err := ParsePublicKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestEd25519Signature: a webhook carrying X-GHL-Signature is verified
// with the Ed25519 key (and admitted); either good signature admits one;
// two bad ones are 403; public_key may replace the Ed25519 key.
func TestEd25519Signature(t *testing.T) {
	const location = "edLocation0000000001"
	api := gohighleveltest.New(token, location, contact)
	rec := &channeltest.Recorder{}
	p := open(t, "", location, channel.Env{Admitter: rec})
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	p.ed = pub
	body := api.Inbound("we1", "me1", contact, "TYPE_SMS", "hola")
	r := httptest.NewRequest("POST", "/webhooks/ghl", bytes.NewReader(body))
	r.Header.Set(Ed25519Header, base64.StdEncoding.EncodeToString(ed25519.Sign(priv, body)))
	if got := channeltest.Serve(p, r).Code; got != 200 || len(rec.Take()) != 1 {
		t.Fatalf("an Ed25519-signed webhook: HTTP %d", got)
	}
	// Either signature admits the webhook (a rotated key does not stop the
	// traffic); neither is 403.
	other := api.Inbound("we2", "me2", contact, "TYPE_SMS", "hola")
	r = signed(t, other)
	r.Header.Set(Ed25519Header, base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("other"))))
	if got := channeltest.Serve(p, r).Code; got != 200 || len(rec.Take()) != 1 {
		t.Fatalf("a bad X-GHL-Signature beside a good x-wh-signature: HTTP %d, want 200", got)
	}
	third := api.Inbound("we3", "me3", contact, "TYPE_SMS", "hola")
	r = httptest.NewRequest("POST", "/webhooks/ghl", bytes.NewReader(third))
	r.Header.Set(Ed25519Header, base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("other"))))
	r.Header.Set(SignatureHeader, gohighleveltest.Sign([]byte("other")))
	if got := channeltest.Serve(p, r).Code; got != 403 || len(rec.Take()) != 0 {
		t.Fatalf("two bad signatures: HTTP %d, want 403", got)
	}
	// public_key may be an Ed25519 key: it replaces the published one.
	pemKey, _ := x509.MarshalPKIXPublicKey(pub)
	q, err := Open(Config{ID: "ghl", Token: token, LocationID: location, PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pemKey}))}, channel.Env{Admitter: rec})
	if err != nil || !q.ed.Equal(pub) {
		t.Fatalf("an Ed25519 public_key: %v", err)
	}
}

// TestBadTokenIsPermanent: a send with a token the API refuses is a
// permanent error that does not show the token.
func TestBadTokenIsPermanent(t *testing.T) {
	const location = "tokenLocation0000001"
	srv := httptest.NewServer(gohighleveltest.New("another-token", location, contact))
	defer srv.Close()
	_, err := open(t, srv.URL, location, channel.Env{}).Send(context.Background(), channel.Outbound{Chat: contact, Text: "hi"})
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), token) {
		t.Fatalf("send with a bad token: %v, want a permanent error without the token", err)
	}
}
