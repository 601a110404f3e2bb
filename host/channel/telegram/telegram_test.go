package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/telegram/telegramtest"
)

const token = "123456:TEST-token"

type admitter struct {
	mu   sync.Mutex
	msgs []channel.Message
	seen map[string]bool
}

func (a *admitter) Admit(_ context.Context, prov string, m channel.Message) (channel.Admission, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen[m.ID] {
		return channel.Admission{ID: prov + ":" + m.ID, Duplicate: true}, nil
	}
	a.seen[m.ID] = true
	a.msgs = append(a.msgs, m)
	return channel.Admission{ID: prov + ":" + m.ID}, nil
}

func setup(t *testing.T, poll bool) (*Provider, *telegramtest.API, *admitter) {
	api := telegramtest.New(token, 42, 43)
	api.Blocked[43] = true
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	a := &admitter{seen: map[string]bool{}}
	mode := "webhook"
	if poll {
		mode = "poll"
	}
	p, err := Open(Config{ID: "tg", Token: token, SecretToken: "s3cret_token", Mode: mode, APIURL: srv.URL}, channel.Env{Admitter: a})
	if err != nil {
		t.Fatal(err)
	}
	return p, api, a
}

func TestWebhookChecksTheSecretToken(t *testing.T) {
	p, _, a := setup(t, false)
	mux := http.NewServeMux()
	p.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(secret, body string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/webhooks/tg", strings.NewReader(body))
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	msg := `{"update_id":10,"message":{"message_id":5,"from":{"id":7},"chat":{"id":42,"type":"private"},"date":1764412800,"text":"hola"}}`
	for _, tt := range []struct {
		name, secret, body string
		code               int
	}{
		{"no secret", "", msg, 401},
		{"wrong secret", "nope", msg, 401},
		{"good", "s3cret_token", msg, 200},
		{"redelivered", "s3cret_token", msg, 200},
		{"not json", "s3cret_token", `{"update_id":`, 400},
		{"edited message ignored", "s3cret_token", `{"update_id":11,"edited_message":{"message_id":5,"chat":{"id":42},"text":"x"}}`, 200},
		{"bot's own message ignored", "s3cret_token", `{"update_id":12,"message":{"message_id":6,"from":{"id":1,"is_bot":true},"chat":{"id":42},"text":"x"}}`, 200},
		{"photo", "s3cret_token", `{"update_id":13,"message":{"message_id":7,"from":{"id":7},"chat":{"id":42},"caption":"look","photo":[{"file_id":"small"},{"file_id":"big"}]}}`, 200},
		{"voice note", "s3cret_token", `{"update_id":14,"message":{"message_id":8,"from":{"id":7},"chat":{"id":42},"voice":{"file_id":"v1","mime_type":"audio/ogg","duration":3}}}`, 200},
	} {
		if got := post(tt.secret, tt.body); got != tt.code {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.code)
		}
	}
	if len(a.msgs) != 3 || a.msgs[0].ID != "42:5" || a.msgs[0].Text != "hola" || a.msgs[0].From != "7" || a.msgs[0].ReceivedAt.Unix() != 1764412800 {
		t.Fatalf("admitted %+v", a.msgs)
	}
	if m := a.msgs[1]; len(m.Media) != 1 || m.Media[0].Ref != "big" || m.Media[0].Caption != "look" || m.Media[0].Type != "image" {
		t.Fatalf("photo %+v", m)
	}
	if m := a.msgs[2]; len(m.Media) != 1 || m.Media[0].Ref != "v1" || m.Media[0].Type != "audio" || m.Media[0].MIME != "audio/ogg" {
		t.Fatalf("voice note %+v", m)
	}
}

