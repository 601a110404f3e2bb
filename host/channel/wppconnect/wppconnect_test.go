package wppconnect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
	"github.com/botrun/botrun/host/channel/wppconnect/wppconnecttest"
)

// TestWebhookToken: the token rides in the URL's query; missing is 401,
// wrong (or in a header only) 403 or 401, and nothing is admitted.
func TestWebhookToken(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec)
	body := wppconnecttest.New(session, apiToken).Event("onmessage", wppconnecttest.Text("3EB0T", user, "hola"))
	header := post(body)
	header.URL.RawQuery = ""
	header.Header.Set("Authorization", "Bearer "+hookToken)
	prefix := post(body)
	prefix.URL.RawQuery = TokenParameter + "=" + hookToken[:len(hookToken)-1]
	for name, c := range map[string]struct {
		req  *http.Request
		want int
	}{
		"in a header": {header, 401},
		"a prefix":    {prefix, 403},
		"the token":   {post(body), 200},
	} {
		if code := gatewaytest.Serve(p, c.req); code != c.want {
			t.Errorf("%s: HTTP %d, want %d", name, code, c.want)
		}
	}
	if got := rec.Take(); len(got) != 1 || got[0].ID != wppconnecttest.MessageID(user, "3EB0T") {
		t.Fatalf("admitted %+v", got)
	}
}

// TestMediaBodyNeverJournaled: a media message's body (a thumbnail, or the
// whole file with autoDownload) reaches neither the admitted message nor
// its stored reference.
func TestMediaBodyNeverJournaled(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec)
	file := []byte("the whole file, as autoDownload puts it in the body")
	body := wppconnecttest.New(session, apiToken).Event("onmessage", wppconnecttest.Image("3EB0IMG", user, "look", file))
	if code := gatewaytest.Serve(p, post(body)); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	got := rec.Take()
	if len(got) != 1 || got[0].Text != "look" || len(got[0].Media) != 1 {
		t.Fatalf("admitted %+v", got)
	}
	id := wppconnecttest.MessageID(user, "3EB0IMG")
	if got[0].Media[0] != (channel.Media{Type: "image", Ref: id, MIME: "image/jpeg", Caption: "look"}) {
		t.Fatalf("media %+v", got[0].Media[0])
	}
	stored, ok := p.SerializeMediaRef(got[0].Media[0])
	js, _ := json.Marshal(struct {
		M channel.Message
		S channel.StoredRef
	}{got[0], stored})
	if !ok || strings.Contains(string(js), base64.StdEncoding.EncodeToString(file)) || strings.Contains(string(js), "mediaKey") {
		t.Fatalf("journaled %s", js)
	}
}

