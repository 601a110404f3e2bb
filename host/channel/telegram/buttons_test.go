package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/internal/fakekit"
	"github.com/botrun/botrun/host/channel/telegram/telegramtest"
)

type tb = telegramtest.Button

func TestSendButtonsAsInlineKeyboard(t *testing.T) {
	p, api, _ := setup(t, false)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "Pick one", Buttons: []abi.Button{
		{ID: "yes", Title: "Yes"}, {ID: "no", Title: "No"}, {Title: "Docs", URL: "https://example.com/docs"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]tb{{{Text: "Yes", CallbackData: "yes"}}, {{Text: "No", CallbackData: "no"}}, {{Text: "Docs", URL: "https://example.com/docs"}}}
	if got := api.Keyboard(1); ref != "1" || !reflect.DeepEqual(got, want) {
		t.Fatalf("ref %q, keyboard %+v", ref, got)
	}
	// The wire shape, as the fake recorded it.
	if got := string(api.ReplyMarkup(1)); got != `{"inline_keyboard":[[{"callback_data":"yes","text":"Yes"}],[{"callback_data":"no","text":"No"}],[{"text":"Docs","url":"https://example.com/docs"}]]}` {
		t.Fatalf("reply_markup %s", got)
	}
	// No choices, no reply_markup.
	if _, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := api.Sent[1]["reply_markup"]; ok || api.ReplyMarkup(2) != nil {
		t.Fatalf("a plain text carried reply_markup: %v", api.Sent[1])
	}
	// A photo or a document carries them too.
	for i, m := range []channel.Media{{Type: "image", Ref: "file-1"}, {Type: "document", URL: "https://example.com/a.pdf"}} {
		if _, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "caption", Media: &m, Buttons: []abi.Button{{ID: "ok", Title: "OK"}}}); err != nil {
			t.Fatal(err)
		}
		sent := api.Sent[len(api.Sent)-1]
		if want := []string{"sendPhoto", "sendDocument"}[i]; sent["method"] != want {
			t.Fatalf("method %v, want %s", sent["method"], want)
		}
		if got := api.Keyboard(int64(3 + i)); !reflect.DeepEqual(got, [][]tb{{{Text: "OK", CallbackData: "ok"}}}) {
			t.Fatalf("%s keyboard %+v", sent["method"], got)
		}
	}
}

func TestSendListAsInlineKeyboard(t *testing.T) {
	p, api, _ := setup(t, false)
	list := &abi.List{Button: "Menu", Sections: []abi.ListSection{
		{Title: "Pizza", Rows: []abi.ListRow{{ID: "margherita", Title: "Margherita", Description: "tomato, mozzarella"}, {ID: "diavola", Title: "Diavola"}}},
		{Title: "Drinks", Rows: []abi.ListRow{{ID: "water", Title: "Water"}}},
	}}
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "42", Text: "What will it be?", List: list}); err != nil {
		t.Fatal(err)
	}
	want := [][]tb{{{Text: "Margherita", CallbackData: "margherita"}}, {{Text: "Diavola", CallbackData: "diavola"}}, {{Text: "Water", CallbackData: "water"}}}
	if got := api.Keyboard(1); !reflect.DeepEqual(got, want) {
		t.Fatalf("keyboard %+v", got)
	}
}

// TestSendRefusesWhatTelegramRefuses: an id over callback_data's 64 bytes is
// refused before any request, named with the limit; 64 bytes go.
func TestSendRefusesWhatTelegramRefuses(t *testing.T) {
	p, api, _ := setup(t, false)
	ctx := context.Background()
	long, wide := strings.Repeat("x", 65), strings.Repeat("é", 33) // 65 and 66 bytes
	for _, tt := range []struct {
		name, id string
		msg      channel.Outbound
	}{
		{"button", long, channel.Outbound{Chat: "42", Text: "t", Buttons: []abi.Button{{ID: "ok", Title: "OK"}, {ID: long, Title: "Long"}}}},
		{"multibyte", wide, channel.Outbound{Chat: "42", Text: "t", Buttons: []abi.Button{{ID: wide, Title: "Wide"}}}},
		{"list row", long, channel.Outbound{Chat: "42", Text: "t", List: &abi.List{Button: "Menu", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: long, Title: "Long"}}}}}}},
		{"with a photo", long, channel.Outbound{Chat: "42", Media: &channel.Media{Type: "image", Ref: "f"}, Buttons: []abi.Button{{ID: long, Title: "Long"}}}},
		{"no title", "", channel.Outbound{Chat: "42", Text: "t", Buttons: []abi.Button{{ID: "a"}}}},
	} {
		_, err := p.Send(ctx, tt.msg)
		if !errors.Is(err, channel.ErrUnsupportedContent) {
			t.Errorf("%s: %v, want ErrUnsupportedContent", tt.name, err)
			continue
		}
		if tt.id != "" && (!strings.Contains(err.Error(), tt.id) || !strings.Contains(err.Error(), "1-64 bytes")) {
			t.Errorf("%s: the error names not the id and the limit: %v", tt.name, err)
		}
	}
	if n := api.Calls("sendMessage") + api.Calls("sendPhoto"); n != 0 {
		t.Fatalf("%d requests made for refused sends", n)
	}
	ok := strings.Repeat("y", 64)
	if _, err := p.Send(ctx, channel.Outbound{Chat: "42", Text: "t", Buttons: []abi.Button{{ID: ok, Title: "Max"}}}); err != nil {
		t.Fatalf("64 bytes: %v", err)
	}
	if got := api.Keyboard(1); len(got) != 1 || got[0][0].CallbackData != ok {
		t.Fatalf("keyboard %+v", got)
	}
}

