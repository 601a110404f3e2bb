package bot

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

var events = []string{
	`{"id":"web:m-1","provider":"web","chat":"c1","from":"u1","text":"hola","media":[],"attempt":1,"received_at":1764412800000}`,
	`{"id":"x","text":"quote \" slash \\ nl \n tab \t uni \u00e9 \ud83d\ude00 lone \ud800 ctl \u0001","media":[{"type":"image","ref":"r","mime":"image/png","caption":"c","extra":[1,{"a":null}]}],"attempt":3,"received_at":-5,"future":{"x":[true,false,null,1.5e3]}}`,
	` { "id" : "sp" , "media" : null } `,
	`{"text":"emoji 😀 and \u2028"}`,
	`{"id":"tg:9","text":"Yes","media":[],"attempt":1,"received_at":1,"kind":"interaction","interaction":{"id":"yes","title":"Yes","message":"m-7"}}`,
	`{"id":"x","kind":"interaction","interaction":{"id":"a\"b\\ \u003c\u0026\u003e é 😀","future":[1]}}`,
	`{"id":"x","kind":"reaction","interaction":null}`,
	`{"id":"x","kind":"","interaction":{}}`,
}

// The codec agrees with encoding/json on what the host sends.
func TestDecodeEventMatchesEncodingJSON(t *testing.T) {
	for _, in := range events {
		got, err := decodeEvent([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var want Event
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if len(want.Media) == 0 {
			want.Media = nil
		}
		if want.Kind == "" {
			want.Kind = KindMessage // no kind (an older host): a message
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", in, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `{"id":}`, `{"id":"x"`, `{"id":"x"}x`, `{"attempt":"1"}`, `{"text":"\q"}`, `{"text":"a` + "\x01" + `"}`, `[]`,
		`{"interaction":{"id":1}}`, `{"interaction":[]}`, `{"kind":1}`} {
		if _, err := decodeEvent([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestEncodeSendRequestRoundTrips(t *testing.T) {
	for _, r := range []sendRequest{
		{Chat: "c1", Text: "echo: hola"},
		{Chat: "c\"1", Text: "line\nbreak \\ \t \x01 é 😀 \xff", IdempotencyKey: "k:1"},
		{Chat: "c", Media: &Media{Type: "image", URL: "https://x/y.png", Caption: "hi"}},
		{Chat: "c", Text: "later", IdempotencyKey: "r-1", At: 1764412805000},
		{Chat: "c", Text: "refused by the host", At: -1},
		{Chat: "c", Text: "Pick one", Buttons: []Button{ReplyButton("yes", "Yes"), URLButton("Docs \"é\" 😀", "https://example.com/a?b=1&c=2"),
			{ID: "both", Title: "refused by the host", URL: "https://x"}, {Title: "no id: refused by the host"}, {ID: "k\x01\\"}}},
		{Chat: "c", Text: "menu", List: &List{Button: "Open \"it\"", Sections: []ListSection{
			{Title: "Drinks", Rows: []ListRow{{ID: "tea", Title: "Tea", Description: "hot\n"}, {ID: "coffee", Title: "Coffee"}}},
			{Rows: []ListRow{{ID: "water", Title: "Water"}}},
			{Title: "empty: refused by the host", Rows: []ListRow{}},
		}}},
		{Chat: "c", Text: "empty list: refused by the host", List: &List{Sections: []ListSection{}}},
	} {
		b := encodeSendRequest(r)
		var back sendRequest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := r
		want.Text = string([]rune(r.Text)) // invalid UTF-8 becomes U+FFFD, as encoding/json does
		if want.List != nil && len(want.List.Sections) == 0 {
			want.List.Sections = []ListSection{} // encoded as [] (sections are required), read back as such
		}
		if !reflect.DeepEqual(back, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", b, back, want)
		}
	}
}

func TestDecodeSendResult(t *testing.T) {
	r, err := decodeSendResult([]byte(`{"status":"sent","key":"web:1:1","ref":"7","error":"","new":1}`))
	if err != nil || r != (SendResult{Status: "sent", Key: "web:1:1", Ref: "7"}) {
		t.Fatalf("%+v %v", r, err)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range events {
		f.Add([]byte(e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEvent(b)
		if err != nil {
			return
		}
		for _, s := range []string{e.ID, e.Provider, e.Chat, e.From, e.Text} {
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 from %q", b)
			}
		}
		// What the SDK decodes, encoding/json reads the same way when the input
		// is canonical (lowercase keys, no duplicates): re-encode and compare.
		canon, _ := json.Marshal(e)
		again, err := decodeEvent(canon)
		if err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("re-decoding %s: %+v %v", canon, again, err)
		}
	})
}

func TestDecodeMediaUnavailable(t *testing.T) {
	e, err := decodeMediaUnavailable([]byte(`{"reason":"rehydrate-failed","message":"HTTP 404 \"gone\"","extra":[1]}`))
	if err != nil || e.Reason != "rehydrate-failed" || e.Message != `HTTP 404 "gone"` {
		t.Fatalf("%+v, %v", e, err)
	}
	if _, err := decodeMediaUnavailable([]byte(`{"reason":`)); err == nil {
		t.Fatal("a truncated result decoded")
	}
}

// A broadcast carries no choices: the SDK passes them on, for the host to
// refuse (the request then has "buttons"/"list", unknown to BroadcastRequest).
func TestEncodeBroadcastPassesChoicesOn(t *testing.T) {
	r := sendRequest{Text: "hi"}
	WithButtons(ReplyButton("y", "Y"))(&r)
	got := string(encodeBroadcastRequest([]string{"a"}, r, "p"))
	want := `{"chats":["a"],"text":"hi","key_prefix":"p","buttons":[{"id":"y","title":"Y"}]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(encodeBroadcastRequest([]string{"a"}, sendRequest{Text: "hi"}, "p")); got != `{"chats":["a"],"text":"hi","key_prefix":"p"}` {
		t.Fatalf("without choices: %s", got)
	}
}

func TestEncodeChoicesExactly(t *testing.T) {
	r := sendRequest{Chat: "c", Text: "t"}
	WithList(List{Button: "B", Sections: []ListSection{{Title: "S", Rows: []ListRow{{ID: "1", Title: "One", Description: "d"}}}}})(&r)
	want := `{"chat":"c","text":"t","list":{"button":"B","sections":[{"title":"S","rows":[{"id":"1","title":"One","description":"d"}]}]}}`
	if got := string(encodeSendRequest(r)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The later WithButtons replaces the earlier.
	r = sendRequest{Chat: "c", Text: "t"}
	WithButtons(ReplyButton("a", "A"))(&r)
	WithButtons(URLButton("U", "https://u"))(&r)
	want = `{"chat":"c","text":"t","buttons":[{"title":"U","url":"https://u"}]}`
	if got := string(encodeSendRequest(r)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
