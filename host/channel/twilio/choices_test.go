package twilio

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/twilio/twiliotest"
)

// TestChoicesAsNumberedText: buttons and list rows go out as numbered lines,
// URL buttons as "Title: url"; a reply that is one of the numbers arrives as
// the press of that choice, across a restart of the channel (the choices are
// in the store); any other reply is a message.
func TestChoicesAsNumberedText(t *testing.T) {
	api := twiliotest.New(sid, authToken, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	kv := memory.NewKv()
	open := func(rec *channeltest.Recorder) *Provider {
		p, err := Open(Config{ID: "tw", AccountSID: sid, AuthToken: authToken, From: "+15550001111", PublicURL: publicURL, APIURL: srv.URL},
			channel.Env{Admitter: rec, Kv: kv, KeyPrefix: "bot/"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := open(&channeltest.Recorder{})
	ctx := context.Background()
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "Pick one", Buttons: []abi.Button{{ID: "yes", Title: "Yes"}, {ID: "no", Title: "No"}, {Title: "Docs", URL: "https://example.com/docs"}}}); err != nil {
		t.Fatal(err)
	}
	want := "Pick one\n1. Yes\n2. No\nDocs: https://example.com/docs\n(reply with a number)"
	if got := api.Texts(user); len(got) != 1 || got[0] != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
	rec := &channeltest.Recorder{}
	p = open(rec) // a new process: the choices come from the store
	mux := http.NewServeMux()
	p.Routes(mux)
	for i, body := range []string{"2", " 1 ", "3", "yes"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, signed(t, []byte(api.Inbound("SMr"+string(rune('a'+i)), user, body).Encode())))
		if w.Code != http.StatusOK {
			t.Fatalf("reply %q: HTTP %d %s", body, w.Code, w.Body)
		}
	}
	var got []string
	for _, m := range rec.Take() {
		s := "text:" + m.Text
		if m.Interaction != nil {
			s = "press:" + m.Interaction.ID + "/" + m.Interaction.Title
		}
		got = append(got, s)
	}
	if strings.Join(got, " ") != "press:no/No press:yes/Yes text:3 text:yes" {
		t.Fatalf("admitted %q", got)
	}
	// A list numbers its rows across sections; too long a text is refused.
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "Menu", List: &abi.List{Button: "Open", Sections: []abi.ListSection{
		{Title: "Drinks", Rows: []abi.ListRow{{ID: "tea", Title: "Tea", Description: "green"}}}, {Rows: []abi.ListRow{{ID: "cake", Title: "Cake"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if got := api.Texts(user); got[len(got)-1] != "Menu\nDrinks:\n1. Tea (green)\n2. Cake\n(reply with a number)" {
		t.Fatalf("list sent as %q", got[len(got)-1])
	}
	// A later send without choices forgets them: "1" is a message again.
	if _, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "How many tickets?"}); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, signed(t, []byte(api.Inbound("SMz", user, "1").Encode())))
	if msgs := rec.Take(); len(msgs) != 1 || msgs[0].Interaction != nil {
		t.Fatalf("a number after a send without choices: %+v", msgs)
	}
	_, err := p.Send(ctx, channel.Outbound{Chat: user, Text: strings.Repeat("x", TextLimit-5), Buttons: []abi.Button{{ID: "a", Title: "A"}}})
	if !errors.Is(err, channel.ErrUnsupportedContent) {
		t.Fatalf("a text too long with its choices: %v, want ErrUnsupportedContent", err)
	}
}
