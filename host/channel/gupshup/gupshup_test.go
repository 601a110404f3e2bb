package gupshup

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/gupshup/gupshuptest"
	"github.com/botrun/botrun/host/channel/httpkit"
)

const (
	apiKey = "gs-api-key-0123456789"
	app    = "DemoApp"
	source = "917834811114"
	token  = "gs-webhook-token-0123456789"
	user   = "919876543210"
)

func newProvider(t testing.TB, api string, admit channel.Admitter) *Provider {
	return channeltest.Must[*Provider](t)(Open(Config{ID: "gs", APIURL: api, APIKey: apiKey, AppName: app, Source: source, WebhookToken: token},
		channel.Env{Admitter: admit}))
}

// signed is a webhook request as Gupshup makes it: the token in the URL.
func signed(t testing.TB, body []byte) *http.Request {
	return channeltest.Webhook(gupshuptest.WebhookURL("", "gs", token), body)
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := gupshuptest.New(apiKey, app, source, user)
	photo := []byte("\xff\xd8\xff\xe0 a whatsapp jpeg")
	api.Media["0f1c5cc4-photo"] = photo
	return channeltest.Channel{
		Type: "gupshup",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			return newProvider(t, url, admit)
		},
		Signed:     signed,
		QueryToken: "token",
		TextBody: func(msgID, text string) []byte {
			return api.Text("ABEGkYaYVSEE"+msgID, user, text)
		},
		ImageBody: func(base, msgID string) []byte {
			return api.Image("ABEGkYaYVSEE"+msgID, user, api.MediaURL(base, "0f1c5cc4-photo"), "")
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			api.Status("ee4a68a0-1", user, "delivered"),
			api.Status("ee4a68a0-1", user, "read"),
			api.Event("user-event", map[string]any{"phone": user, "type": "opted-in"}),
			api.Event("message", gupshuptest.Message("ABEGloc", user, "location", map[string]any{"latitude": 12.9, "longitude": 77.5})),
			gupshuptest.New(apiKey, "OtherApp", source).Text("ABEGother", user, "for another app"),
			{},
		},
		MaxBody:  MaxBody,
		Chat:     user,
		MediaOut: channel.Media{Type: "image", URL: "https://www.buildquickbots.com/whatsapp/media/sample/jpg/sample01.jpg"},
		GoneMedia: func(base string) channel.Media {
			return channel.Media{Type: "image", Ref: api.MediaURL(base, "gone")}
		},
		Texts: api.Texts,
		Failures: []channeltest.Failure{
			channeltest.RateLimited("429", api.LimitNext, user, 3e9),
			channeltest.Refusal("unknown destination", channel.Outbound{Chat: "919000000000", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("malformed destination", channel.Outbound{Chat: "+91 98", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("empty text", channel.Outbound{Chat: user}, channel.ErrUnsupportedContent),
			channeltest.Refusal("media that is not a URL", channel.Outbound{Chat: user, Media: &channel.Media{Type: "image", Ref: "0f1c5cc4"}}, channel.ErrUnsupportedContent),
			channeltest.Refusal("caption over 1,024 characters", channel.Outbound{Chat: user, Text: strings.Repeat("a", MaxCaption+1), Media: &channel.Media{Type: "image", URL: "https://x.example/a.jpg"}}, channel.ErrPayloadTooLarge),
		},
		Secrets: []string{apiKey, token},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one text webhook read, checked, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }

// TestBadKeyIsPermanent: a wrong api key is refused for good, and the error
// shows no key.
func TestBadKeyIsPermanent(t *testing.T) {
	srv := httptest.NewServer(gupshuptest.New("another-key", app, source, user))
	defer srv.Close()
	_, err := newProvider(t, srv.URL, nil).Send(context.Background(), channel.Outbound{Chat: user, Text: "hi"})
	if !httpkit.Permanent(err) || strings.Contains(err.Error(), apiKey) {
		t.Fatalf("send with a bad key: %v, want a permanent error without the key", err)
	}
	srv2 := httptest.NewServer(gupshuptest.New(apiKey, "OtherApp", source, user))
	defer srv2.Close()
	if _, err := newProvider(t, srv2.URL, nil).Send(context.Background(), channel.Outbound{Chat: user, Text: "hi"}); !httpkit.Permanent(err) {
		t.Fatalf("send as another app: %v, want a permanent error", err)
	}
}

// TestWebhookToken: the token query parameter is required (401 without it,
// 403 when wrong, in any case nothing admitted), and an entry without
// webhook_token accepts nothing.
func TestWebhookToken(t *testing.T) {
	rec := &channeltest.Recorder{}
	api := gupshuptest.New(apiKey, app, source)
	serve := func(p *Provider, url string) int {
		mux := http.NewServeMux()
		p.Routes(mux)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("POST", url, bytes.NewReader(api.Text("m1", user, "hi"))))
		return w.Code
	}
	p := newProvider(t, "", rec)
	for url, want := range map[string]int{
		"/webhooks/gs":                         401,
		"/webhooks/gs?token=":                  401,
		"/webhooks/gs?token=gs-webhook-token":  403,
		"/webhooks/gs?tok=" + token:            401,
		"/webhooks/gs?token=" + token + "x":    403,
		"/webhooks/gs?token=" + token + "&a=b": 200,
	} {
		if got := serve(p, url); got != want {
			t.Errorf("%s: HTTP %d, want %d", url, got, want)
		}
	}
	if n := len(rec.Take()); n != 1 {
		t.Fatalf("%d admitted, want the one with the token", n)
	}
	open, _ := Open(Config{ID: "gs", APIKey: apiKey, AppName: app, Source: source}, channel.Env{Admitter: rec})
	if got := serve(open, "/webhooks/gs?token=x"); got != 403 {
		t.Fatalf("an entry without webhook_token: HTTP %d, want 403", got)
	}
}

// TestCheck: the keys are required, webhook_token among them.
func TestCheck(t *testing.T) {
	var keys []string
	(&Config{Source: "+91 98", WebhookToken: "short", MediaRefHosts: []string{"https://x"}}).Check(channel.Setting{},
		func(key, _ string, _ ...any) { keys = append(keys, key) })
	if got := strings.Join(keys, ","); got != "api_key,app_name,source,webhook_token,media_ref_hosts[0]" {
		t.Fatalf("problems with %s", got)
	}
	keys = nil
	(&Config{APIURL: DefaultAPI, APIKey: "k", AppName: app, Source: source, WebhookToken: token}).Check(channel.Setting{},
		func(key, _ string, _ ...any) { keys = append(keys, key) })
	if len(keys) > 0 {
		t.Fatalf("a complete entry: problems with %v", keys)
	}
}

// TestInteractions: button_reply and list_reply come back as presses of the
// id the send gave (postbackText), with the title and the message's
// Gupshup id.
func TestInteractions(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "", rec)
	mux := http.NewServeMux()
	p.Routes(mux)
	api := gupshuptest.New(apiKey, app, source)
	for _, typ := range []string{"button_reply", "list_reply"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, signed(t, api.Reply("ABEG"+typ, user, typ, "yes", "Yes", "ee4a68a0-7")))
		if w.Code != 200 {
			t.Fatalf("%s: HTTP %d", typ, w.Code)
		}
		got := rec.Take()
		if len(got) != 1 || got[0].Interaction == nil || *got[0].Interaction != (abi.Interaction{ID: "yes", Title: "Yes", Message: "ee4a68a0-7"}) || got[0].Chat != user {
			t.Fatalf("%s admitted as %+v", typ, got)
		}
	}
}

// sends serves a fake and a provider, and counts the fake's requests.
func sends(t *testing.T) (*Provider, *gupshuptest.API, *atomic.Int32) {
	api := gupshuptest.New(apiKey, app, source, user)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return newProvider(t, srv.URL, nil), api, &n
}

// TestChoices: reply buttons go as a quick_reply message, a list as a list
// message, with the ids as postbackText.
func TestChoices(t *testing.T) {
	p, api, _ := sends(t)
	ctx := context.Background()
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "Pick", Buttons: []abi.Button{{ID: "y", Title: "Yes"}, {ID: "n", Title: "No"}}}); err != nil {
		t.Fatal(err)
	}
	l := &abi.List{Button: "Menu", Sections: []abi.ListSection{{Title: "Drinks", Rows: []abi.ListRow{{ID: "tea", Title: "Tea", Description: "hot"}}}, {Title: "Food", Rows: []abi.ListRow{{ID: "cake", Title: "Cake"}}}}}
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "Order", List: l}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "This?", Media: &channel.Media{Type: "image", URL: "https://x.example/a.jpg"},
		Buttons: []abi.Button{{ID: "ok", Title: "OK"}}}); err != nil {
		t.Fatal(err)
	}
	api.Lock()
	got, _ := json.Marshal(api.Sent)
	api.Unlock()
	for _, want := range []string{
		`"content":{"text":"Pick","type":"text"}`,
		`"options":[{"postbackText":"y","title":"Yes","type":"text"},{"postbackText":"n","title":"No","type":"text"}],"type":"quick_reply"`,
		`"body":"Order"`, `"globalButtons":[{"title":"Menu","type":"text"}]`,
		`{"options":[{"description":"hot","postbackText":"tea","title":"Tea","type":"text"}],"subtitle":"Drinks","title":"Drinks"}`,
		`"content":{"caption":"This?","type":"image","url":"https://x.example/a.jpg"}`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the sends %s lack %s", got, want)
		}
	}
}