// TestFakeRefusesBadKeyboards: the fake refuses what the Bot API refuses,
// posted to it directly.
func TestFakeRefusesBadKeyboards(t *testing.T) {
	api := telegramtest.New(token, 42)
	srv := httptest.NewServer(api)
	defer srv.Close()
	post := func(method, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/bot"+token+"/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Description string `json:"description"`
		}
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &r)
		return resp.StatusCode, r.Description
	}
	send := func(markup string) (int, string) {
		return post("sendMessage", `{"chat_id":42,"text":"t","reply_markup":`+markup+`}`)
	}
	for _, tt := range []struct {
		name, markup, desc string
	}{
		{"65-byte callback_data", `{"inline_keyboard":[[{"text":"a","callback_data":"` + strings.Repeat("x", 65) + `"}]]}`, "BUTTON_DATA_INVALID"},
		{"empty callback_data", `{"inline_keyboard":[[{"text":"a","callback_data":""}]]}`, "BUTTON_DATA_INVALID"},
		{"empty text", `{"inline_keyboard":[[{"text":"","callback_data":"a"}]]}`, "text buttons are unallowed"},
		{"no action", `{"inline_keyboard":[[{"text":"a"}]]}`, "text buttons are unallowed"},
		{"bad url", `{"inline_keyboard":[[{"text":"a","url":"javascript:alert(1)"}]]}`, "BUTTON_URL_INVALID"},
		{"not a keyboard", `{"inline_keyboard":"x"}`, "can't parse"},
		{"bad string", `"{"`, "can't parse"},
	} {
		if code, desc := send(tt.markup); code != 400 || !strings.Contains(desc, tt.desc) {
			t.Errorf("%s: %d %q, want 400 %q", tt.name, code, desc, tt.desc)
		}
	}
	if n := len(api.Sent); n != 0 {
		t.Fatalf("%d refused sends recorded", n)
	}
	// 64 bytes go, and so does the markup serialized in a string.
	if code, desc := send(`{"inline_keyboard":[[{"text":"a","callback_data":"` + strings.Repeat("x", 64) + `"}]]}`); code != 200 {
		t.Fatalf("64 bytes: %d %s", code, desc)
	}
	if code, desc := send(`"{\"inline_keyboard\":[[{\"text\":\"b\",\"url\":\"https://example.com\"}]]}"`); code != 200 {
		t.Fatalf("string markup: %d %s", code, desc)
	}
	if got := api.Keyboard(2); !reflect.DeepEqual(got, [][]tb{{{Text: "b", URL: "https://example.com"}}}) {
		t.Fatalf("recorded %+v", got)
	}
	// answerCallbackQuery: only for a query the fake issued.
	api.Press(telegramtest.Callback{UpdateID: 1, ID: "q1", From: 7, Chat: 42, MessageID: 1, Data: "a"})
	for _, tt := range []struct {
		body string
		code int
	}{{`{"callback_query_id":"q1"}`, 200}, {`{"callback_query_id":"nope"}`, 400}, {`{"callback_query_id":""}`, 400}, {`{}`, 400}} {
		if code, desc := post("answerCallbackQuery", tt.body); code != tt.code {
			t.Errorf("answer %s: %d %s, want %d", tt.body, code, desc, tt.code)
		}
	}
	if got := api.AnsweredQueries(); !reflect.DeepEqual(got, []string{"q1"}) {
		t.Fatalf("answered %v", got)
	}
}

// flaky admits after failing the first n calls.
type flaky struct {
	*admitter
	n int
}

func (f *flaky) Admit(ctx context.Context, prov string, m channel.Message) (channel.Admission, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return channel.Admission{}, errors.New("journal unavailable")
	}
	f.mu.Unlock()
	return f.admitter.Admit(ctx, prov, m)
}

