package metawhatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/metawhatsapp/metawhatsapptest"
)

// fakeAPI serves a fake for user and counts the requests it gets.
func fakeAPI(t *testing.T) (*metawhatsapptest.API, *Provider, *atomic.Int32) {
	t.Helper()
	api := metawhatsapptest.New(token, phoneID, user)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return api, newProvider(t, srv.URL+"/"+metawhatsapptest.Version, nil), &calls
}

func replyButtons(n int) []abi.Button {
	var out []abi.Button
	for i := range n {
		out = append(out, abi.Button{ID: "b" + string(rune('0'+i)), Title: "Option " + string(rune('A'+i))})
	}
	return out
}

func listOf(sections, rowsEach int) *abi.List {
	l := &abi.List{Button: "Pick one"}
	for i := range sections {
		s := abi.ListSection{Title: "Section " + string(rune('A'+i))}
		for j := range rowsEach {
			id := string(rune('a'+i)) + string(rune('0'+j))
			s.Rows = append(s.Rows, abi.ListRow{ID: "row-" + id, Title: "Row " + id, Description: "about " + id})
		}
		l.Sections = append(l.Sections, s)
	}
	return l
}

func TestSendReplyButtons(t *testing.T) {
	api, p, _ := fakeAPI(t)
	ref, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "Pizza or pasta?", Buttons: []abi.Button{
		{ID: "pizza", Title: "Pizza"}, {ID: "pasta", Title: "Pasta"}, {ID: "ñ", Title: strings.Repeat("ñ", MaxButtonTitle)}}})
	if err != nil || ref != "wamid.OUT1" {
		t.Fatalf("send: %q, %v", ref, err)
	}
	got := api.Interactives(user)
	if len(got) != 1 {
		t.Fatalf("interactive sends: %+v", got)
	}
	in := got[0]
	if in.Type != "button" || in.Body == nil || in.Body.Text != "Pizza or pasta?" || in.Header != nil || len(in.Action.Buttons) != 3 {
		t.Fatalf("interactive: %+v", in)
	}
	for i, want := range []string{"pizza", "pasta", "ñ"} {
		b := in.Action.Buttons[i]
		if b.Type != "reply" || b.Reply.ID != want {
			t.Errorf("button %d: %+v", i, b)
		}
	}
	if in.Action.Buttons[0].Reply.Title != "Pizza" {
		t.Errorf("title: %+v", in.Action.Buttons[0])
	}
	api.Lock()
	raw := api.Sent[0]
	api.Unlock()
	if raw["type"] != "interactive" || raw["recipient_type"] != "individual" || raw["messaging_product"] != "whatsapp" || raw["to"] != user {
		t.Errorf("envelope: %v", raw)
	}
}

// TestSendButtonsWithImageHeader: media with buttons rides as the header,
// its caption in front of the text in the body.
func TestSendButtonsWithImageHeader(t *testing.T) {
	api, p, _ := fakeAPI(t)
	_, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "Like it?",
		Media:   &channel.Media{Type: "image", URL: "https://example.com/a.jpg", Caption: "A photo"},
		Buttons: replyButtons(2)})
	if err != nil {
		t.Fatal(err)
	}
	in := api.Interactives(user)[0]
	if in.Header == nil || in.Header.Type != "image" || in.Header.Image["link"] != "https://example.com/a.jpg" || in.Body.Text != "A photo\n\nLike it?" {
		t.Fatalf("interactive: %+v %+v", in.Header, in.Body)
	}
}

func TestSendList(t *testing.T) {
	api, p, _ := fakeAPI(t)
	l := listOf(2, 5)
	if _, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "Choose a slot", List: l}); err != nil {
		t.Fatal(err)
	}
	in := api.Interactives(user)[0]
	if in.Type != "list" || in.Body.Text != "Choose a slot" || in.Action.Button != "Pick one" || len(in.Action.Sections) != 2 {
		t.Fatalf("interactive: %+v", in)
	}
	s := in.Action.Sections[1]
	if s.Title != "Section B" || len(s.Rows) != 5 || s.Rows[4].ID != "row-b4" || s.Rows[4].Title != "Row b4" || s.Rows[4].Description != "about b4" {
		t.Fatalf("section: %+v", s)
	}
}

func TestSendURLButton(t *testing.T) {
	api, p, _ := fakeAPI(t)
	_, err := p.Send(context.Background(), channel.Outbound{Chat: user, Text: "Your receipt",
		Buttons: []abi.Button{{Title: "Open receipt", URL: "https://example.com/r/1"}}})
	if err != nil {
		t.Fatal(err)
	}
	in := api.Interactives(user)[0]
	if in.Type != "cta_url" || in.Body.Text != "Your receipt" || in.Action.Name != "cta_url" || in.Action.Parameters == nil ||
		in.Action.Parameters.DisplayText != "Open receipt" || in.Action.Parameters.URL != "https://example.com/r/1" {
		t.Fatalf("interactive: %+v", in)
	}
}

