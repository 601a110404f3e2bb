package messaging_test

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
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/graph/messaging"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/messenger/messengertest"
)

const (
	token     = "EAAB-page-token-test"
	appSecret = "fb-app-secret-123"
	page      = "104050205060708"
	user      = "6543210987654321"
)

// spec is a Messenger channel's spec with api as api_url.
func spec(api string) messaging.Spec {
	return messaging.Spec{Type: "messenger", ID: "fb", Object: "page", Owner: page,
		AppSecret: appSecret, VerifyToken: "verify-me", Token: token,
		APIURL: api, SendPath: "/me/messages", DefaultMediaHosts: []string{"fbcdn.net", "fbsbx.com"}}
}

func open(t testing.TB, s messaging.Spec, admit channel.Admitter) *messaging.Channel {
	t.Helper()
	c, err := messaging.New(s, channel.Env{Admitter: admit})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeAPI serves a Messenger fake for user, counting the requests, and
// returns a channel sending to it. fail, when set, answers a request
// instead of the fake (n counts from 1).
func fakeAPI(t *testing.T, fail func(n int32, w http.ResponseWriter) bool) (*messagingtest.API, *messaging.Channel, *atomic.Int32) {
	t.Helper()
	api := messengertest.New(token, user)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if fail != nil && fail(n, w) {
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return api, open(t, spec(srv.URL+"/"+messengertest.Version), nil), &calls
}

func replyButtons(n int) []abi.Button {
	var out []abi.Button
	for i := range n {
		out = append(out, abi.Button{ID: "b" + string(rune('0'+i)), Title: "Option " + string(rune('A'+i))})
	}
	return out
}

func TestSendButtonTemplate(t *testing.T) {
	api, c, _ := fakeAPI(t, nil)
	buttons := []abi.Button{{ID: "pizza", Title: "Pizza"}, {ID: "pasta", Title: strings.Repeat("ñ", messaging.MaxTitle)}, {Title: "Menu", URL: "https://example.com/menu"}}
	if got, _ := c.TextLimits(channel.Outbound{Buttons: buttons}); got != messaging.MaxTemplateText {
		t.Fatalf("TextLimits of 3 buttons: %d", got)
	}
	ref, err := c.Send(context.Background(), channel.Outbound{Chat: user, Text: "Pizza or pasta?", Buttons: buttons})
	if err != nil || ref != "m_OUT1" {
		t.Fatalf("send: %q, %v", ref, err)
	}
	msgs := api.Messages(user)
	if len(msgs) != 1 || msgs[0].Attachment == nil || msgs[0].Attachment.Type != "template" {
		t.Fatalf("sent %+v", msgs)
	}
	p := msgs[0].Attachment.Payload
	want := []messagingtest.Button{{Type: "postback", Title: "Pizza", Payload: "pizza"}, {Type: "postback", Title: buttons[1].Title, Payload: "pasta"},
		{Type: "web_url", Title: "Menu", URL: "https://example.com/menu"}}
	if p.TemplateType != "button" || p.Text != "Pizza or pasta?" || len(p.Buttons) != 3 {
		t.Fatalf("template %+v", p)
	}
	for i, b := range want {
		if p.Buttons[i] != b {
			t.Errorf("button %d: %+v, want %+v", i, p.Buttons[i], b)
		}
	}
	api.Lock()
	defer api.Unlock()
	if len(api.Sent) != 1 || api.Sent[0].To != user {
		t.Fatalf("sent %+v", api.Sent)
	}
}

// plainLimit is c's limit on a text without choices, in characters.
func plainLimit(c *messaging.Channel) int {
	chars, _ := c.TextLimits(channel.Outbound{})
	return chars
}

func TestSendQuickReplies(t *testing.T) {
	api, c, _ := fakeAPI(t, nil)
	if got, _ := c.TextLimits(channel.Outbound{Buttons: replyButtons(4)}); got != plainLimit(c) {
		t.Fatalf("TextLimits of quick replies: %d, want none smaller than the text's", got)
	}
	if _, err := c.Send(context.Background(), channel.Outbound{Chat: user, Text: "Pick", Buttons: replyButtons(5)}); err != nil {
		t.Fatal(err)
	}
	list := &abi.List{Button: "Slots", Sections: []abi.ListSection{
		{Title: "Morning", Rows: []abi.ListRow{{ID: "9", Title: "9:00", Description: "early"}, {ID: "10", Title: "10:00"}}},
		{Title: "Evening", Rows: []abi.ListRow{{ID: "18", Title: "18:00"}}}}}
	if _, err := c.Send(context.Background(), channel.Outbound{Chat: user, Text: "When?", List: list}); err != nil {
		t.Fatal(err)
	}
	msgs := api.Messages(user)
	if len(msgs) != 2 || msgs[0].Text != "Pick" || len(msgs[0].QuickReplies) != 5 || msgs[1].Text != "When?" || len(msgs[1].QuickReplies) != 3 {
		t.Fatalf("sent %+v", msgs)
	}
	if q := msgs[0].QuickReplies[4]; q != (messagingtest.QuickReply{ContentType: "text", Title: "Option E", Payload: "b4"}) {
		t.Errorf("quick reply %+v", q)
	}
	if q := msgs[1].QuickReplies[2]; q != (messagingtest.QuickReply{ContentType: "text", Title: "18:00", Payload: "18"}) {
		t.Errorf("list row as quick reply %+v", q)
	}
}

// TestSendMedia: media and a text are two messages, the attachment then the
// text (caption in front) with the choices; media with choices and no text
// carries them itself.
func TestSendMedia(t *testing.T) {
	api, c, _ := fakeAPI(t, nil)
	ref, err := c.Send(context.Background(), channel.Outbound{Chat: user, Text: "Like it?",
		Media: &channel.Media{Type: "image", URL: "https://example.com/a.jpg", Caption: "A photo"}, Buttons: replyButtons(4)})
	if err != nil || ref != "m_OUT2" {
		t.Fatalf("send: %q, %v", ref, err)
	}
	if _, err := c.Send(context.Background(), channel.Outbound{Chat: user,
		Media: &channel.Media{Type: "document", Ref: "1857777774821032"}, Buttons: replyButtons(2)}); err != nil {
		t.Fatal(err)
	}
	msgs := api.Messages(user)
	if len(msgs) != 3 {
		t.Fatalf("sent %+v", msgs)
	}
	if a := msgs[0].Attachment; a == nil || a.Type != "image" || a.Payload.URL != "https://example.com/a.jpg" || !a.Payload.IsReusable || len(msgs[0].QuickReplies) != 0 {
		t.Fatalf("attachment %+v", msgs[0])
	}
	if msgs[1].Text != "A photo\n\nLike it?" || len(msgs[1].QuickReplies) != 4 {
		t.Fatalf("text %+v", msgs[1])
	}
	if a := msgs[2].Attachment; a == nil || a.Type != "file" || a.Payload.AttachmentID != "1857777774821032" || len(msgs[2].QuickReplies) != 2 {
		t.Fatalf("document with quick replies %+v", msgs[2])
	}
}

// TestSendCaptionOfAFullPart: a part whose text fills the channel's limit
// (the host splits at it) keeps its media's caption as a message of its own
// instead of going over the limit (the fake refuses over 2,000 characters).
func TestSendCaptionOfAFullPart(t *testing.T) {
	api := messengertest.New(token, user)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	s := spec(srv.URL + "/" + messengertest.Version)
	s.TextChars = 2000
	c := open(t, s, nil)
	full := strings.Repeat("é", 2000)
	if _, err := c.Send(context.Background(), channel.Outbound{Chat: user, Text: full,
		Media: &channel.Media{Type: "image", URL: "https://example.com/a.jpg", Caption: "A photo"}}); err != nil {
		t.Fatal(err)
	}
	msgs := api.Messages(user)
	if len(msgs) != 3 || msgs[0].Attachment == nil || msgs[1].Text != "A photo" || msgs[2].Text != full {
		t.Fatalf("sent %+v", msgs)
	}
}

// TestSendResumesAfterPartialFailure: when the text after an attachment
// fails, a retry of the same key sends only the text; without a key both go
// again.
func TestSendResumesAfterPartialFailure(t *testing.T) {
	api, c, _ := fakeAPI(t, func(n int32, w http.ResponseWriter) bool {
		if n == 2 || n == 5 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	msg := channel.Outbound{Chat: user, Text: "caption", Key: "k1", Media: &channel.Media{Type: "image", URL: "https://example.com/a.jpg"}}
	if _, err := c.Send(context.Background(), msg); err == nil || httpkit.Permanent(err) {
		t.Fatalf("the failed text: %v, want a retryable error", err)
	}
	ref, err := c.Send(context.Background(), msg)
	if err != nil || ref != "m_OUT2" {
		t.Fatalf("the retry: %q, %v", ref, err)
	}
	if msgs := api.Messages(user); len(msgs) != 2 || msgs[0].Attachment == nil || msgs[1].Text != "caption" {
		t.Fatalf("sent %+v, want the attachment once, then the text", msgs)
	}
	msg.Key = ""
	c.Send(context.Background(), msg) // request 4 goes, 5 fails
	if _, err := c.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if n := len(api.Messages(user)); n != 5 {
		t.Fatalf("%d messages sent; without a key a retry sends the whole send again", n)
	}
}

// TestSendRefusesWhatThePlatformCannotShow: each is ErrUnsupportedContent,
// names the limit, and no request is made.
func TestSendRefusesWhatThePlatformCannotShow(t *testing.T) {
	url := abi.Button{Title: "Open", URL: "https://example.com"}
	rows := func(n int) *abi.List {
		l := &abi.List{Button: "Open", Sections: []abi.ListSection{{}}}
		for i := range n {
			l.Sections[0].Rows = append(l.Sections[0].Rows, abi.ListRow{ID: "r" + string(rune('a'+i)), Title: "Row"})
		}
		return l
	}
	for _, tt := range []struct {
		name string
		msg  channel.Outbound
		say  string
	}{
		{"14 reply buttons", channel.Outbound{Text: "x", Buttons: replyButtons(14)}, "14 choices, the Platform shows at most 13"},
		{"14 rows", channel.Outbound{Text: "x", List: rows(14)}, "at most 13 quick replies"},
		{"4 buttons with a URL", channel.Outbound{Text: "x", Buttons: append(replyButtons(3), url)}, "quick replies cannot open a URL"},
		{"21-character title", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "a", Title: strings.Repeat("t", 21)}}}, "21 characters, the Platform allows at most 20"},
		{"21-character quick reply", channel.Outbound{Text: "x", Buttons: append(replyButtons(4), abi.Button{ID: "z", Title: strings.Repeat("t", 21)})}, "at most 20"},
		{"blank title", channel.Outbound{Text: "x", Buttons: []abi.Button{{ID: "a", Title: " "}}}, "title is empty"},
		{"641-character template", channel.Outbound{Text: strings.Repeat("b", 641), Buttons: replyButtons(1)}, "at most 640"},
		{"URL button without text", channel.Outbound{Buttons: []abi.Button{url}}, "text is empty"},
		{"quick replies without text", channel.Outbound{Buttons: replyButtons(5)}, "need a text or an attachment"},
		{"buttons and a list", channel.Outbound{Text: "x", Buttons: replyButtons(1), List: rows(1)}, "cannot go on one message"},
		{"a list without rows", channel.Outbound{Text: "x", List: &abi.List{Button: "b"}}, "no rows"},
		{"a sticker", channel.Outbound{Media: &channel.Media{Type: "sticker", Ref: "1"}}, `type "sticker"`},
		{"media without a source", channel.Outbound{Media: &channel.Media{Type: "image", Ref: "not-a-url"}}, "needs a URL or an attachment id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, c, calls := fakeAPI(t, nil)
			tt.msg.Chat = user
			_, err := c.Send(context.Background(), tt.msg)
			channeltest.Refused(t, err, tt.say, calls.Load())
		})
	}
}

