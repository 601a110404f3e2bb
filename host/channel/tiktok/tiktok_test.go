package tiktok

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/tiktok/tiktoktest"
)

const (
	token    = "act.tiktok-access-token-0123456789"
	secret   = "tiktok-client-secret-0123456789"
	business = "bus-7123456789"
	conv     = "0:1:7123456789:7456789012"
	user     = "usr-7456789012"
)

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "tt", APIURL: api, AccessToken: token, ClientSecret: secret, BusinessID: business},
		channel.Env{Admitter: admit}))
}

func signed(t testing.TB, body []byte) *http.Request {
	return channeltest.Webhook("/webhooks/tt", body, SignatureHeader, tiktoktest.Sign(secret, time.Now().Unix(), body))
}

func contract() channeltest.Channel {
	api := tiktoktest.New(token, business, conv)
	photo := []byte("\xff\xd8\xff\xe0 a tiktok jpeg")
	api.Media["v0f044gc-photo"] = photo
	api.Media["upload-1"] = photo
	return channeltest.Channel{
		Type: "tiktok",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url, admit)
		},
		Signed:          signed,
		SignatureHeader: SignatureHeader,
		SignsBody:       true,
		TextBody: func(msgID, text string) []byte {
			return tiktoktest.Text("m-"+msgID, conv, user, text)
		},
		ImageBody: func(_, msgID string) []byte {
			return tiktoktest.Image("m-"+msgID, conv, user, "v0f044gc-photo")
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			tiktoktest.Webhook("im_send_msg", user, tiktoktest.Content("m-echo", conv, business, "text", map[string]any{"text": map[string]any{"body": "sent"}})),
			tiktoktest.Webhook("im_mark_read_msg", user, map[string]any{"conversation_id": conv}),
			tiktoktest.Webhook(ReceiveEvent, user, tiktoktest.Content("m-share", conv, user, "share_post", map[string]any{"share_post": map[string]any{"embed_url": "https://www.tiktok.com/x"}})),
			tiktoktest.Webhook(ReceiveEvent, user, tiktoktest.Content("m-own", conv, business, "text", map[string]any{"text": map[string]any{"body": "own"}})),
			tiktoktest.Text("m-empty", conv, user, ""),
		},
		MaxBody:  MaxBody,
		Chat:     conv,
		MediaOut: channel.Media{Type: "image", Ref: "upload-1"},
		GoneMedia: func(string) channel.Media {
			return channel.Media{Type: "image", Ref: Coords{ConversationID: conv, MessageID: "m-gone", MediaID: "gone", Type: "image"}.Ref()}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("40100", api.LimitNext, conv, RateLimitWait),
			channeltest.Refusal("unknown conversation", channel.Outbound{Chat: "0:1:1:2", Text: "x"}, channel.ErrUnsupportedContent),
			channeltest.Refusal("empty text", channel.Outbound{Chat: conv}, channel.ErrUnsupportedContent),
			channeltest.Refusal("image by URL", channel.Outbound{Chat: conv, Media: &channel.Media{Type: "image", URL: "https://x.example/a.jpg"}}, channel.ErrUnsupportedContent),
			channeltest.Refusal("unknown upload", channel.Outbound{Chat: conv, Media: &channel.Media{Type: "image", Ref: "upload-none"}}, channel.ErrUnsupportedContent),
			channeltest.Refusal("buttons", channel.Outbound{Chat: conv, Text: "x", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}, channel.ErrUnsupportedContent),
		},
		Secrets: []string{token, secret},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }

