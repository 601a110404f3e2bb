package evolution

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
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
	"github.com/botrun/botrun/host/channel/evolution/evolutiontest"
	"github.com/botrun/botrun/host/channel/httpkit"
	"github.com/botrun/botrun/host/channel/internal/gateway/gatewaytest"
)

// TestAPIKeyWebhooks: without jwt_key, a webhook is taken only with the
// body's apikey equal to api_key (the instance's token).
func TestAPIKeyWebhooks(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec, "")
	api := evolutiontest.New(apiKey, instance)
	data := evolutiontest.Text("3EB0KEY", user, "hola")
	for _, c := range []struct {
		name string
		req  *http.Request
		want int
	}{
		{"no apikey (not exposed)", post(api.Event("messages.upsert", "", data), ""), 401},
		{"another apikey", post(api.Event("messages.upsert", "evo-instance-token-0002", data), ""), 403},
		{"a JWT is no apikey", post(api.Event("messages.upsert", "", data), jwtKey), 401},
		{"the instance's token", post(api.Upsert(data), ""), 200},
	} {
		if code := gatewaytest.Serve(p, c.req); code != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.name, code, c.want)
		}
	}
	if got := rec.Take(); len(got) != 1 || got[0].ID != "3EB0KEY" || got[0].Text != "hola" || got[0].Chat != userJID {
		t.Fatalf("admitted %+v", got)
	}
}

// TestRetriesReuseTheirToken: Evolution signs one JWT per event and sends it
// on each of its 10 attempts, the last about 29 minutes later; every one is
// taken, under the same message id, so the host admits it once.
func TestRetriesReuseTheirToken(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec, jwtKey)
	signed := time.Now()
	token := evolutiontest.JWT(jwtKey, signed)
	body := evolutiontest.New(apiKey, instance).Upsert(evolutiontest.Text("3EB0RETRY", user, "hola"))
	var at time.Duration
	for attempt := range 10 {
		p.now = func() time.Time { return signed.Add(at) }
		req := post(body, "")
		req.Header.Set(SignatureHeader, "Bearer "+token)
		if code := gatewaytest.Serve(p, req); code != 200 {
			t.Fatalf("attempt %d, %s after signing: HTTP %d", attempt+1, at, code)
		}
		at += min(5*time.Second<<attempt, 300*time.Second)*6/5 + 30*time.Second // the longest wait, jitter and timeout
	}
	got := rec.Take()
	for _, m := range got {
		if m.ID != "3EB0RETRY" {
			t.Fatalf("a retry admitted as %q", m.ID)
		}
	}
	if len(got) != 10 {
		t.Fatalf("%d of 10 attempts reached Admit", len(got))
	}
	p.now = func() time.Time { return signed.Add(600*time.Second + ExpiryLeeway + time.Second) }
	req := post(body, "")
	req.Header.Set(SignatureHeader, "Bearer "+token)
	if code := gatewaytest.Serve(p, req); code != 403 {
		t.Fatalf("a token past its leeway: HTTP %d, want 403", code)
	}
}

// token builds a JWT from its header and claims, signed with key.
func token(header, claims, key string) string {
	enc := base64.RawURLEncoding.EncodeToString
	s := enc([]byte(header)) + "." + enc([]byte(claims))
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(s))
	return s + "." + enc(mac.Sum(nil))
}