func TestCallbackQueryAdmittedAndAnswered(t *testing.T) {
	p, api, a := setup(t, false)
	fl := &flaky{admitter: a, n: 1}
	p.Admitter = fl
	mux := http.NewServeMux()
	p.Routes(mux)
	post := func(body []byte) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/webhooks/tg", bytes.NewReader(body))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s3cret_token")
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	ref, err := p.Send(context.Background(), channel.Outbound{Chat: "42", Text: "Pick", Buttons: []abi.Button{{ID: "yes", Title: "Yes"}, {ID: "no", Title: "No"}}})
	if err != nil {
		t.Fatal(err)
	}
	press := api.Press(telegramtest.Callback{UpdateID: 20, ID: "4382bfdwdsb323b2d9", From: 7, Chat: 42, MessageID: 1, Data: "no"})
	// Not admitted: 503, not answered (Telegram redelivers).
	if code := post(press); code != 503 || len(api.AnsweredQueries()) != 0 {
		t.Fatalf("admission failed: %d, answered %v", code, api.AnsweredQueries())
	}
	if code := post(press); code != 200 {
		t.Fatalf("press: %d", code)
	}
	want := channel.Message{ID: "cb:4382bfdwdsb323b2d9", Chat: "42", From: "7",
		Interaction: &abi.Interaction{ID: "no", Title: "No", Message: ref}}
	if len(a.msgs) != 1 || !reflect.DeepEqual(a.msgs[0], want) {
		t.Fatalf("admitted %+v, want %+v", a.msgs, want)
	}
	if a.msgs[0].Interaction.Message != "1" {
		t.Fatalf("interaction message %q", a.msgs[0].Interaction.Message)
	}
	// Redelivered: a duplicate, answered again.
	if code := post(press); code != 200 || len(a.msgs) != 1 {
		t.Fatalf("redelivery: %d, admitted %d", code, len(a.msgs))
	}
	if got := api.AnsweredQueries(); !reflect.DeepEqual(got, []string{"4382bfdwdsb323b2d9", "4382bfdwdsb323b2d9"}) {
		t.Fatalf("answered %v", got)
	}
	// A button the keyboard does not show: admitted, without a title.
	if code := post(api.Press(telegramtest.Callback{UpdateID: 21, ID: "q-old", From: 7, Chat: 42, MessageID: 99, Data: "stale"})); code != 200 {
		t.Fatalf("stale: %d", code)
	}
	if m := a.msgs[len(a.msgs)-1]; m.ID != "cb:q-old" || m.Interaction.ID != "stale" || m.Interaction.Title != "" || m.Interaction.Message != "99" {
		t.Fatalf("stale press %+v %+v", m, m.Interaction)
	}
	// A game's callback (no data) and a bot's are answered and ignored.
	for _, c := range []telegramtest.Callback{
		{UpdateID: 22, ID: "q-game", From: 7, Chat: 42, MessageID: 1},
		{UpdateID: 23, ID: "q-bot", From: 8, FromBot: true, Chat: 42, MessageID: 1, Data: "yes"},
	} {
		if code := post(api.Press(c)); code != 200 {
			t.Fatalf("%s: %d", c.ID, code)
		}
	}
	if len(a.msgs) != 2 {
		t.Fatalf("admitted %+v", a.msgs)
	}
	if got := api.AnsweredQueries(); len(got) != 5 || got[3] != "q-game" || got[4] != "q-bot" {
		t.Fatalf("answered %v", got)
	}
	// A callback_query without an id is a bad update; a failed answer
	// (unknown to the API) does not fail the webhook.
	if code := post([]byte(`{"update_id":24,"callback_query":{"from":{"id":7},"message":{"message_id":1,"chat":{"id":42}},"data":"yes"}}`)); code != 400 {
		t.Fatalf("no id: %d", code)
	}
	if code := post(telegramtest.CallbackUpdate(telegramtest.Callback{UpdateID: 25, ID: "unknown", From: 7, Chat: 42, MessageID: 1, Data: "yes"}, nil)); code != 200 {
		t.Fatalf("answer refused: %d", code)
	}
	if len(a.msgs) != 3 || api.Calls("answerCallbackQuery") != 6 {
		t.Fatalf("admitted %d, answer calls %d", len(a.msgs), api.Calls("answerCallbackQuery"))
	}
}

func TestPollDeliversCallbackQueries(t *testing.T) {
	p, api, a := setup(t, true)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: "42", Text: "Pick", List: &abi.List{Button: "Menu",
		Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "r1", Title: "Row one"}, {ID: "r2", Title: "Row two"}}}}}}); err != nil {
		t.Fatal(err)
	}
	api.Lock()
	api.Updates = append(api.Updates,
		json.RawMessage(`{"update_id":100,"message":{"message_id":9,"from":{"id":7},"chat":{"id":42},"text":"hi"}}`))
	api.Unlock()
	press := api.Press(telegramtest.Callback{UpdateID: 101, ID: "poll-q", From: 7, Chat: 42, MessageID: 1, Data: "r2"})
	api.Lock()
	api.Updates = append(api.Updates, press)
	api.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	fakekit.WaitFor(t, "getUpdates with offset 102", func() bool {
		offsets := api.Offsets()
		return len(offsets) >= 2 && offsets[len(offsets)-1] == 102
	})
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.msgs) != 2 || a.msgs[0].Text != "hi" {
		t.Fatalf("admitted %+v", a.msgs)
	}
	if m := a.msgs[1]; m.ID != "cb:poll-q" || m.Chat != "42" || m.From != "7" ||
		!reflect.DeepEqual(m.Interaction, &abi.Interaction{ID: "r2", Title: "Row two", Message: "1"}) {
		t.Fatalf("press %+v %+v", m, m.Interaction)
	}
	if got := api.AnsweredQueries(); !reflect.DeepEqual(got, []string{"poll-q"}) {
		t.Fatalf("answered %v", got)
	}
}