// TestChoicesRefused: what WhatsApp cannot show is refused before any
// request.
func TestChoicesRefused(t *testing.T) {
	p, _, n := sends(t)
	rows := func(k int) []abi.ListRow {
		var out []abi.ListRow
		for i := range k {
			out = append(out, abi.ListRow{ID: string(rune('a' + i)), Title: "Row"})
		}
		return out
	}
	yes := []abi.Button{{ID: "y", Title: "Yes"}}
	for _, tt := range []struct {
		name, say string
		msg       channel.Outbound
	}{
		{"four buttons", "at most 3", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "1", Title: "1"}, {ID: "2", Title: "2"}, {ID: "3", Title: "3"}, {ID: "4", Title: "4"}}}},
		{"a URL button", "cannot open a URL", channel.Outbound{Text: "x", Buttons: []abi.Button{{Title: "Docs", URL: "https://x.example"}}}},
		{"a long title", "at most 20", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "y", Title: strings.Repeat("y", 21)}}}},
		{"the same title twice", "unique", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "y", Title: "Yes"}, {ID: "z", Title: "Yes"}}}},
		{"no text", "empty", channel.Outbound{Buttons: yes}},
		{"a long text", "at most 1024", channel.Outbound{Text: strings.Repeat("x", 1025), Buttons: yes}},
		{"audio with buttons", "image or video", channel.Outbound{Text: "x", Buttons: yes, Media: &channel.Media{Type: "audio", URL: "https://x.example/a.ogg"}}},
		{"eleven rows", "at most 10", channel.Outbound{Text: "x", List: &abi.List{Button: "M", Sections: []abi.ListSection{{Rows: rows(11)}}}}},
		{"untitled sections", "title", channel.Outbound{Text: "x", List: &abi.List{Button: "M", Sections: []abi.ListSection{{Rows: rows(1)}, {Rows: rows(1)}}}}},
		{"a list with media", "cannot carry media", channel.Outbound{Text: "x", List: &abi.List{Button: "M", Sections: []abi.ListSection{{Rows: rows(1)}}}, Media: &channel.Media{Type: "image", URL: "https://x.example/a.jpg"}}},
		{"a caption on audio", "no caption", channel.Outbound{Text: "x", Media: &channel.Media{Type: "audio", URL: "https://x.example/a.ogg"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.msg.Chat = user
			_, err := p.Send(context.Background(), tt.msg)
			channeltest.Refused(t, err, tt.say, n.Load())
		})
	}
}

// TestNoEditNoTyping: Gupshup has neither.
func TestNoEditNoTyping(t *testing.T) {
	channeltest.NoEditsNoTyping(t, newProvider(t, "", nil))
}

func FuzzDecodeWebhook(f *testing.F) {
	api := gupshuptest.New(apiKey, app, source)
	f.Add(api.Text("m1", user, "hola"))
	f.Add(api.Image("m2", user, "https://filemanager.gupshup.io/fm/wamedia/DemoApp/x", "cap"))
	f.Add(api.Reply("m3", user, "button_reply", "yes", "Yes", "gs-1"))
	f.Add(api.Status("gs-1", user, "delivered"))
	f.Add([]byte(`{"type":"message","payload":{"id":"x","source":"1","type":"list_reply","payload":{"id":7}}}`))
	f.Add([]byte(`{"type":"message","timestamp":"17","payload":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, m, err := DecodeWebhook(b)
		if err != nil || m == nil {
			return
		}
		msg, ok := m.Inbound(ev.Time())
		if ok && (msg.ID == "" || msg.Chat == "" || len(msg.Media) > 1 || (msg.Interaction != nil && msg.Interaction.ID == "")) {
			t.Fatalf("admissible message %+v", msg)
		}
	})
}