// TestSignature: a timestamp more than five minutes off either way, a
// malformed header, another secret's signature: refused, nothing admitted.
func TestSignature(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "", rec)
	now := time.Unix(1764412800, 0)
	p.now = func() time.Time { return now }
	body := tiktoktest.Text("m1", conv, user, "hi")
	for name, tt := range map[string]struct {
		header string
		want   int
	}{
		"now":                 {tiktoktest.Sign(secret, now.Unix(), body), 200},
		"4 minutes old":       {tiktoktest.Sign(secret, now.Add(-4*time.Minute).Unix(), body), 200},
		"s first":             {"s=" + strings.SplitN(tiktoktest.Sign(secret, now.Unix(), body), ",s=", 2)[1] + ",t=" + "1764412800", 200},
		"6 minutes old":       {tiktoktest.Sign(secret, now.Add(-6*time.Minute).Unix(), body), 403},
		"6 minutes ahead":     {tiktoktest.Sign(secret, now.Add(6*time.Minute).Unix(), body), 403},
		"another secret":      {tiktoktest.Sign("another", now.Unix(), body), 403},
		"the timestamp moved": {strings.Replace(tiktoktest.Sign(secret, now.Unix(), body), "t=1764412800", "t=1764412801", 1), 403},
		"no s":                {"t=1764412800", 403},
		"twice t":             {"t=1,t=2,s=00", 403},
		"not hex":             {"t=1764412800,s=zz", 403},
		"sha256= style":       {"sha256=" + strings.Repeat("0", 64), 403},
		"missing":             {"", 401},
	} {
		r := httptest.NewRequest("POST", "/webhooks/tt", bytes.NewReader(body))
		if tt.header != "" {
			r.Header.Set(SignatureHeader, tt.header)
		}
		if got := channeltest.Serve(p, r).Code; got != tt.want {
			t.Errorf("%s: HTTP %d, want %d", name, got, tt.want)
		}
	}
	if n := len(rec.Take()); n != 3 {
		t.Fatalf("%d admitted, want the three good signatures'", n)
	}
	empty, _ := Open(Config{ID: "tt", AccessToken: token, BusinessID: business}, channel.Env{Admitter: rec})
	if got := channeltest.Serve(empty, signed(t, body)).Code; got != 403 {
		t.Fatalf("an entry without client_secret: HTTP %d, want 403", got)
	}
}

// TestStrictContent: content must be a JSON string holding one JSON object
// with the ids; a signed body that is not is refused with 400.
func TestStrictContent(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "", rec)
	good := `{\"conversation_id\":\"c1\",\"message_id\":\"m1\",\"type\":\"text\",\"text\":{\"body\":\"hi\"},\"from_user\":{\"id\":\"u1\"}}`
	for name, body := range map[string]string{
		"content an object":     `{"event":"im_receive_msg","content":{"message_id":"m1"}}`,
		"content not JSON":      `{"event":"im_receive_msg","content":"hello"}`,
		"content an array":      `{"event":"im_receive_msg","content":"[1]"}`,
		"trailing data":         `{"event":"im_receive_msg","content":"` + good + ` {}"}`,
		"no message_id":         `{"event":"im_receive_msg","content":"{\"conversation_id\":\"c1\",\"type\":\"text\",\"from_user\":{\"id\":\"u1\"}}"}`,
		"a numeric message_id":  `{"event":"im_receive_msg","content":"{\"conversation_id\":\"c1\",\"message_id\":7,\"type\":\"text\",\"from_user\":{\"id\":\"u1\"}}"}`,
		"an id with a NUL":      `{"event":"im_receive_msg","content":"{\"conversation_id\":\"c\\u0000\",\"message_id\":\"m1\",\"type\":\"text\",\"from_user\":{\"id\":\"u1\"}}"}`,
		"outer trailing data":   `{"event":"im_receive_msg","content":"` + good + `"} x`,
		"outer not an object":   `"im_receive_msg"`,
		"text body not astring": `{"event":"im_receive_msg","content":"{\"conversation_id\":\"c1\",\"message_id\":\"m1\",\"type\":\"text\",\"text\":{\"body\":1},\"from_user\":{\"id\":\"u1\"}}"}`,
	} {
		if got := channeltest.Serve(p, signed(t, []byte(body))).Code; got != 400 {
			t.Errorf("%s: HTTP %d, want 400", name, got)
		}
	}
	if got := channeltest.Serve(p, signed(t, []byte(`{"event":"im_receive_msg","content":"`+good+`"}`))).Code; got != 200 {
		t.Fatalf("the good body: HTTP %d", got)
	}
	if got := rec.Take(); len(got) != 1 || got[0].ID != "m1" || got[0].Chat != "c1" || got[0].From != "u1" || got[0].Text != "hi" {
		t.Fatalf("admitted %+v", got)
	}
	// The timestamp is informational: a number, a string of digits or
	// something else, the message is admitted.
	for i, ts := range []string{`1764412800000`, `\"1764412800000\"`, `{}`} {
		c := `{\"conversation_id\":\"c1\",\"message_id\":\"t` + fmt.Sprint(i) + `\",\"timestamp\":` + ts + `,\"type\":\"text\",\"text\":{\"body\":\"hi\"},\"from_user\":{\"id\":\"u1\"}}`
		if got := channeltest.Serve(p, signed(t, []byte(`{"event":"im_receive_msg","content":"`+c+`"}`))).Code; got != 200 {
			t.Errorf("timestamp %s: HTTP %d, want 200", ts, got)
		}
	}
	if got := rec.Take(); len(got) != 3 || !got[0].ReceivedAt.Equal(time.UnixMilli(1764412800000)) || !got[1].ReceivedAt.Equal(time.UnixMilli(1764412800000)) {
		t.Fatalf("admitted %+v", got)
	}
}