// TestFakeRejects: the fake refuses, as the Send API does, what the channel
// refuses before sending, and the channel maps each refusal onto the
// taxonomy.
func TestFakeRejects(t *testing.T) {
	api := messengertest.New(token, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	template := func(text string, n int, title string) map[string]any {
		var bs []any
		for range n {
			bs = append(bs, map[string]any{"type": "postback", "title": title, "payload": "p"})
		}
		return map[string]any{"attachment": map[string]any{"type": "template", "payload": map[string]any{"template_type": "button", "text": text, "buttons": bs}}}
	}
	quick := func(n int, title string) map[string]any {
		var qs []any
		for range n {
			qs = append(qs, map[string]any{"content_type": "text", "title": title, "payload": "p"})
		}
		return map[string]any{"text": "pick", "quick_replies": qs}
	}
	for _, tt := range []struct {
		name      string
		req       map[string]any
		tok       string
		code      int
		is        error
		permanent bool
	}{
		{"4 template buttons", map[string]any{"message": template("hi", 4, "A")}, token, 100, channel.ErrUnsupportedContent, true},
		{"empty template button title", map[string]any{"message": template("hi", 1, "")}, token, 100, channel.ErrUnsupportedContent, true},
		{"641-character template", map[string]any{"message": template(strings.Repeat("x", 641), 1, "A")}, token, 100, channel.ErrUnsupportedContent, true},
		{"14 quick replies", map[string]any{"message": quick(14, "A")}, token, 100, channel.ErrUnsupportedContent, true},
		{"empty quick reply title", map[string]any{"message": quick(1, "")}, token, 100, channel.ErrUnsupportedContent, true},
		{"empty message", map[string]any{"message": map[string]any{}}, token, 100, channel.ErrUnsupportedContent, true},
		{"text and attachment", map[string]any{"message": map[string]any{"text": "a", "attachment": map[string]any{"type": "image", "payload": map[string]any{"url": "https://x.example/a"}}}}, token, 100, channel.ErrUnsupportedContent, true},
		{"attachment without url", map[string]any{"message": map[string]any{"attachment": map[string]any{"type": "image", "payload": map[string]any{}}}}, token, 100, channel.ErrUnsupportedContent, true},
		{"2001 characters", map[string]any{"message": map[string]any{"text": strings.Repeat("ñ", 2001)}}, token, 100, channel.ErrPayloadTooLarge, true},
		{"no messaging_type", map[string]any{"messaging_type": nil, "message": map[string]any{"text": "a"}}, token, 100, channel.ErrUnsupportedContent, true},
		{"unknown recipient", map[string]any{"recipient": map[string]any{"id": "999"}, "message": map[string]any{"text": "a"}}, token, 100, channel.ErrRecipientUnreachable, true},
		{"bad token", map[string]any{"message": map[string]any{"text": "a"}}, "stolen", 190, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := map[string]any{"recipient": map[string]any{"id": user}, "messaging_type": "RESPONSE"}
			for k, v := range tt.req {
				if v == nil {
					delete(req, k)
				} else {
					req[k] = v
				}
			}
			body, _ := json.Marshal(req)
			hr, _ := http.NewRequest("POST", srv.URL+"/"+messengertest.Version+"/me/messages", bytes.NewReader(body))
			hr.Header.Set("Authorization", "Bearer "+tt.tok)
			hr.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			g, ok := graph.Decode(b.Bytes())
			if resp.StatusCode/100 != 4 || !ok || g.Code != tt.code || g.Type != "OAuthException" || g.Message == "" {
				t.Fatalf("HTTP %d %s, want 4xx with code %d", resp.StatusCode, b.Bytes(), tt.code)
			}
			mapped := messaging.Codes.MapError(resp.StatusCode, resp.Header, b.Bytes())
			if (tt.is != nil && !errors.Is(mapped, tt.is)) || httpkit.Permanent(mapped) != tt.permanent {
				t.Fatalf("the channel maps it to %v", mapped)
			}
		})
	}
	if n := len(api.Messages(user)); n != 0 {
		t.Fatalf("%d rejected sends recorded", n)
	}
}