func TestVerifyJWT(t *testing.T) {
	now := time.Unix(1764412800, 0)
	hs := `{"alg":"HS256","typ":"JWT"}`
	good := token(hs, `{"iat":1764412800,"exp":1764413400,"app":"evolution","action":"webhook"}`, jwtKey)
	for _, c := range []struct {
		name, tok string
		ok        bool
	}{
		{"Evolution's", good, true},
		{"no exp", token(hs, `{"app":"evolution"}`, jwtKey), false},
		{"exp null", token(hs, `{"exp":null}`, jwtKey), false},
		{"exp 15 minutes ahead", token(hs, `{"exp":1764413700}`, jwtKey), true},
		{"exp over 15 minutes ahead", token(hs, `{"exp":1764413701}`, jwtKey), false},
		{"exp in a year", token(hs, `{"exp":1795948800}`, jwtKey), false},
		{"expired within the leeway", token(hs, `{"exp":1764412000}`, jwtKey), true},
		{"expired past the leeway", token(hs, `{"exp":1764411000}`, jwtKey), false},
		{"not yet valid", token(hs, `{"exp":1764413400,"nbf":1764413800}`, jwtKey), false},
		{"another key", token(hs, `{"exp":1764413400}`, "another-key-0123456789"), false},
		{"alg none", token(`{"alg":"none"}`, `{}`, jwtKey), false},
		{"alg none, unsigned", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{}`)) + ".", false},
		{"HS512", token(`{"alg":"HS512"}`, `{}`, jwtKey), false},
		{"crit", token(`{"alg":"HS256","crit":["exp"]}`, `{}`, jwtKey), false},
		{"exp a string", token(hs, `{"exp":"1764413400"}`, jwtKey), false},
		{"padded", good + "=", false},
		{"four parts", good + ".x", false},
		{"two parts", good[:strings.LastIndex(good, ".")], false},
		{"payload changed", strings.Replace(good, ".", ".e", 1), false},
		{"huge", strings.Repeat("a", 5000), false},
	} {
		err := VerifyJWT(c.tok, []byte(jwtKey), now)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrJWT)) {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
	if err := VerifyJWT(good, nil, now); err == nil {
		t.Error("an empty key verified a token")
	}
}

// TestInlineBase64NeverJournaled: the media's base64 a webhook may carry
// (webhook_base64) reaches neither the admitted message nor its stored
// reference: the reference is the message's key.id on the instance.
func TestInlineBase64NeverJournaled(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec, jwtKey)
	inline := []byte("inline bytes that must never be journaled, 0123456789")
	b64 := base64.StdEncoding.EncodeToString(inline)
	body := evolutiontest.New(apiKey, instance).Upsert(evolutiontest.Image("3EB0INLINE", user, "look", inline))
	if !strings.Contains(string(body), b64) {
		t.Fatal("the webhook carries no inline base64 to strip")
	}
	if code := gatewaytest.Serve(p, post(body, jwtKey)); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	got := rec.Take()
	if len(got) != 1 || len(got[0].Media) != 1 {
		t.Fatalf("admitted %+v", got)
	}
	m := got[0]
	if m.Text != "look" || m.Media[0] != (channel.Media{Type: "image", Ref: "3EB0INLINE", MIME: "image/jpeg", Caption: "look"}) {
		t.Fatalf("admitted %+v", m)
	}
	stored, ok := p.SerializeMediaRef(m.Media[0])
	js, _ := json.Marshal(struct {
		M channel.Message
		S channel.StoredRef
	}{m, stored})
	if !ok || strings.Contains(string(js), b64) || strings.Contains(string(js), "mediaKey") {
		t.Fatalf("journaled %s", js)
	}
	if string(stored.Data) != `{"owner":"botrun","id":"3EB0INLINE"}` {
		t.Fatalf("stored ref %s", stored.Data)
	}
}

// TestStoredRefOfAnotherInstance: a reference journaled for another instance
// (the entry's instance renamed) loads nothing.
func TestStoredRefOfAnotherInstance(t *testing.T) {
	p := newProvider(t, "http://127.0.0.1:9", nil, jwtKey)
	if _, err := p.RehydrateMediaRef(channel.StoredRef{V: 1, Data: json.RawMessage(`{"owner":"old","id":"3EB0X"}`)}); err == nil {
		t.Fatal("a reference of another instance was rehydrated")
	}
	for _, id := range []string{"", "../x", "a/b", "a b", strings.Repeat("a", 300)} {
		if _, ok := p.SerializeMediaRef(channel.Media{Ref: id}); ok {
			t.Errorf("%q serialized", id)
		}
		if _, err := p.LoadMedia(context.Background(), channel.Media{Ref: id}, 10); !httpkit.MediaGone(err) {
			t.Errorf("%q: %v, want the media unavailable", id, err)
		}
	}
}

// TestWebhookByEvents: with webhook_by_events, Evolution appends the event's
// name to the URL.
func TestWebhookByEvents(t *testing.T) {
	rec := &channeltest.Recorder{}
	p := newProvider(t, "http://127.0.0.1:9", rec, jwtKey)
	req := post(evolutiontest.New(apiKey, instance).Upsert(evolutiontest.Text("3EB0BYEV", user, "hola")), jwtKey)
	req.URL.Path = "/webhooks/evo/messages-upsert"
	if code := gatewaytest.Serve(p, req); code != 200 || len(rec.Take()) != 1 {
		t.Fatalf("HTTP %d", code)
	}
}

func TestInbound(t *testing.T) {
	group := "120363012345678901@g.us"
	for _, c := range []struct {
		name string
		data string
		want *channel.Message
	}{
		{"extended text", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A1"},"message":{"extendedTextMessage":{"text":"a link https://x.y"}},"messageTimestamp":"1764412800"}`,
			&channel.Message{ID: "A1", Chat: userJID, From: userJID, Text: "a link https://x.y", ReceivedAt: time.Unix(1764412800, 0)}},
		{"a group's member", `{"key":{"remoteJid":"` + group + `","participant":"5511777777777@s.whatsapp.net","id":"A2"},"message":{"conversation":"hi all"},"messageTimestamp":{"low":1764412800,"high":0,"unsigned":true}}`,
			&channel.Message{ID: "A2", Chat: group, From: "5511777777777@s.whatsapp.net", Text: "hi all", ReceivedAt: time.Unix(1764412800, 0)}},
		{"a document with its caption", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A3"},"message":{"documentWithCaptionMessage":{"message":{"documentMessage":{"mimetype":"application/pdf","caption":"the invoice","fileName":"inv.pdf"}}}}}`,
			&channel.Message{ID: "A3", Chat: userJID, From: userJID, Text: "the invoice", Media: []channel.Media{{Type: "document", Ref: "A3", MIME: "application/pdf", Caption: "the invoice"}}}},
		{"ephemeral, view once", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A4"},"message":{"ephemeralMessage":{"message":{"viewOnceMessageV2":{"message":{"imageMessage":{"mimetype":"image/jpeg"}}}}}}}`,
			&channel.Message{ID: "A4", Chat: userJID, From: userJID, Media: []channel.Media{{Type: "image", Ref: "A4", MIME: "image/jpeg"}}}},
		{"a voice note", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A5"},"message":{"audioMessage":{"mimetype":"audio/ogg; codecs=opus","ptt":true}}}`,
			&channel.Message{ID: "A5", Chat: userJID, From: userJID, Media: []channel.Media{{Type: "audio", Ref: "A5", MIME: "audio/ogg; codecs=opus"}}}},
		{"a sticker", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A6"},"message":{"stickerMessage":{"mimetype":"image/webp"}}}`,
			&channel.Message{ID: "A6", Chat: userJID, From: userJID, Media: []channel.Media{{Type: "sticker", Ref: "A6", MIME: "image/webp"}}}},
		{"a reaction", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A7"},"message":{"reactionMessage":{"text":"👍"}}}`, nil},
		{"a channel's post", `{"key":{"remoteJid":"120363000000000001@newsletter","id":"A8"},"message":{"conversation":"news"}}`, nil},
		{"no message", `{"key":{"remoteJid":"5511999999999@s.whatsapp.net","id":"A9"}}`, nil},
	} {
		msgs, err := Webhook{Event: "MESSAGES_UPSERT", Data: json.RawMessage(c.data)}.Messages()
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == nil && len(msgs) != 0:
			t.Errorf("%s: admitted %+v", c.name, msgs)
		case c.want != nil && (len(msgs) != 1 || !equal(msgs[0], *c.want)):
			t.Errorf("%s: %+v, want %+v", c.name, msgs, *c.want)
		}
	}
	if _, err := (Webhook{Event: "messages.upsert", Data: json.RawMessage(`{"key":{"id":"x"}}`)}).Messages(); !errors.Is(err, ErrBadWebhook) {
		t.Errorf("a message without remoteJid: %v", err)
	}
	if msgs, err := (Webhook{Event: "messages.upsert", Data: json.RawMessage(`[{"key":{"remoteJid":"1@s.whatsapp.net","id":"B1"},"message":{"conversation":"a"}},{"key":{"remoteJid":"1@s.whatsapp.net","id":"B2"},"message":{"conversation":"b"}}]`)}).Messages(); err != nil || len(msgs) != 2 {
		t.Errorf("a list of two: %+v, %v", msgs, err)
	}
}

