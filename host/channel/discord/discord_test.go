package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/discordtest"
	"github.com/botrun/botrun/host/channel/discord/internal/wire"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// TestCheck: the keys each mode needs, and the values refused with their
// key.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		keys []string
	}{
		{"empty", Config{}, []string{"token", "application_id"}},
		{"gateway", Config{Token: "t", ApplicationID: appID}, nil},
		{"interactions without a key", Config{Token: "t", ApplicationID: appID, Mode: "interactions"}, []string{"public_key"}},
		{"interactions", Config{Token: "t", ApplicationID: appID, Mode: "interactions", PublicKey: publicHex()}, nil},
		{"bad values", Config{Token: "t", ApplicationID: "my-app", Mode: "socket", PublicKey: "abc", GatewayURL: "ws://gateway.example.com", APIURL: "http://discord.example.com"},
			[]string{"application_id", "mode", "public_key", "gateway_url", "api_url"}},
		{"gateway_url", Config{Token: "t", ApplicationID: appID, GatewayURL: "wss://gateway.discord.gg"}, nil},
		{"loopback gateway", Config{Token: "t", ApplicationID: appID, GatewayURL: "ws://127.0.0.1:9999"}, nil},
	} {
		var keys []string
		c.cfg.Check(channel.Setting{ID: "dc"}, func(key, format string, args ...any) { keys = append(keys, key) })
		if !slices.Equal(keys, c.keys) {
			t.Errorf("%s: problems with %v, want %v", c.name, keys, c.keys)
		}
	}
}