// TestSticker: a sticker is journaled by its URL on a TikTok host (or
// api_url), and loaded from there; one elsewhere is not journaled.
func TestSticker(t *testing.T) {
	api := tiktoktest.New(token, business, conv)
	api.Media["st-1"] = []byte("webp")
	srv := httptest.NewServer(api)
	defer srv.Close()
	rec := &channeltest.Recorder{}
	p := newProvider(t, srv.URL, rec)
	if got := channeltest.Serve(p, signed(t, tiktoktest.Sticker("m-st", conv, user, tiktoktest.CDNURL(srv.URL, "st-1")))).Code; got != 200 {
		t.Fatalf("HTTP %d", got)
	}
	got := rec.Take()
	if len(got) != 1 || len(got[0].Media) != 1 || got[0].Media[0].Type != "sticker" {
		t.Fatalf("admitted %+v", got)
	}
	s, ok := p.SerializeMediaRef(got[0].Media[0])
	if !ok {
		t.Fatal("the sticker's URL was not journaled")
	}
	m, err := p.RehydrateMediaRef(s)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := p.LoadMedia(context.Background(), m, 1<<10); err != nil || string(b) != "webp" {
		t.Fatalf("LoadMedia: %q, %v", b, err)
	}
	for _, u := range []string{"https://evil.example/s.webp", "https://p16-sign.tiktokcdn.com.evil.net/s.webp", "http://p16.tiktokcdn.com/s.webp"} {
		if _, ok := p.SerializeMediaRef(channel.Media{Type: "sticker", Ref: u}); ok {
			t.Errorf("%s was journaled", u)
		}
	}
	if _, ok := p.SerializeMediaRef(channel.Media{Type: "sticker", Ref: "https://p16-sign-va.tiktokcdn.com/obj/s.webp?x-signature=1"}); !ok {
		t.Error("a tiktokcdn.com URL was not journaled")
	}
}

// TestDownloadURLElsewhere: a download_url off the allowed hosts is not
// fetched, and the media is unavailable for good.
func TestDownloadURLElsewhere(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"code": 0, "data": map[string]any{"download_url": "https://evil.example/x.jpg"}})
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, nil)
	ref := Coords{ConversationID: conv, MessageID: "m1", MediaID: "x", Type: "image"}.Ref()
	if _, err := p.LoadMedia(context.Background(), channel.Media{Ref: ref}, 1<<10); !httpkit.MediaGone(err) {
		t.Fatalf("LoadMedia: %v, want the media unavailable", err)
	}
}

// TestBadTokenIsPermanent: 40105 is refused for good, and the error shows
// no token.
func TestBadTokenIsPermanent(t *testing.T) {
	srv := httptest.NewServer(tiktoktest.New("another-token", business, conv))
	defer srv.Close()
	_, err := newProvider(t, srv.URL, nil).Send(context.Background(), channel.Outbound{Chat: conv, Text: "hi"})
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), token) {
		t.Fatalf("send with a bad token: %v, want a permanent error without the token", err)
	}
}

// TestUnsupported: buttons, lists and non-image media are refused before
// any request, and the channel claims neither edits nor typing.
func TestUnsupported(t *testing.T) {
	api := tiktoktest.New(token, business, conv)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); api.ServeHTTP(w, r) }))
	defer srv.Close()
	p := newProvider(t, srv.URL, nil)
	for name, tt := range map[string]struct {
		msg channel.Outbound
		say string
	}{
		"buttons":                     {channel.Outbound{Chat: conv, Text: "x", Buttons: []abi.Button{{ID: "y", Title: "Yes"}}}, "no buttons"},
		"a list":                      {channel.Outbound{Chat: conv, Text: "x", List: &abi.List{Button: "M", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "a", Title: "A"}}}}}}, "no buttons or lists"},
		"a video":                     {channel.Outbound{Chat: conv, Media: &channel.Media{Type: "video", Ref: "v1"}}, "images only"},
		"a URL":                       {channel.Outbound{Chat: conv, Media: &channel.Media{Type: "image", URL: "https://x.example/a.jpg"}}, "not by URL"},
		"a sticker's URL as an image": {channel.Outbound{Chat: conv, Media: &channel.Media{Type: "image", Ref: "https://p16.tiktokcdn.com/s.webp"}}, "not by URL"},
		"bad coordinates":             {channel.Outbound{Chat: conv, Media: &channel.Media{Type: "image", Ref: `{"media_id":"x"}`}}, "coordinates"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.Send(context.Background(), tt.msg)
			channeltest.Refused(t, err, tt.say, n.Load())
		})
	}
	channeltest.NoEditsNoTyping(t, p)
}

