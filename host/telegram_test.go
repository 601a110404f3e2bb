package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel/telegram"
	"github.com/botrun/botrun/host/channel/telegram/telegramtest"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
)

const tgToken = "987:TEST"

func telegramBot(t *testing.T, mode string, h Guest) (*testBot, *telegramtest.API, http.Handler) {
	t.Helper()
	api := telegramtest.New(tgToken, 42)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cfg := testConfig(t, "")
	cfg.Channels = []config.Channel{{ID: "tg", Type: "telegram", Settings: &telegram.Config{
		Token: tgToken, SecretToken: "sekret", Mode: mode, APIURL: srv.URL}}}
	b, err := New(context.Background(), cfg, Options{Logger: discard, Backend: memory.New(), Guest: h})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBot{Bot: b, events: make(chan observe.Alert, 100)}
	b.Start()
	t.Cleanup(func() { tb.stop(t) })
	return tb, api, b.Handler()
}

// A reply over Telegram's 4096-character limit goes out as ordered parts, each
// accepted by the fake (which rejects longer texts, as the real API does).
func TestTelegramWebhookAndLongReplies(t *testing.T) {
	long := strings.Repeat("0123456789 ", 500) // 5,500 characters
	b, api, handler := telegramBot(t, "webhook", native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: ev.Text + ": " + long})
		return err
	}))
	body := `{"update_id":1,"message":{"message_id":9,"from":{"id":7},"chat":{"id":42},"date":1764412800,"text":"hi"}}`
	for _, secret := range []string{"wrong", "sekret", "sekret"} {
		req := httptest.NewRequest("POST", "/webhooks/tg", strings.NewReader(body))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		if want := map[string]int{"wrong": 401, "sekret": 200}[secret]; rec.Code != want {
			t.Fatalf("secret %q: %d, want %d", secret, rec.Code, want)
		}
	}
	if !b.quiet(1, 60*time.Second) {
		in, _ := b.Operator().ListInbox(context.Background(), durability.ListFilter{})
		out, _ := b.Operator().ListOutbox(context.Background(), durability.ListFilter{})
		for _, r := range out {
			t.Logf("outbox %s %s %s", r.Key, r.State, r.Error)
		}
		t.Fatalf("did not settle: %+v", in)
	}
	texts := api.Texts(42)
	if len(texts) != 2 || strings.Join(texts, "") != "hi: "+long {
		t.Fatalf("sent %d parts (%v)", len(texts), len(texts))
	}
	for _, p := range texts {
		if utf8.RuneCountInString(p) > 4096 {
			t.Fatalf("a part of %d characters", utf8.RuneCountInString(p))
		}
	}
	if m := b.Observer().Metrics(); m.InboundDuplicates != 1 || m.InboundJournaled != 1 {
		t.Fatalf("the redelivered update was not deduplicated: %+v", m)
	}
}

func TestTelegramLongPolling(t *testing.T) {
	b, api, _ := telegramBot(t, "poll", native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		_, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: "echo: " + ev.Text})
		return err
	}))
	_ = b
	raw, _ := json.Marshal(map[string]any{"update_id": 5, "message": map[string]any{"message_id": 1, "from": map[string]any{"id": 7}, "chat": map[string]any{"id": 42}, "text": "polled"}})
	func() {
		api.Lock()
		defer api.Unlock()
		api.Updates = append(api.Updates, raw)
	}()
	if !waitFor(60*time.Second, func() bool { return fmt.Sprint(api.Texts(42)) == "[echo: polled]" }) {
		t.Fatalf("sent %q", api.Texts(42))
	}
}