// TestInteractionsWebhook: PING is answered PONG; a command (its options'
// values, or its name) is journaled and deferred (5); a button or a select
// press is journaled as an interaction and deferred (6).
func TestInteractionsWebhook(t *testing.T) {
	p, api, a, _ := setup(t, nil)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "Pick", Buttons: []abi.Button{{ID: "yes", Title: "Yes"}, {ID: "no", Title: "No"}}})
	if err != nil {
		t.Fatal(err)
	}
	menu, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "Menu", List: &abi.List{Button: "Choose", Sections: []abi.ListSection{
		{Title: "Pizza", Rows: []abi.ListRow{{ID: "margherita", Title: "Margherita", Description: "tomato"}}},
		{Title: "Drinks", Rows: []abi.ListRow{{ID: "water", Title: "Water"}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	sub := []byte(`{"id":"1200000000000000005","application_id":"` + appID + `","type":2,"token":"tok5","channel_id":"` + chat + `",` +
		`"user":{"id":"` + user + `"},"data":{"name":"config","options":[{"name":"set","type":1,"options":[{"name":"n","type":4,"value":5},{"name":"who","type":6,"value":"123"},{"name":"on","type":5,"value":true}]}]}}`)
	for _, c := range []struct {
		name, answer string
		body         []byte
		want         *channel.Message
	}{
		{"ping", `{"type":1}`, []byte(`{"id":"1200000000000000001","application_id":"` + appID + `","type":1,"token":"t","version":1}`), nil},
		{"command", `{"type":5}`, api.Command(discordtest.Command{ID: "1200000000000000002", Channel: chat, User: user, Name: "ask", Text: "hola"}),
			&channel.Message{ID: "1200000000000000002", Chat: chat, From: user, Text: "hola"}},
		{"no options", `{"type":5}`, api.Command(discordtest.Command{ID: "1200000000000000003", Channel: chat, User: user, Name: "help"}),
			&channel.Message{ID: "1200000000000000003", Chat: chat, From: user, Text: "/help"}},
		{"subcommand", `{"type":5}`, sub, &channel.Message{ID: "1200000000000000005", Chat: chat, From: user, Text: "5 123 true"}},
		{"button", `{"type":6}`, api.Press(discordtest.Press{ID: "1200000000000000006", Channel: chat, User: user, Message: ref, CustomID: "no"}),
			&channel.Message{ID: "1200000000000000006", Chat: chat, From: user, Interaction: &abi.Interaction{ID: "no", Title: "No", Message: ref}}},
		{"select", `{"type":6}`, api.Press(discordtest.Press{ID: "1200000000000000007", Channel: chat, User: user, Message: menu, CustomID: wire.ListCustomID, Values: []string{"water"}}),
			&channel.Message{ID: "1200000000000000007", Chat: chat, From: user, Interaction: &abi.Interaction{ID: "water", Title: "Water", Message: menu}}},
	} {
		before := len(a.admitted())
		rec := serve(p, c.body)
		if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != c.answer || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: HTTP %d %q, want %s", c.name, rec.Code, rec.Body, c.answer)
			continue
		}
		got := a.admitted()[before:]
		switch {
		case c.want == nil && len(got) != 0:
			t.Errorf("%s admitted %+v", c.name, got)
		case c.want != nil && (len(got) != 1 || got[0].ID != c.want.ID || got[0].Chat != c.want.Chat || got[0].From != c.want.From || got[0].Text != c.want.Text):
			t.Errorf("%s admitted %+v, want %+v", c.name, got, *c.want)
		case c.want != nil && c.want.Interaction != nil && (got[0].Interaction == nil || *got[0].Interaction != *c.want.Interaction):
			t.Errorf("%s: interaction %+v, want %+v", c.name, got[0].Interaction, c.want.Interaction)
		}
	}
	if rec := serve(p, []byte(`{"id":"1200000000000000008","type":5,"token":"t","channel_id":"`+chat+`","data":{}}`)); rec.Code != 400 {
		t.Errorf("a modal submit (never asked for): HTTP %d", rec.Code)
	}
	if rec := serve(p, []byte(`{"id":"1200000000000000009","type":2,"channel_id":"`+chat+`","data":{"name":"x"}}`)); rec.Code != 400 {
		t.Errorf("a command without a token: HTTP %d", rec.Code)
	}
}

// TestRepliesFollowUp: a reply to an interaction (its key derived from the
// event) goes as the follow-up, also from a provider opened anew on the same
// Kv (a restart); other sends, and a reply whose token expired, go as
// channel messages; expired tokens are purged from the Kv.
func TestRepliesFollowUp(t *testing.T) {
	kv := memory.NewKv()
	p, api, _, srv := setup(t, kv)
	ctx := context.Background()
	iid := api.ID("reply") // created now: its token lives
	if rec := serve(p, api.Command(discordtest.Command{ID: iid, Channel: chat, User: user, Name: "ask", Text: "hola"})); rec.Code != 200 {
		t.Fatalf("HTTP %d", rec.Code)
	}
	again, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, PublicKey: publicHex(), Mode: ModeInteractions, APIURL: srv.URL},
		channel.Env{Admitter: newAdmitter(), Kv: kv, KeyPrefix: "bot/"})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		p        *Provider
		chat     string
		key      string
		followUp bool
	}{
		{p, chat, "dc:" + iid + ":1", true},
		{again, chat, "dc:" + iid + ":2#2", true},
		{again, chat, "scheduled:1", false},
		{again, chat, "other:" + iid + ":1", false},
		{again, closed, "dc:" + iid + ":3", false}, // another channel: not this interaction's
	} {
		if c.chat == closed {
			api.Lock()
			api.ClosedDMs[closed] = false
			api.Unlock()
		}
		ref, err := c.p.Send(ctx, channel.Outbound{Chat: c.chat, Text: fmt.Sprint("reply ", i), Key: c.key})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		m := api.Message(ref)
		if c.followUp != (m.Interaction == iid) || c.followUp != (m.Nonce == "") {
			t.Errorf("send %d (%s): sent as %+v; follow-up %v", i, c.key, m, c.followUp)
		}
	}
	api.Expire(iid)
	ref, err := again.Send(ctx, channel.Outbound{Chat: chat, Text: "late", Key: "dc:" + iid + ":4"})
	if m := api.Message(ref); err != nil || m.Interaction != "" || m.Nonce != nonce("dc:"+iid+":4") {
		t.Fatalf("a reply after the token expired: %+v, %v; want a channel message", m, err)
	}
	again.ix.purge(ctx, time.Now().Add(tokenLife+time.Minute))
	if v, ver, _ := kv.Get(ctx, "bot/discord/dc/ix/"+iid); ver != 0 {
		t.Fatalf("an expired token is still in the Kv: %s", v)
	}
	if _, ok := again.ix.get(ctx, iid, time.Now()); ok {
		t.Fatal("an expired token is still in memory")
	}
}