func equal(a, b channel.Message) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestSendErrors: what the contract's failures do not cover.
func TestSendErrors(t *testing.T) {
	api := evolutiontest.New(apiKey, instance, user)
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx := context.Background()
	msg := channel.Outbound{Chat: user, Text: "x"}

	bad, _ := Open(Config{ID: "evo", APIURL: srv.URL, APIKey: "not-the-key", Instance: instance}, channel.Env{})
	if _, err := bad.Send(ctx, msg); !httpkit.Permanent(err) || strings.Contains(err.Error(), "not-the-key") {
		t.Errorf("a bad api_key: %v, want a permanent error without the key", err)
	}
	gone, _ := Open(Config{ID: "evo", APIURL: srv.URL, APIKey: apiKey, Instance: "deleted"}, channel.Env{})
	if _, err := gone.Send(ctx, msg); !httpkit.Permanent(err) {
		t.Errorf("an unknown instance: %v, want a permanent error", err)
	}
	p := newProvider(t, srv.URL, nil, "")
	api.Lock()
	api.Disconnected = true
	api.Unlock()
	if _, err := p.Send(ctx, msg); err == nil || httpkit.Permanent(err) {
		t.Errorf("a disconnected instance: %v, want a retryable error", err)
	}
	api.Lock()
	api.Disconnected = false
	api.Unlock()

	before := api.Requests.Load()
	_, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "pick", List: &abi.List{Button: "Menu", Sections: []abi.ListSection{{Rows: []abi.ListRow{{ID: "a", Title: "A"}}}}}})
	channeltest.Refused(t, err, "buttons and lists", api.Requests.Load()-before)

	ref, err := p.Send(ctx, channel.Outbound{Chat: user, Text: "the report", Media: &channel.Media{Type: "document", URL: "https://example.com/files/report.pdf?sig=1", Caption: "Q3"}})
	last := api.Last()
	if err != nil || ref != last.ID || last.Kind != "document" || last.FileName != "report.pdf" || last.Text != "Q3\n\nthe report" {
		t.Fatalf("a document: %q, %v; the fake got %+v", ref, err, last)
	}
	// An inbound media sent back (the echo bot): its bytes from Evolution,
	// sent again as base64.
	api.Lock()
	api.Media["3EB0IN"] = photo
	api.Unlock()
	if _, err := p.Send(ctx, channel.Outbound{Chat: userJID, Text: "echo", Media: &channel.Media{Type: "image", Ref: "3EB0IN"}}); err != nil {
		t.Fatal(err)
	}
	last = api.Last()
	if last.Media != base64.StdEncoding.EncodeToString(photo) || last.MIME != "image/jpeg" || last.Text != "echo" {
		t.Fatalf("an inbound media went as %+v", last)
	}
	if _, ok := any(p).(channel.Typist); ok {
		t.Error("Evolution's sendPresence blocks for the whole typing time: no Typist")
	}
	if _, ok := any(p).(channel.Editor); ok {
		t.Error("no Editor")
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		keys string
	}{
		{Config{APIURL: "https://evo.example.com", APIKey: "k", Instance: "i"}, ""},
		{Config{APIURL: "https://evo.example.com", APIKey: "k", Instance: "i", JWTKey: "short"}, "jwt_key"},
		{Config{APIURL: "http://evo.example.com", APIKey: "k", Instance: "i"}, "api_url"},
		{Config{APIURL: "http://127.0.0.1:8080", APIKey: "k", Instance: "i\n"}, "instance"},
		{Config{}, "api_url api_key instance"},
	} {
		var keys []string
		c.cfg.Check(channel.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
		if got := strings.Join(keys, " "); got != c.keys {
			t.Errorf("%+v: problems with %q, want %q", c.cfg, got, c.keys)
		}
	}
}