// TestCodes: the Send API's codes onto the taxonomy.
func TestCodes(t *testing.T) {
	body := func(code, sub int) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "m", "type": "OAuthException", "code": code, "error_subcode": sub}})
		return b
	}
	for _, tt := range []struct {
		code, sub int
		is        error
		permanent bool
		wait      bool
	}{
		{551, 1545041, channel.ErrRecipientUnreachable, true, false},
		{100, 2018001, channel.ErrRecipientUnreachable, true, false},
		{10, 2018278, channel.ErrOutsideSessionWindow, true, false},
		{10, 2018065, nil, true, false}, // another permission
		{613, 0, nil, false, true},
		{4, 0, nil, false, true},
		{190, 460, nil, true, false},
		{200, 1545041, nil, true, false},
		{230, 0, nil, true, false},
		{368, 1390008, nil, true, false},
		{100, 0, channel.ErrUnsupportedContent, true, false},
		{2, 0, nil, false, false},    // a temporary issue: retried
		{1200, 0, nil, false, false}, // a temporary send failure: retried
	} {
		err := messaging.Codes.MapError(400, http.Header{}, body(tt.code, tt.sub))
		if (tt.is != nil && !errors.Is(err, tt.is)) || httpkit.Permanent(err) != tt.permanent || (httpkit.RetryAfter(err) > 0) != tt.wait {
			t.Errorf("%d/%d: %v (permanent %v, retry after %s)", tt.code, tt.sub, err, httpkit.Permanent(err), httpkit.RetryAfter(err))
		}
	}
}

// TestTyping: mark_seen then typing_on; the token goes in the header.
func TestTyping(t *testing.T) {
	api, c, _ := fakeAPI(t, nil)
	if err := c.Typing(context.Background(), user, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Typing(context.Background(), "999", ""); !errors.Is(err, channel.ErrRecipientUnreachable) {
		t.Fatalf("typing to an unknown user: %v", err)
	}
	api.Lock()
	defer api.Unlock()
	if strings.Join(api.Actions, ",") != user+" mark_seen,"+user+" typing_on" {
		t.Fatalf("actions %q", api.Actions)
	}
}