func TestInbound(t *testing.T) {
	group := "120363012345678901@g.us"
	for _, c := range []struct {
		name, body string
		want       *channel.Message
	}{
		{"a group's member, ids as objects",
			`{"event":"onmessage","session":"botrun","id":{"fromMe":false,"remote":"` + group + `","id":"3EB0G","_serialized":"false_` + group + `_3EB0G_5511777777777@c.us"},"type":"chat","body":"hi all","from":"` + group + `","author":"5511777777777@c.us","chatId":{"server":"g.us","user":"120363012345678901","_serialized":"` + group + `"},"isGroupMsg":true,"sender":{"id":{"_serialized":"5511777777777@c.us"}},"t":1764412800}`,
			&channel.Message{ID: "false_" + group + "_3EB0G_5511777777777@c.us", Chat: group, From: "5511777777777@c.us", Text: "hi all", ReceivedAt: time.Unix(1764412800, 0)}},
		{"a voice note", `{"event":"unreadmessages","session":"botrun","id":"false_5511999999999@c.us_3EB0P","type":"ptt","body":"T2dnUw==","from":"5511999999999@c.us","mimetype":"audio/ogg; codecs=opus"}`,
			&channel.Message{ID: "false_5511999999999@c.us_3EB0P", Chat: userJID, From: userJID, Media: []channel.Media{{Type: "audio", Ref: "false_5511999999999@c.us_3EB0P", MIME: "audio/ogg; codecs=opus"}}}},
		{"own, by its id", `{"event":"onmessage","session":"botrun","id":"true_5511999999999@c.us_3EB0O","type":"chat","body":"mine","from":"5511888888888@c.us","chatId":"5511999999999@c.us"}`, nil},
		{"a revoke", `{"event":"onmessage","session":"botrun","id":"false_5511999999999@c.us_3EB0R","type":"revoked","from":"5511999999999@c.us"}`, nil},
		{"a channel", `{"event":"onmessage","session":"botrun","id":"false_1@newsletter_3EB0N","type":"chat","body":"news","from":"1@newsletter"}`, nil},
	} {
		wh, err := DecodeWebhook([]byte(c.body))
		if err != nil || wh.Message == nil {
			t.Errorf("%s: %+v, %v", c.name, wh, err)
			continue
		}
		msg, ok := wh.Message.Inbound()
		switch {
		case c.want == nil && ok:
			t.Errorf("%s: admitted %+v", c.name, msg)
		case c.want != nil && !ok:
			t.Errorf("%s: not admitted", c.name)
		case c.want != nil:
			ja, _ := json.Marshal(msg)
			jb, _ := json.Marshal(*c.want)
			if string(ja) != string(jb) {
				t.Errorf("%s: %s, want %s", c.name, ja, jb)
			}
		}
	}
	for _, bad := range []string{`{"event":"onmessage","session":"botrun","type":"chat","body":"x","from":"1@c.us"}`, `{"session":"botrun"}`, `[1]`} {
		if _, err := DecodeWebhook([]byte(bad)); !errors.Is(err, ErrBadWebhook) {
			t.Errorf("%s: %v, want ErrBadWebhook", bad, err)
		}
	}
}

// TestSends: groups and LIDs, typing, a disconnected session, a bad token.
func TestSends(t *testing.T) {
	api := wppconnecttest.New(session, apiToken, user)
	api.Groups["120363012345678901"] = true
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := newProvider(t, srv.URL, nil)
	ctx := context.Background()

	for _, chat := range []string{"120363012345678901@g.us", "123456789012345@lid"} {
		if ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "hi"}); err != nil || !strings.HasPrefix(ref, "true_"+chat+"_") {
			t.Errorf("to %s: %q, %v", chat, ref, err)
		}
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: userJID, Media: &channel.Media{Type: "document", URL: "https://example.com/r/report.pdf", Caption: "Q3"}}); err != nil {
		t.Fatal(err)
	}
	last := api.Last()
	if last.Endpoint != "send-file" || last.FileName != "report.pdf" || last.Text != "Q3" || last.Media != "https://example.com/r/report.pdf" {
		t.Fatalf("a document went as %+v", last)
	}
	// An inbound media sent back (the echo bot): its bytes from WPPConnect,
	// sent again as a data: URI.
	in := wppconnecttest.MessageID(user, "3EB0IN")
	api.Lock()
	api.Media[in] = []byte("jpeg bytes")
	api.Unlock()
	if _, err := p.Send(ctx, channel.Outbound{Chat: userJID, Text: "echo", Media: &channel.Media{Type: "image", Ref: in}}); err != nil {
		t.Fatal(err)
	}
	last = api.Last()
	if last.Endpoint != "send-image" || last.Media != "data:image/jpeg;base64,"+base64.StdEncoding.EncodeToString([]byte("jpeg bytes")) || last.Text != "echo" {
		t.Fatalf("an inbound media went as %+v", last)
	}
	if err := p.Typing(ctx, userJID, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Typing(ctx, "5511000000000@c.us", ""); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Errorf("typing to a number without WhatsApp: %v", err)
	}
	api.Lock()
	typing := api.Typing
	api.Unlock()
	if len(typing) != 1 || typing[0] != userJID {
		t.Fatalf("typing shown to %q", typing)
	}
	if _, ok := any(p).(channel.Editor); ok {
		t.Error("no Editor")
	}

	before := api.Requests.Load()
	_, err := p.Send(ctx, channel.Outbound{Chat: userJID, Text: "pick", List: &abi.List{Button: "Menu", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "a", Title: "A"}}}}}})
	channeltest.Refused(t, err, "buttons and lists", api.Requests.Load()-before)

	api.Lock()
	api.Disconnected = true
	api.Media["false_5511999999999@c.us_3EB0M"] = []byte("x")
	api.Unlock()
	if _, err := p.Send(ctx, channel.Outbound{Chat: userJID, Text: "x"}); err == nil || httpkit.Permanent(err) {
		t.Errorf("a disconnected session: %v, want a retryable error", err)
	}
	if _, err := p.LoadMedia(ctx, channel.Media{Ref: "false_5511999999999@c.us_3EB0M"}, 10); err == nil || httpkit.MediaGone(err) {
		t.Errorf("media while disconnected: %v, want a retryable error", err)
	}
	api.Lock()
	api.Disconnected = false
	api.Unlock()

	bad, _ := Open(Config{ID: "wpp", APIURL: srv.URL, Token: "not-the-token", Session: session, WebhookToken: hookToken}, channel.Env{})
	if _, err := bad.Send(ctx, channel.Outbound{Chat: userJID, Text: "x"}); !httpkit.Permanent(err) || strings.Contains(err.Error(), "not-the-token") {
		t.Errorf("a bad token: %v, want a permanent error without the token", err)
	}
	if _, err := bad.LoadMedia(ctx, channel.Media{Ref: "../../x"}, 10); !httpkit.MediaGone(err) {
		t.Errorf("a path as a media id: %v", err)
	}
}