// TestTokensNeverInErrors: a transport error on a follow-up (whose URL
// holds the interaction token) names neither token.
func TestTokensNeverInErrors(t *testing.T) {
	p, api, _, srv := setup(t, nil)
	iid := api.ID("error")
	body := api.Command(discordtest.Command{ID: iid, Channel: chat, User: user, Name: "ask", Text: "x"})
	var ix struct {
		Token string `json:"token"`
	}
	json.Unmarshal(body, &ix)
	serve(p, body)
	srv.Close()
	if _, _, ok := p.interactionOf(context.Background(), channel.Outbound{Chat: chat, Key: "dc:" + iid + ":1"}); !ok {
		t.Fatal("the reply is not a follow-up")
	}
	_, err := p.Send(context.Background(), channel.Outbound{Chat: chat, Text: "x", Key: "dc:" + iid + ":1"})
	if err == nil || strings.Contains(err.Error(), ix.Token) || strings.Contains(err.Error(), token) {
		t.Fatalf("error %v", err)
	}
}

// TestNonceDedupes: one key sent twice is one message (enforce_nonce).
func TestNonceDedupes(t *testing.T) {
	p, api, _, _ := setup(t, nil)
	ctx := context.Background()
	r1, err1 := p.Send(ctx, channel.Outbound{Chat: chat, Text: "once", Key: "k:1"})
	r2, err2 := p.Send(ctx, channel.Outbound{Chat: chat, Text: "once", Key: "k:1"})
	r3, err3 := p.Send(ctx, channel.Outbound{Chat: chat, Text: "once", Key: "k:2"})
	if err := errors.Join(err1, err2, err3); err != nil || r1 != r2 || r1 == r3 {
		t.Fatalf("refs %s %s %s, %v", r1, r2, r3, err)
	}
	if got := api.Texts(chat); len(got) != 2 {
		t.Fatalf("the fake has %q", got)
	}
	if n := len(nonce("a very long key:with:parts#3")); n > 25 {
		t.Fatalf("nonce of %d characters", n)
	}
}

// TestComponents: buttons in rows of five (link buttons style 5), a list as
// one string select; what Discord refuses is refused before any request.
func TestComponents(t *testing.T) {
	p, api, _, _ := setup(t, nil)
	ctx := context.Background()
	var buttons []abi.Button
	for i := range 7 {
		buttons = append(buttons, abi.Button{ID: fmt.Sprint("b", i), Title: fmt.Sprint("B", i)})
	}
	buttons = append(buttons, abi.Button{Title: "Docs", URL: "https://example.com/docs"})
	ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "Pick", Buttons: buttons})
	if err != nil {
		t.Fatal(err)
	}
	rows := api.Message(ref).Components
	if len(rows) != 2 || len(rows[0].Components) != 5 || len(rows[1].Components) != 3 ||
		!reflect.DeepEqual(rows[1].Components[2], discordtest.Component{Type: 2, Style: 5, Label: "Docs", URL: "https://example.com/docs"}) ||
		!reflect.DeepEqual(rows[0].Components[0], discordtest.Component{Type: 2, Style: 1, Label: "B0", CustomID: "b0"}) {
		t.Fatalf("components %+v", rows)
	}
	ref, err = p.Send(ctx, channel.Outbound{Chat: chat, Text: "Menu", List: &abi.List{Button: "Choose", Sections: []abi.ListSection{
		{Title: "A", Rows: []abi.ListRow{{ID: "a1", Title: "One", Description: "first"}}}, {Title: "B", Rows: []abi.ListRow{{ID: "b1", Title: "Two"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	sel := api.Message(ref).Components[0].Components[0]
	if sel.Type != 3 || sel.Placeholder != "Choose" || sel.CustomID != wire.ListCustomID ||
		!slices.Equal(sel.Options, []discordtest.SelectOption{{Label: "One", Value: "a1", Description: "first"}, {Label: "Two", Value: "b1"}}) {
		t.Fatalf("select %+v", sel)
	}
	many := func(n int) []abi.ListRow {
		var rows []abi.ListRow
		for i := range n {
			rows = append(rows, abi.ListRow{ID: fmt.Sprint("r", i), Title: "R"})
		}
		return rows
	}
	before := api.Calls("messages")
	for _, c := range []struct {
		name string
		msg  channel.Outbound
	}{
		{"26 buttons", channel.Outbound{Buttons: slices.Repeat([]abi.Button{{ID: "x", Title: "X"}}, 26)}},
		{"duplicate id", channel.Outbound{Buttons: []abi.Button{{ID: "x", Title: "X"}, {ID: "x", Title: "Y"}}}},
		{"id over 100", channel.Outbound{Buttons: []abi.Button{{ID: strings.Repeat("i", 101), Title: "X"}}}},
		{"label over 80", channel.Outbound{Buttons: []abi.Button{{ID: "x", Title: strings.Repeat("é", 81)}}}},
		{"no label", channel.Outbound{Buttons: []abi.Button{{ID: "x"}}}},
		{"26 rows", channel.Outbound{List: &abi.List{Button: "B", Sections: []abi.ListSection{{Rows: many(26)}}}}},
		{"row title over 100", channel.Outbound{List: &abi.List{Button: "B", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "r", Title: strings.Repeat("t", 101)}}}}}}},
		{"media without a URL", channel.Outbound{Media: &channel.Media{Type: "image", Ref: "file-id"}}},
		{"a sticker", channel.Outbound{Media: &channel.Media{Type: "sticker", URL: "https://example.com/s.webp"}}},
	} {
		c.msg.Chat, c.msg.Text = chat, "t"
		if _, err := p.Send(ctx, c.msg); !errors.Is(err, channel.ErrUnsupportedContent) {
			t.Errorf("%s: %v, want ErrUnsupportedContent", c.name, err)
		}
	}
	if n := api.Calls("messages"); n != before {
		t.Fatalf("%d requests made for refused sends", n-before)
	}
	if _, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "t", Buttons: slices.Repeat([]abi.Button{{Title: "L", URL: "https://example.com"}}, 25)}); err != nil {
		t.Fatalf("25 link buttons: %v", err)
	}
}