// TestSendRefusesWhatWhatsAppCannotShow: each is ErrUnsupportedContent,
// names the limit, and no request is made.
func TestSendRefusesWhatWhatsAppCannotShow(t *testing.T) {
	url := abi.Button{Title: "Open", URL: "https://example.com"}
	elevenRows := listOf(1, 10)
	elevenRows.Sections = append(elevenRows.Sections, abi.ListSection{Title: "More", Rows: []abi.ListRow{{ID: "x", Title: "X"}}})
	longDesc := listOf(1, 1)
	longDesc.Sections[0].Rows[0].Description = strings.Repeat("d", MaxRowDescription+1)
	twoUntitled := listOf(2, 1)
	twoUntitled.Sections[1].Title = ""
	for _, tt := range []struct {
		name string
		msg  channel.Outbound
		say  string
	}{
		{"4 buttons", channel.Outbound{Text: "x", Buttons: replyButtons(4)}, "4 reply buttons, WhatsApp shows at most 3"},
		{"21-character title", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "a", Title: strings.Repeat("t", 21)}}}, "21 characters, WhatsApp allows at most 20"},
		{"duplicate titles", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "a", Title: "Yes"}, {ID: "b", Title: "Yes"}}}, "unique"},
		{"no body", channel.Outbound{Buttons: replyButtons(1)}, "body text of a button message is empty"},
		{"blank body", channel.Outbound{Text: " \n", Buttons: replyButtons(1)}, "is empty"},
		{"1025-character body", channel.Outbound{Text: strings.Repeat("b", 1025), Buttons: replyButtons(1)}, "at most 1024"},
		{"11 rows", channel.Outbound{Text: "x", List: elevenRows}, "11 rows, WhatsApp allows at most 10"},
		{"11 sections", channel.Outbound{Text: "x", List: listOf(11, 1)}, "11 sections, WhatsApp allows at most 10"},
		{"25-character row title", channel.Outbound{Text: "x", List: &abi.List{Button: "b", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "r", Title: strings.Repeat("r", 25)}}}}}}, "at most 24"},
		{"73-character description", channel.Outbound{Text: "x", List: longDesc}, "at most 72"},
		{"21-character list button", channel.Outbound{Text: "x", List: &abi.List{Button: strings.Repeat("b", 21), Sections: listOf(1, 1).Sections}}, "at most 20"},
		{"untitled section among two", channel.Outbound{Text: "x", List: twoUntitled}, "title is empty"},
		{"list without body", channel.Outbound{List: listOf(1, 1)}, "body text of a list message is empty"},
		{"URL and reply buttons", channel.Outbound{Text: "x", Buttons: []abi.Button{url, {ID: "a", Title: "A"}}}, "URL button alone"},
		{"two URL buttons", channel.Outbound{Text: "x", Buttons: []abi.Button{url, {Title: "Other", URL: "https://example.org"}}}, "URL button alone"},
		{"URL button without body", channel.Outbound{Buttons: []abi.Button{url}}, "is empty"},
		{"list with media", channel.Outbound{Text: "x", List: listOf(1, 1), Media: &channel.Media{Type: "image", Ref: "1"}}, "cannot carry media"},
		{"audio with buttons", channel.Outbound{Text: "x", Buttons: replyButtons(1), Media: &channel.Media{Type: "audio", Ref: "1"}}, "cannot go with buttons"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, p, calls := fakeAPI(t)
			tt.msg.Chat = user
			_, err := p.Send(context.Background(), tt.msg)
			channeltest.Refused(t, err, tt.say, calls.Load())
		})
	}
}