func TestSendMapsTheAPIErrors(t *testing.T) {
	p, api, _ := setup(t, false)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "hi"})
	if err != nil || ref != "1" {
		t.Fatalf("send: %q %v", ref, err)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: strings.Repeat("é", TextLimit+1)}); !errors.Is(err, channel.ErrPayloadTooLarge) {
		t.Fatalf("too long: %v", err)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: "99", Text: "hi"}); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Fatalf("chat not found: %v", err)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: "43", Text: "hi"}); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Fatalf("blocked: %v", err)
	}
	api.Limited = 1
	if _, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "hi"}); httpkit.RetryAfter(err) != 7*time.Second || httpkit.Permanent(err) {
		t.Fatalf("rate limit: %v", err)
	}
	ref, err = p.Send(ctx, channel.Outbound{Chat: "42", Media: &channel.Media{Type: "image", Ref: "file-1", Caption: "c"}})
	if err != nil || api.Sent[len(api.Sent)-1]["method"] != "sendPhoto" || api.Sent[len(api.Sent)-1]["photo"] != "file-1" {
		t.Fatalf("photo: %q %v %v", ref, err, api.Sent)
	}
	bad, err := Open(Config{ID: "tg", Token: "wrong", APIURL: p.cfg.APIURL}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Send(ctx, channel.Outbound{Chat: "42", Text: "hi"}); !httpkit.Permanent(err) {
		t.Fatalf("bad token: %v", err)
	}
	// A network error never shows the token (it is in the URL).
	down, err := Open(Config{ID: "tg", Token: token, APIURL: "http://127.0.0.1:1"}, channel.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Send(ctx, channel.Outbound{Chat: "42", Text: "hi"}); err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("network error %v", err)
	}
}