// TestSendMedia: an image is an embed of its URL under the caption; a
// document is its URL on a line after the text.
func TestSendMedia(t *testing.T) {
	p, api, _, _ := setup(t, nil)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "look", Media: &channel.Media{Type: "image", URL: "https://cdn.discordapp.com/a/b/cat.png"}})
	if err != nil {
		t.Fatal(err)
	}
	m := api.Message(ref)
	if m.Content != "look" || len(m.Embeds) != 1 || m.Embeds[0]["image"].(map[string]any)["url"] != "https://cdn.discordapp.com/a/b/cat.png" {
		t.Fatalf("image sent as %+v", m)
	}
	ref, err = p.Send(ctx, channel.Outbound{Chat: chat, Text: "the report", Media: &channel.Media{Type: "document", URL: "https://example.com/r.pdf", Caption: "Q3"}})
	if m := api.Message(ref); err != nil || m.Content != "Q3\n\nthe report\nhttps://example.com/r.pdf" {
		t.Fatalf("document sent as %+v, %v", m, err)
	}
	// A part that fills the limit keeps its text; the caption and the link
	// go into the embed (the fake refuses content over 2,000 characters).
	full := strings.Repeat("é", TextLimit)
	ref, err = p.Send(ctx, channel.Outbound{Chat: chat, Text: full, Media: &channel.Media{Type: "video", URL: "https://example.com/v/clip.mp4?x=1", Caption: "Q3"}})
	if err != nil {
		t.Fatal(err)
	}
	if m := api.Message(ref); m.Content != full || len(m.Embeds) != 1 || m.Embeds[0]["description"] != "Q3" ||
		m.Embeds[0]["url"] != "https://example.com/v/clip.mp4?x=1" || m.Embeds[0]["title"] != "clip.mp4" {
		t.Fatalf("a full part with media sent as %+v", m.Embeds)
	}
}