func FuzzDecodeWebhook(f *testing.F) {
	api := evolutiontest.New(apiKey, instance)
	f.Add(api.Upsert(evolutiontest.Text("3EB01", user, "hola")))
	f.Add(api.Upsert(evolutiontest.Image("3EB02", user, "look", []byte("x"))))
	f.Add(api.Event("messages.upsert", "", []any{evolutiontest.FromMe("3EB03", user, "own")}))
	f.Add([]byte(`{"event":"messages.upsert","data":{"key":{"remoteJid":"1@g.us","id":"x"},"message":{"ephemeralMessage":{"message":{"ephemeralMessage":{"message":{"ephemeralMessage":{"message":{"ephemeralMessage":{"message":{"conversation":"deep"}}}}}}}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		wh, err := DecodeWebhook(b)
		if err != nil {
			return
		}
		msgs, err := wh.Messages()
		if err != nil {
			return
		}
		for _, m := range msgs {
			if m.ID == "" || m.Chat == "" || (m.Text == "" && len(m.Media) == 0) || len(m.Media) > 1 {
				t.Fatalf("admissible message %+v", m)
			}
		}
	})
}

func FuzzDecodeJWT(f *testing.F) {
	now := time.Unix(1764412800, 0)
	f.Add(evolutiontest.JWT(jwtKey, now))
	f.Add(token(`{"alg":"none"}`, `{}`, jwtKey))
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, tok string) {
		if VerifyJWT(tok, []byte(jwtKey), now) != nil {
			return
		}
		// Accepted: it must be the key's own signature of its first two parts.
		head, _, _ := strings.Cut(tok, ".")
		i := strings.LastIndex(tok, ".")
		mac := hmac.New(sha256.New, []byte(jwtKey))
		mac.Write([]byte(tok[:i]))
		if tok[i+1:] != base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) || head == "" {
			t.Fatalf("accepted %q", tok)
		}
	})
}
