package messaging_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/messenger/messengertest"
)

// deliver serves a signed webhook body on a channel that admits into rec.
func deliver(t *testing.T, rec channel.Admitter, body []byte) int {
	t.Helper()
	mux := http.NewServeMux()
	open(t, spec("http://127.0.0.1:1/v21.0"), rec).Routes(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, messagingtest.Contract{ID: "fb", AppSecret: appSecret}.Signed(t, body))
	return w.Code
}

// TestInteractionsAdmitted: a quick-reply press and postback presses are
// admitted as interactions (payload = id, the title), under their mid or,
// for a postback without one, a stable id of its own; echoes and receipts
// beside them are not.
func TestInteractionsAdmitted(t *testing.T) {
	rec := &channeltest.Recorder{}
	body := messengertest.Notification(page,
		messagingtest.QuickReplyPress(user, page, "m_IN1", "Pizza", "pizza", "m_OUT7"),
		messagingtest.PostbackPress(user, page, "m_IN2", "Pasta", "pasta"),
		messagingtest.PostbackPress(user, page, "", "Menu", "menu"),
		messagingtest.PostbackPress(user, page, "m_IN4", "Get Started", ""),
		messagingtest.Echo(page, user, "m_OUT8", "echo"),
		messagingtest.Delivery(user, page, "m_OUT8"),
	)
	if code := deliver(t, rec, body); code != 200 {
		t.Fatalf("webhook: HTTP %d", code)
	}
	ts := "1764412800123"
	want := []channel.Message{
		{ID: "m_IN1", Interaction: &abi.Interaction{ID: "pizza", Title: "Pizza", Message: "m_OUT7"}},
		{ID: "m_IN2", Interaction: &abi.Interaction{ID: "pasta", Title: "Pasta"}},
		{ID: "postback:" + user + ":" + ts, Interaction: &abi.Interaction{ID: "menu", Title: "Menu"}},
		{ID: "m_IN4", Text: "Get Started"},
	}
	got := rec.Take()
	if len(got) != len(want) {
		t.Fatalf("admitted %d: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.Chat != user || g.From != user || g.Text != w.Text || (w.Interaction == nil) != (g.Interaction == nil) ||
			(w.Interaction != nil && *g.Interaction != *w.Interaction) {
			t.Errorf("admitted %d: %+v %+v, want %+v %+v", i, g, g.Interaction, w, w.Interaction)
		}
		if !g.ReceivedAt.Equal(time.UnixMilli(messagingtest.Timestamp)) {
			t.Errorf("admitted %d at %v", i, g.ReceivedAt)
		}
	}
}

// TestAttachmentsAdmitted: images, stickers, files, audio and video are
// media, their URL the reference; what botrun does not load is left out.
func TestAttachmentsAdmitted(t *testing.T) {
	rec := &channeltest.Recorder{}
	cdn := "https://scontent.xx.fbcdn.net/v/t1/x.jpg?oe=1"
	body := messengertest.Notification(page,
		messagingtest.Media(user, page, "m_1", "image", cdn),
		messagingtest.Media(user, page, "m_2", "sticker", cdn),
		messagingtest.Media(user, page, "m_3", "file", cdn),
		messagingtest.Media(user, page, "m_4", "audio", cdn),
		messagingtest.Media(user, page, "m_5", "video", cdn),
		messagingtest.Media(user, page, "m_6", "fallback", "https://example.com/shared-link"),
		messagingtest.Media(user, page, "m_7", "image", ""),
	)
	if code := deliver(t, rec, body); code != 200 {
		t.Fatalf("webhook: HTTP %d", code)
	}
	want := []string{"image", "sticker", "document", "audio", "video"}
	got := rec.Take()
	if len(got) != len(want) {
		t.Fatalf("admitted %+v", got)
	}
	for i, kind := range want {
		if m := got[i].Media; len(m) != 1 || m[0].Type != kind || m[0].Ref != cdn {
			t.Errorf("message %d: %+v, want one %s", i, m, kind)
		}
	}
}

// TestWebhookRefusals: a body that is not this channel's object is 400; an
// event without a mid or a sender is skipped while the rest of its batch is
// admitted (200: a 400 would make Meta redeliver them all); a journal that
// fails is 503 with Retry-After.
func TestWebhookRefusals(t *testing.T) {
	for name, body := range map[string]string{
		"instagram's object": `{"object":"instagram","entry":[]}`,
		"not JSON":           `{"object":`,
	} {
		if code := deliver(t, &channeltest.Recorder{}, []byte(body)); code != 400 {
			t.Errorf("%s: HTTP %d, want 400", name, code)
		}
	}
	rec := &channeltest.Recorder{}
	batch := `{"object":"page","entry":[{"id":"` + page + `","messaging":[` +
		`{"sender":{"id":"1"},"message":{"text":"no mid"}},` +
		`{"postback":{"payload":"no sender"}},` +
		`{"sender":{"id":"1"},"recipient":{"id":"` + page + `"},"timestamp":1,"message":{"mid":"m_ok","text":"fine"}}]}]}`
	code := deliver(t, rec, []byte(batch))
	if got := rec.Take(); code != 200 || len(got) != 1 || got[0].ID != "m_ok" {
		t.Errorf("a batch with two bad events: HTTP %d, admitted %+v; want 200 and the good one", code, got)
	}
	mux := http.NewServeMux()
	open(t, spec("http://127.0.0.1:1/v21.0"), failing{}).Routes(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, messagingtest.Contract{ID: "fb", AppSecret: appSecret}.Signed(t, messengertest.Notification(page, messagingtest.Text(user, page, "m_1", "hi"))))
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("a failed journal: HTTP %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

type failing struct{}

func (failing) Admit(context.Context, string, channel.Message) (channel.Admission, error) {
	return channel.Admission{}, errors.New("journal down")
}

// TestVerificationHandshake: GET /webhooks/<id> is the hub.challenge
// handshake (graph.Verify, tested in package graph).
func TestVerificationHandshake(t *testing.T) {
	mux := http.NewServeMux()
	open(t, spec("http://127.0.0.1:1/v21.0"), nil).Routes(mux)
	for token, want := range map[string]int{"verify-me": 200, "wrong": 403} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/webhooks/fb?hub.mode=subscribe&hub.challenge=11&hub.verify_token="+token, nil))
		if rec.Code != want || (want == 200 && rec.Body.String() != "11") {
			t.Errorf("verify token %q: %d %q, want %d", token, rec.Code, rec.Body.String(), want)
		}
	}
}

// TestMediaHosts: attachment URLs are durable and loaded only when https on
// an allowed host (or api_url's origin); media_ref_hosts replaces the list.
func TestMediaHosts(t *testing.T) {
	def := open(t, spec("https://graph.facebook.com/v21.0"), nil)
	own := spec("https://graph.facebook.com/v21.0")
	own.MediaHosts = []string{"cdn.example.com"}
	replaced := open(t, own, nil)
	for _, tt := range []struct {
		url           string
		def, replaced bool
	}{
		{"https://scontent.xx.fbcdn.net/v/t1/x.jpg?oe=1", true, false},
		{"https://lookaside.fbsbx.com/ig_messaging_cdn/?asset_id=1", true, false},
		{"https://graph.facebook.com/v21.0/x", true, true},
		{"https://media.cdn.example.com/a.jpg", false, true},
		{"http://scontent.xx.fbcdn.net/x.jpg", false, false},
		{"https://fbcdn.net.evil.example/x", false, false},
		{"https://user:pw@scontent.xx.fbcdn.net/x", false, false},
		{"https://scontent.xx.fbcdn.net/" + strings.Repeat("x", 5000), false, false},
	} {
		_, okDef := def.SerializeMediaRef(channel.Media{Ref: tt.url})
		_, okRep := replaced.SerializeMediaRef(channel.Media{Ref: tt.url})
		if okDef != tt.def || okRep != tt.replaced {
			t.Errorf("%.60s: durable %v / %v with media_ref_hosts, want %v / %v", tt.url, okDef, okRep, tt.def, tt.replaced)
		}
	}
	if _, err := def.LoadMedia(context.Background(), channel.Media{Ref: "https://evil.example/x.jpg"}, 1<<20); !httpkit.MediaGone(err) {
		t.Fatalf("loading from another host: %v", err)
	}
}

func TestCheckHosts(t *testing.T) {
	var keys []string
	messaging.CheckHosts(func(key, _ string, _ ...any) { keys = append(keys, key) }, "media_ref_hosts",
		[]string{"fbcdn.net", "https://fbcdn.net", "fbcdn.net:443", "*.fbcdn.net", "FBCDN.NET", "fbcdn.net/x", "", "cdn.example.com"})
	if strings.Join(keys, ",") != "media_ref_hosts[1],media_ref_hosts[2],media_ref_hosts[3],media_ref_hosts[4],media_ref_hosts[5],media_ref_hosts[6]" {
		t.Fatalf("problems with %q", keys)
	}
}

func FuzzDecodeNotification(f *testing.F) {
	for _, object := range []string{"page", "instagram"} {
		f.Add(messagingtest.Body(object, page, messagingtest.Text(user, page, "m_1", "hola")))
		f.Add(messagingtest.Body(object, page, messagingtest.Media(user, page, "m_2", "image", "https://scontent.xx.fbcdn.net/x.jpg")))
		f.Add(messagingtest.Body(object, page, messagingtest.Media(user, page, "m_3", "sticker", "https://scontent.xx.fbcdn.net/x.jpg")))
		f.Add(messagingtest.Body(object, page, messagingtest.QuickReplyPress(user, page, "m_4", "Yes", "yes", "m_OUT1")))
		f.Add(messagingtest.Body(object, page, messagingtest.PostbackPress(user, page, "", "Menu", "menu")))
		f.Add(messagingtest.Body(object, page, messagingtest.Echo(page, user, "m_5", "echo"), messagingtest.Read(user, page)))
	}
	f.Add([]byte(`{"object":"page","entry":[{"id":"1","messaging":[{"sender":{"id":"2"},"timestamp":"17","message":{"mid":"m","text":"x","attachments":[{"type":"image","payload":null}]}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, object := range []string{"page", "instagram"} {
			n, err := messaging.DecodeNotification(b, object)
			if err != nil {
				continue
			}
			for _, e := range n.Entry {
				for _, ev := range e.Messaging {
					msg, ok := ev.Inbound()
					if !ok {
						continue
					}
					if msg.ID == "" || msg.Chat == "" {
						t.Fatalf("admissible message without id or chat: %+v", msg)
					}
					if msg.Interaction != nil && msg.Interaction.ID == "" {
						t.Fatalf("an interaction without id: %+v", msg.Interaction)
					}
					for _, m := range msg.Media {
						if m.Ref == "" || m.Type == "" {
							t.Fatalf("media without a ref or a type: %+v", m)
						}
					}
				}
			}
		}
	})
}