// TestEditAndTyping: a channel message and a follow-up are edited where
// they were sent; an unknown message is the API's error; typing shows.
func TestEditAndTyping(t *testing.T) {
	p, api, _, _ := setup(t, nil)
	ctx := context.Background()
	ref, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, chat, ref, "final"); err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, chat, ref, "final"); err != nil {
		t.Fatalf("the same edit again: %v", err)
	}
	if m := api.Message(ref); m.Content != "final" || m.Edits != 2 {
		t.Fatalf("edited message %+v", m)
	}
	iid := api.ID("edit")
	serve(p, api.Command(discordtest.Command{ID: iid, Channel: chat, User: user, Name: "ask", Text: "x"}))
	fu, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "thinking", Key: "dc:" + iid + ":1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edit(ctx, chat, fu, "done"); err != nil {
		t.Fatal(err)
	}
	if m := api.Message(fu); m.Content != "done" || m.Interaction == "" {
		t.Fatalf("follow-up after the edit: %+v", m)
	}
	if err := p.Edit(ctx, chat, "1999999999999999999", "x"); !httpkit.Permanent(err) {
		t.Fatalf("an edit of an unknown message: %v", err)
	}
	if err := p.Edit(ctx, chat, "not-a-ref", "x"); !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Fatalf("an edit of a non-Discord ref: %v", err)
	}
	if err := p.Typing(ctx, chat, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Typing(ctx, "700000000000000099", ""); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Fatalf("typing in an unknown channel: %v", err)
	}
	api.Lock()
	defer api.Unlock()
	if !slices.Equal(api.Typing, []string{chat}) {
		t.Fatalf("typing shown in %v", api.Typing)
	}
}

// TestRateLimitBuckets: a spent bucket makes the next request on its route
// wait for the reset when it is near, and fail with its wait, unmade, when
// it is far; a global 429 holds every route.
func TestRateLimitBuckets(t *testing.T) {
	p, api, _, _ := setup(t, nil)
	ctx := context.Background()
	// A clock of the test's own: a wait moves it, nothing else does, so a
	// slow machine does not spend a bucket's reset between two sends.
	var slept []time.Duration
	clock := time.Now()
	p.limits.Now = func() time.Time { return clock }
	p.limits.Sleep = func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		clock = clock.Add(d)
		return nil
	}
	api.Lock()
	api.Spent, api.ResetAfter = true, 0.25
	api.Unlock()
	for range 2 {
		if _, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(slept) != 1 || slept[0] <= 0 || slept[0] > 250*time.Millisecond {
		t.Fatalf("waits %v; want one of at most 250ms before the second send", slept)
	}
	api.Lock()
	api.ResetAfter = 30
	api.Unlock()
	p.Send(ctx, channel.Outbound{Chat: chat, Text: "x"})
	before := api.Calls("messages")
	_, err := p.Send(ctx, channel.Outbound{Chat: chat, Text: "x"})
	if w := httpkit.RetryAfter(err); w <= 25*time.Second || w > 30*time.Second || api.Calls("messages") != before {
		t.Fatalf("a send on a bucket spent for 30 s: %v (retry after %s), %d requests", err, w, api.Calls("messages")-before)
	}
	api.Lock()
	api.Limited, api.RetryAfter, api.Global = 1, 2, true
	api.Unlock()
	if _, err := p.Send(ctx, channel.Outbound{Chat: noPerm, Text: "x"}); httpkit.RetryAfter(err) != 2*time.Second {
		t.Fatalf("global 429: %v", err)
	}
	slept = nil
	p.Send(ctx, channel.Outbound{Chat: limited, Text: "x"})
	if len(slept) != 1 || slept[0] <= time.Second || slept[0] > 2*time.Second {
		t.Fatalf("after a global 429, another route waited %v", slept)
	}
}

// TestAttachmentRefs: only Discord's CDN (or the api_url's origin) over
// https is a media reference; an expired URL is unavailable without a
// request; a tampered one is refused by the CDN.
func TestAttachmentRefs(t *testing.T) {
	p, api, _, srv := setup(t, nil)
	ctx := context.Background()
	for ref, ok := range map[string]bool{
		"https://cdn.discordapp.com/attachments/1/2/a.png?ex=1&is=2&hm=3": true,
		"https://media.discordapp.net/attachments/1/2/a.png":              true,
		"http://cdn.discordapp.com/attachments/1/2/a.png":                 false,
		"https://cdn.discordapp.com.evil.example/a.png":                   false,
		"https://evil.example/attachments/1/2/a.png":                      false,
		"https://user@cdn.discordapp.com/a.png":                           false,
		"file-id":                                                         false,
	} {
		if _, got := p.SerializeMediaRef(channel.Media{Ref: ref}); got != ok {
			t.Errorf("SerializeMediaRef(%s) = %v, want %v", ref, got, ok)
		}
	}
	old := api.Attachment(srv.URL, chat, "old.jpg", "image/jpeg", photo, -time.Hour)
	before := api.Calls("cdn")
	if _, err := p.LoadMedia(ctx, channel.Media{Ref: old.URL}, 1<<20); !httpkit.MediaGone(err) || api.Calls("cdn") != before {
		t.Fatalf("an expired attachment: %v (%d requests)", err, api.Calls("cdn")-before)
	}
	fresh := api.Attachment(srv.URL, chat, "new.jpg", "image/jpeg", photo, time.Hour)
	tampered := strings.Replace(fresh.URL, "ex=", "ex=f", 1)
	if _, err := p.LoadMedia(ctx, channel.Media{Ref: tampered}, 1<<20); !httpkit.MediaGone(err) {
		t.Fatalf("a tampered attachment URL: %v", err)
	}
}