func TestPollAdmitsAndAdvancesTheOffset(t *testing.T) {
	p, api, a := setup(t, true)
	for i := range 3 {
		api.Updates = append(api.Updates, json.RawMessage(fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"from":{"id":7},"chat":{"id":42},"text":"m%d"}}`, 100+i, i+1, i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go p.Run(ctx)
	fakekit.WaitFor(t, "getUpdates with offset 103", func() bool {
		offsets := api.Offsets()
		return len(offsets) >= 2 && offsets[len(offsets)-1] == 103
	})
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.msgs) != 3 || a.msgs[2].Text != "m2" {
		t.Fatalf("admitted %+v", a.msgs)
	}
}

func TestMediaRefs(t *testing.T) {
	p, _, _ := setup(t, false)
	s, ok := p.SerializeMediaRef(channel.Media{Type: "image", Ref: "AgACAgQ"})
	if !ok || s.V != 1 || bytes.Contains(s.Data, []byte(token)) {
		t.Fatalf("stored %+v", s)
	}
	if m, err := p.RehydrateMediaRef(s); err != nil || m.Ref != "AgACAgQ" {
		t.Fatalf("rehydrate %+v %v", m, err)
	}
	for _, bad := range []channel.StoredRef{{V: 2, Data: s.Data}, {V: 1, Data: []byte(`{}`)}, {V: 1, Data: []byte(`nope`)}} {
		if _, err := p.RehydrateMediaRef(bad); err == nil {
			t.Fatalf("accepted %+v", bad)
		}
	}
}

func FuzzDecodeUpdate(f *testing.F) {
	f.Add([]byte(`{"update_id":10,"message":{"message_id":5,"from":{"id":7},"chat":{"id":42},"text":"hola"}}`))
	f.Add([]byte(`{"update_id":1,"message":{"message_id":0}}`))
	f.Add([]byte(`{"update_id":11,"callback_query":{"id":"4382bfdwdsb323b2d9","from":{"id":7},"message":{"message_id":5,"chat":{"id":42},"reply_markup":{"inline_keyboard":[[{"text":"Yes","callback_data":"yes"}],[{"text":"Docs","url":"https://example.com"}]]}},"data":"yes"}}`))
	f.Add([]byte(`{"update_id":12,"callback_query":{"id":"q","from":{"id":7},"message":{"message_id":5,"chat":{"id":42}},"game_short_name":"g"}}`))
	f.Add([]byte(`{"update_id":13,"callback_query":{"id":"q","from":{"id":7},"inline_message_id":"i","data":"x"}}`))
	f.Add([]byte(`{"update_id":14,"callback_query":{"id":"","data":"x","message":{"message_id":1,"chat":{"id":0}}}}`))
	f.Add([]byte(`{"update_id":15,"callback_query":{"id":"q","message":{"message_id":1,"chat":{"id":1},"reply_markup":{"inline_keyboard":[null,[null]]}},"data":"x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := DecodeUpdate(b)
		if err != nil {
			if !errors.Is(err, ErrBadUpdate) {
				t.Fatal(err)
			}
			return
		}
		if m, ok := u.message(); ok && (m.ID == "" || m.Chat == "") {
			t.Fatalf("message without id or chat from %q", b)
		}
		if m, ok := u.interaction(); ok {
			in := m.Interaction
			if m.ID == "cb:" || !strings.HasPrefix(m.ID, "cb:") || m.Chat == "" || in == nil || in.ID == "" || in.Message == "" {
				t.Fatalf("interaction %+v %+v from %q", m, in, b)
			}
			if u.CallbackQuery.Message.ReplyMarkup == nil && in.Title != "" {
				t.Fatalf("a title without a keyboard from %q", b)
			}
		}
	})
}

// TestMediaRedirectsChecked: the download URL holds the bot token. A redirect
// from the API to another origin (plain http, or an https host that is not
// the API) is not followed, so the token never reaches it, in a Referer or
// otherwise; a redirect within the API's own origin is followed without a
// Referer.
func TestMediaRedirectsChecked(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.URL.String()+" Referer="+r.Header.Get("Referer"))
		mu.Unlock()
		w.Write([]byte("stolen"))
	}))
	defer elsewhere.Close()
	var referer string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/getFile"):
			var req struct {
				FileID string `json:"file_id"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			fmt.Fprintf(w, `{"ok":true,"result":{"file_path":"photos/%s.jpg"}}`, req.FileID)
		case strings.HasSuffix(r.URL.Path, "/photos/away.jpg"):
			http.Redirect(w, r, elsewhere.URL+"/collect", http.StatusFound)
		case strings.HasSuffix(r.URL.Path, "/photos/https-away.jpg"):
			http.Redirect(w, r, "https://media.example.net/collect", http.StatusFound)
		case strings.HasSuffix(r.URL.Path, "/photos/home.jpg"):
			http.Redirect(w, r, "/cdn/home.jpg", http.StatusFound)
		case r.URL.Path == "/cdn/home.jpg":
			referer = r.Header.Get("Referer")
			w.Write([]byte("jpeg bytes"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	p, err := Open(Config{ID: "tg", Token: token, Mode: "poll", APIURL: api.URL}, channel.Env{Admitter: &admitter{seen: map[string]bool{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"away", "https-away"} {
		b, err := p.LoadMedia(context.Background(), channel.Media{Type: "image", Ref: ref}, 1<<20)
		if err == nil || !errors.Is(err, httpkit.ErrRedirectRefused) {
			t.Errorf("%s: got %q, %v; want the redirect refused", ref, b, err)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("%s: the error holds the token: %v", ref, err)
		}
	}
	mu.Lock()
	if len(leaked) > 0 {
		t.Errorf("another origin was called: %q", leaked)
	}
	mu.Unlock()
	b, err := p.LoadMedia(context.Background(), channel.Media{Type: "image", Ref: "home"}, 1<<20)
	if err != nil || string(b) != "jpeg bytes" {
		t.Fatalf("redirect within the API origin: %q, %v", b, err)
	}
	if referer != "" {
		t.Fatalf("the redirected request carried Referer %q", referer)
	}
}

// An update that panics in webhook mode is skipped, answered 200 (logged
// with its update_id, counted), as poll mode skips it: answered 500,
// Telegram would redeliver it first forever, and the updates after it
// would wait behind it.
func TestWebhookSkipsAnUpdateThatPanics(t *testing.T) {
	a := &admitter{seen: map[string]bool{}}
	boom := channeltest.Panicking{Admitter: a, Boom: func(m channel.Message) bool { return m.Text == "boom" }}
	var panics int
	var logged bytes.Buffer
	p, err := Open(Config{ID: "tg", Token: token, SecretToken: "s3cret_token", Mode: "webhook", APIURL: "https://api.telegram.org"},
		channel.Env{Admitter: boom, Panicked: func() { panics++ }, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.Routes(mux)
	post := func(body string) (code int) {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("the webhook panicked: %v", v)
			}
		}()
		req := httptest.NewRequest("POST", "/webhooks/tg", strings.NewReader(body))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s3cret_token")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	msg := `{"update_id":%d,"message":{"message_id":%d,"from":{"id":7},"chat":{"id":42,"type":"private"},"date":1764412800,"text":%q}}`
	if code := post(fmt.Sprintf(msg, 20, 5, "boom")); code != http.StatusOK {
		t.Fatalf("the update that panicked was answered %d", code)
	}
	if code := post(fmt.Sprintf(msg, 21, 6, "next")); code != http.StatusOK || len(a.msgs) != 1 || a.msgs[0].Text != "next" || panics != 1 {
		t.Fatalf("the next update: %d, admitted %+v, %d panics", code, a.msgs, panics)
	}
	if !strings.Contains(logged.String(), "update_id 20") || strings.Contains(logged.String(), "boom") {
		t.Fatalf("the log does not name the update (or shows its text):\n%s", logged.String())
	}
}