// TestImageWithText: an image goes first, the text after it as its own
// message; an inbound image goes back by its media_id.
func TestImageWithText(t *testing.T) {
	api := tiktoktest.New(token, business, conv)
	api.Media["upload-1"] = []byte("jpeg")
	srv := httptest.NewServer(api)
	defer srv.Close()
	ref, err := newProvider(t, srv.URL, nil).Send(context.Background(), channel.Outbound{Chat: conv, Text: "look",
		Media: &channel.Media{Type: "image", Ref: "upload-1"}})
	if err != nil || ref == "" {
		t.Fatalf("send: %q, %v", ref, err)
	}
	api.Lock()
	sent := slices.Clone(api.Sent)
	api.Unlock()
	if len(sent) != 2 || sent[0]["message_type"] != "IMAGE" || sent[1]["message_type"] != "TEXT" {
		t.Fatalf("sent %v", sent)
	}
	back := Coords{ConversationID: conv, MessageID: "m1", MediaID: "upload-1", Type: "image"}.Ref()
	if _, err := newProvider(t, srv.URL, nil).Send(context.Background(), channel.Outbound{Chat: conv,
		Media: &channel.Media{Type: "image", Ref: back}}); err != nil {
		t.Fatal(err)
	}
	api.Lock()
	if img, _ := api.Sent[2]["image"].(map[string]any); len(api.Sent) != 3 || img["media_id"] != "upload-1" {
		t.Fatalf("sent %v", api.Sent[2:])
	}
}

// TestCheck: the keys are required.
func TestCheck(t *testing.T) {
	var keys []string
	(&Config{MediaRefHosts: []string{"https://x"}}).Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if got := strings.Join(keys, ","); got != "access_token,client_secret,business_id,media_ref_hosts[0]" {
		t.Fatalf("problems with %s", got)
	}
	keys = nil
	(&Config{APIURL: DefaultAPI, AccessToken: token, ClientSecret: secret, BusinessID: business}).Check(channel.Setting{},
		func(key, _ string, _ ...any) { keys = append(keys, key) })
	if len(keys) > 0 {
		t.Fatalf("a complete entry: problems with %v", keys)
	}
}

func FuzzDecodeWebhook(f *testing.F) {
	f.Add(tiktoktest.Text("m1", conv, user, "hola"))
	f.Add(tiktoktest.Image("m2", conv, user, "v0f044gc"))
	f.Add(tiktoktest.Sticker("m3", conv, user, "https://p16.tiktokcdn.com/s.webp"))
	f.Add(tiktoktest.Webhook("im_send_msg", user, map[string]any{"message_id": "x"}))
	f.Add([]byte(`{"event":"im_receive_msg","content":"{\"conversation_id\":\"c\",\"message_id\":\"m\",\"type\":\"image\",\"image\":{},\"from_user\":{\"id\":\"u\"}}"}`))
	f.Add([]byte(`{"event":"im_receive_msg","content":"{\"a\":1} {}"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, c, err := DecodeWebhook(b)
		if err != nil || c == nil {
			return
		}
		msg, ok := c.Inbound()
		if !ok {
			return
		}
		if msg.ID == "" || msg.Chat == "" || msg.From == "" || len(msg.Media) > 1 || (msg.Text == "" && len(msg.Media) == 0) {
			t.Fatalf("admissible message %+v", msg)
		}
		if len(msg.Media) == 1 && msg.Media[0].Type == "image" {
			var co Coords
			if json.Unmarshal([]byte(msg.Media[0].Ref), &co) != nil || !co.valid() {
				t.Fatalf("an image ref that is not coordinates: %q", msg.Media[0].Ref)
			}
		}
	})
}

func FuzzDecodeSignature(f *testing.F) {
	f.Add("t=1764412800,s=" + strings.Repeat("ab", 32))
	f.Add("s=00,t=1")
	f.Add("t=,s=")
	f.Fuzz(func(t *testing.T, h string) {
		ts, raw, sig, err := ParseSignature(h)
		if err == nil && (ts <= 0 || raw == "" || len(sig) != 32) {
			t.Fatalf("accepted %q as %d %q %x", h, ts, raw, sig)
		}
	})
}