// TestMediaRefHosts: media_ref_hosts replaces Discord's CDN hosts (their
// subdomains allowed); an empty list accepts none but the api_url's origin.
func TestMediaRefHosts(t *testing.T) {
	for _, c := range []struct {
		hosts []string
		ok    map[string]bool
	}{
		{[]string{"files.example.com"}, map[string]bool{
			"https://files.example.com/a.png":                  true,
			"https://eu.files.example.com/a.png":               true,
			"https://cdn.discordapp.com/attachments/1/2/a.png": false,
			"http://files.example.com/a.png":                   false,
			"https://files.example.com.evil.example/a.png":     false,
		}},
		{[]string{}, map[string]bool{
			"https://cdn.discordapp.com/attachments/1/2/a.png": false,
			"https://127.0.0.1:1/attachments/1/2/a.png":        false,
		}},
	} {
		p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, MediaRefHosts: c.hosts, APIURL: "http://127.0.0.1:1"}, channel.Env{})
		if err != nil {
			t.Fatal(err)
		}
		for ref, ok := range c.ok {
			if _, got := p.SerializeMediaRef(channel.Media{Ref: ref}); got != ok {
				t.Errorf("media_ref_hosts %v: SerializeMediaRef(%s) = %v, want %v", c.hosts, ref, got, ok)
			}
		}
		if _, err := p.RehydrateMediaRef(httpkit.StoreURL("https://cdn.discordapp.com/attachments/1/2/a.png")); err == nil {
			t.Errorf("media_ref_hosts %v: a CDN ref rehydrated", c.hosts)
		}
	}
	var keys []string
	(&Config{Token: "t", ApplicationID: appID, MediaRefHosts: []string{"https://x"}}).Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if !slices.Equal(keys, []string{"media_ref_hosts[0]"}) {
		t.Fatalf("a URL in media_ref_hosts: problems with %v", keys)
	}
}

// TestSignatureWindow: a request signed over five minutes ago (or ahead)
// is refused, however good its signature.
func TestSignatureWindow(t *testing.T) {
	p, _, a, _ := setup(t, nil)
	mux := http.NewServeMux()
	p.Routes(mux)
	body := []byte(`{"id":"1200000000000000001","type":1,"token":"t"}`)
	for skew, want := range map[time.Duration]int{0: 200, -4 * time.Minute: 200, -6 * time.Minute: 401, 6 * time.Minute: 401} {
		ts := strconv.FormatInt(time.Now().Add(skew).Unix(), 10)
		r := httptest.NewRequest("POST", "/webhooks/dc", bytes.NewReader(body))
		r.Header.Set(TimestampHeader, ts)
		r.Header.Set(SignatureHeader, Sign(key, ts, body))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("signed %s from now: HTTP %d, want %d", skew, rec.Code, want)
		}
	}
	if n := len(a.admitted()); n != 0 {
		t.Fatalf("%d admitted", n)
	}
}

// TestWebhookOnlyWithAKey: gateway mode without public_key serves no
// webhook; with it, the webhook is there too.
func TestWebhookOnlyWithAKey(t *testing.T) {
	for key, want := range map[string]int{"": http.StatusNotFound, publicHex(): http.StatusOK} {
		p, err := Open(Config{ID: "dc", Token: token, ApplicationID: appID, PublicKey: key}, channel.Env{Admitter: newAdmitter()})
		if err != nil {
			t.Fatal(err)
		}
		if rec := serve(p, []byte(`{"id":"1200000000000000001","type":1,"token":"t"}`)); rec.Code != want {
			t.Errorf("public_key %q: HTTP %d, want %d", key, rec.Code, want)
		}
	}
}