// TestFakeRejectsInvalidInteractive: the fake refuses, as the Cloud API does,
// what the channel refuses before sending; and the channel maps the refusal
// onto ErrUnsupportedContent.
func TestFakeRejectsInvalidInteractive(t *testing.T) {
	api := metawhatsapptest.New(token, phoneID, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	buttons := func(titles ...string) map[string]any {
		var bs []any
		for i, title := range titles {
			bs = append(bs, map[string]any{"type": "reply", "reply": map[string]any{"id": "id" + string(rune('0'+i)), "title": title}})
		}
		return map[string]any{"type": "button", "body": map[string]any{"text": "hi"}, "action": map[string]any{"buttons": bs}}
	}
	rows := func(n int) map[string]any {
		var rs []any
		for i := range n {
			rs = append(rs, map[string]any{"id": "r" + string(rune('a'+i)), "title": "Row"})
		}
		return map[string]any{"type": "list", "body": map[string]any{"text": "hi"},
			"action": map[string]any{"button": "Open", "sections": []any{map[string]any{"title": "All", "rows": rs}}}}
	}
	noBody := buttons("A")
	delete(noBody, "body")
	for _, tt := range []struct {
		name        string
		interactive map[string]any
		code        int
	}{
		{"4 buttons", buttons("A", "B", "C", "D"), 131009},
		{"empty title", buttons(""), 131009},
		{"21-character title", buttons(strings.Repeat("t", 21)), 131009},
		{"11 rows", rows(11), 131009},
		{"no body", noBody, 131008},
		{"unknown type", map[string]any{"type": "carousel", "body": map[string]any{"text": "hi"}, "action": map[string]any{}}, 131009},
		{"list with image header", func() map[string]any {
			m := rows(1)
			m["header"] = map[string]any{"type": "image", "image": map[string]any{"id": "1"}}
			return m
		}(), 131009},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"messaging_product": "whatsapp", "recipient_type": "individual", "to": user,
				"type": "interactive", "interactive": tt.interactive})
			req, _ := http.NewRequest("POST", srv.URL+"/"+metawhatsapptest.Version+"/"+phoneID+"/messages", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var g struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			json.NewDecoder(resp.Body).Decode(&g)
			if resp.StatusCode != 400 || g.Error.Code != tt.code || g.Error.Type != "OAuthException" || g.Error.Message == "" {
				t.Fatalf("HTTP %d %+v, want 400 code %d", resp.StatusCode, g.Error, tt.code)
			}
			if err := codes.MapError(400, nil, mustMarshal(g)); !errors.Is(err, channel.ErrUnsupportedContent) {
				t.Fatalf("the channel maps it to %v", err)
			}
		})
	}
	if n := len(api.Interactives(user)); n != 0 {
		t.Fatalf("%d rejected sends recorded", n)
	}
	// The valid ones pass.
	for _, in := range []map[string]any{buttons("A", "B", "C"), rows(10)} {
		body, _ := json.Marshal(map[string]any{"messaging_product": "whatsapp", "to": user, "type": "interactive", "interactive": in})
		req, _ := http.NewRequest("POST", srv.URL+"/"+metawhatsapptest.Version+"/"+phoneID+"/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("valid %v: %v %v", in["type"], resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestInteractionsAdmitted: a button_reply, a list_reply and a template
// quick-reply press are each admitted once, with the pressed id, its title
// and the id of the message the button was on; statuses beside them are not.
func TestInteractionsAdmitted(t *testing.T) {
	_, sender, _ := fakeAPI(t)
	ref, err := sender.Send(context.Background(), channel.Outbound{Chat: user, Text: "Pizza or pasta?", Buttons: replyButtons(2)})
	if err != nil {
		t.Fatal(err)
	}
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:1/v21.0", rec)
	mux := http.NewServeMux()
	p.Routes(mux)
	body := metawhatsapptest.Notification(phoneID, []map[string]any{
		metawhatsapptest.ButtonReply(user, "wamid.IN1", ref, "b0", "Option A"),
		metawhatsapptest.ListReply(user, "wamid.IN2", "wamid.OUT7", "row-a3", "Row a3", "about a3"),
		metawhatsapptest.QuickReply(user, "wamid.IN3", "wamid.OUT9", "STOP_PROMOS", "Stop promotions"),
	}, []map[string]any{metawhatsapptest.Status(ref, user, "read")})
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, signed(t, body))
	if w.Code != 200 {
		t.Fatalf("webhook: %d %s", w.Code, w.Body)
	}
	want := []channel.Message{
		{ID: "wamid.IN1", Chat: user, From: user, Interaction: &abi.Interaction{ID: "b0", Title: "Option A", Message: ref}},
		{ID: "wamid.IN2", Chat: user, From: user, Interaction: &abi.Interaction{ID: "row-a3", Title: "Row a3", Message: "wamid.OUT7"}},
		{ID: "wamid.IN3", Chat: user, From: user, Interaction: &abi.Interaction{ID: "STOP_PROMOS", Title: "Stop promotions", Message: "wamid.OUT9"}},
	}
	got := rec.Take()
	if len(got) != len(want) {
		t.Fatalf("admitted %d messages: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.Chat != w.Chat || g.From != w.From || g.Text != w.Text || g.Interaction == nil || *g.Interaction != *w.Interaction {
			t.Errorf("admitted %d: %+v %+v, want %+v %+v", i, g, g.Interaction, w, w.Interaction)
		}
		if g.ReceivedAt.IsZero() {
			t.Errorf("admitted %d: no receive time", i)
		}
	}
	// A press without context still arrives, without Message; a reply type
	// botrun does not know is ignored.
	body = metawhatsapptest.Notification(phoneID, []map[string]any{
		metawhatsapptest.ButtonReply(user, "wamid.IN4", "", "b1", "Option B"),
		{"from": user, "id": "wamid.IN5", "timestamp": "1", "type": "interactive", "interactive": map[string]any{"type": "nfm_reply", "nfm_reply": map[string]any{"response_json": "{}"}}},
	}, nil)
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, signed(t, body))
	if got := rec.Take(); w.Code != 200 || len(got) != 1 || *got[0].Interaction != (abi.Interaction{ID: "b1", Title: "Option B"}) {
		t.Fatalf("webhook %d, admitted %+v", w.Code, got)
	}
}