func TestCheck(t *testing.T) {
	ok := Config{APIURL: "https://wpp.example.com", Token: "t", Session: "s", WebhookToken: hookToken}
	for _, c := range []struct {
		edit func(*Config)
		keys string
	}{
		{func(*Config) {}, ""},
		{func(c *Config) { c.WebhookToken = "" }, "webhook_token"},
		{func(c *Config) { c.WebhookToken = "short" }, "webhook_token"},
		{func(c *Config) { c.WebhookToken = "has spaces and & 0123456789" }, "webhook_token"},
		{func(c *Config) { c.Session = "s:token" }, "session"},
		{func(c *Config) { c.APIURL = "http://10.0.0.2:21465" }, "api_url"},
		{func(c *Config) { *c = Config{} }, "api_url token session webhook_token"},
	} {
		cfg := ok
		c.edit(&cfg)
		var keys []string
		cfg.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
		if got := strings.Join(keys, " "); got != c.keys {
			t.Errorf("%+v: problems with %q, want %q", cfg, got, c.keys)
		}
	}
	if _, err := Open(Config{ID: "wpp", APIURL: "http://127.0.0.1:9", Token: "t", Session: "s"}, channel.Env{}); err == nil {
		t.Error("opened without webhook_token")
	}
}

func FuzzDecodeWebhook(f *testing.F) {
	api := wppconnecttest.New(session, apiToken)
	f.Add(api.Event("onmessage", wppconnecttest.Text("3EB01", user, "hola")))
	f.Add(api.Event("onmessage", wppconnecttest.Image("3EB02", user, "look", []byte("thumb"))))
	f.Add(api.Event("unreadmessages", wppconnecttest.FromMe("3EB03", user, "own")))
	f.Add(api.Event("onack", map[string]any{"id": map[string]any{"_serialized": "x"}, "ack": 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		wh, err := DecodeWebhook(b)
		if err != nil || wh.Message == nil {
			return
		}
		if m, ok := wh.Message.Inbound(); ok && (m.ID == "" || m.Chat == "" || (m.Text == "" && len(m.Media) == 0)) {
			t.Fatalf("admissible message %+v", m)
		}
	})
}
