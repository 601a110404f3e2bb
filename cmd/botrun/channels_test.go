package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel/evolution"
	"github.com/botrun/botrun/host/channel/evolution/evolutiontest"
	"github.com/botrun/botrun/host/channel/gohighlevel"
	"github.com/botrun/botrun/host/channel/gohighlevel/gohighleveltest"
	"github.com/botrun/botrun/host/channel/graph"
	"github.com/botrun/botrun/host/channel/graph/messaging/messagingtest"
	"github.com/botrun/botrun/host/channel/gupshup/gupshuptest"
	"github.com/botrun/botrun/host/channel/instagram/instagramtest"
	"github.com/botrun/botrun/host/channel/messenger/messengertest"
	"github.com/botrun/botrun/host/channel/metawhatsapp"
	"github.com/botrun/botrun/host/channel/metawhatsapp/metawhatsapptest"
	"github.com/botrun/botrun/host/channel/telegram/telegramtest"
	"github.com/botrun/botrun/host/channel/tiktok/tiktoktest"
	"github.com/botrun/botrun/host/channel/twilio"
	"github.com/botrun/botrun/host/channel/twilio/twiliotest"
	"github.com/botrun/botrun/host/channel/wppconnect"
	"github.com/botrun/botrun/host/channel/wppconnect/wppconnecttest"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// channelCase is one real channel driven end to end against its fake.
type channelCase struct {
	name string
	// provider is the entry's id; chat a chat the fake accepts sends to.
	provider, chat string
	fake           http.Handler
	// toml is the [[providers]] entry for a fake served at api.
	toml func(api string) string
	// text and image build signed webhook bodies and their requests to
	// base (botrun's address).
	text  func(base, msgID, text string) *http.Request
	image func(base, api, msgID string) *http.Request
	// signatureHeader is forged to check the refusal, or forge forges a
	// request when the channel's secret is not in a header.
	signatureHeader string
	forge           func(r *http.Request)
	// download reports whether a fake request downloads media bytes.
	download func(r *http.Request) bool
	// replies are the texts and captions the fake accepted, in order.
	replies func() []string
	// check, when set, checks the channel's own guarantees once the
	// end-to-end run is over.
	check func(t *testing.T)
}

// gate holds media downloads while closed, so botrun can be killed while
// the guest waits for the bytes.
type gate struct {
	next     http.Handler
	download func(*http.Request) bool
	mu       sync.Mutex
	held     bool
	reached  chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	held := g.held && g.download(r)
	g.mu.Unlock()
	if held {
		select {
		case g.reached <- struct{}{}:
		default:
		}
		// The process dies with the request open. The body is read first:
		// the server notices a closed connection only once it has (a POST
		// download, Evolution's).
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *gate) hold(on bool) {
	g.mu.Lock()
	g.held = on
	g.mu.Unlock()
}

var photo = append([]byte("\xff\xd8\xff\xe0"), bytes.Repeat([]byte("jpeg"), 1000)...)

func telegramCase() channelCase {
	const token = "123456:E2E-token"
	api := telegramtest.New(token, 42)
	api.Files["AgAC-e2e"] = photo
	n := 0
	post := func(base, inner string) *http.Request {
		n++
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"from":{"id":7},"chat":{"id":42,"type":"private"},"date":1764412800,%s}}`, n, n, inner)
		r, _ := http.NewRequest("POST", base+"/webhooks/tg", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Telegram-Bot-Api-Secret-Token", "e2e_secret")
		return r
	}
	var texts []string
	return channelCase{
		name: "telegram", provider: "tg", chat: "42",
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"tg\"\ntype = \"telegram\"\ntoken = %q\nsecret_token = \"e2e_secret\"\napi_url = %q\n", token, url)
		},
		text: func(base, _, text string) *http.Request {
			// The same update redelivered keeps its message_id.
			if i := slices.Index(texts, text); i >= 0 {
				n = i
			} else {
				texts = append(texts, text)
				n = len(texts) - 1
			}
			return post(base, fmt.Sprintf(`"text":%q`, text))
		},
		image: func(base, _, _ string) *http.Request {
			n = 100
			return post(base, `"photo":[{"file_id":"AgAC-e2e","file_unique_id":"u","width":800,"height":600}]`)
		},
		signatureHeader: "X-Telegram-Bot-Api-Secret-Token",
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/file/") },
		replies: func() []string {
			api.Lock()
			defer api.Unlock()
			var out []string
			for _, s := range api.Sent {
				if t, ok := s["text"].(string); ok {
					out = append(out, t)
				} else if c, ok := s["caption"].(string); ok {
					out = append(out, c)
				}
			}
			return out
		},
	}
}

func metaCase() channelCase {
	const token, secret, phone, user = "EAAG-e2e", "e2e-app-secret", "1098765", "15551234567"
	api := metawhatsapptest.New(token, phone, user)
	api.Media["4490709327384033"] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/wa", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(metawhatsapp.SignatureHeader, metawhatsapp.Sign(secret, body))
		return r
	}
	return channelCase{
		name: "meta-whatsapp", provider: "wa", chat: user,
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"wa\"\ntype = \"meta-whatsapp\"\ntoken = %q\napp_secret = %q\nverify_token = \"v\"\nphone_number_id = %q\napi_url = %q\n",
				token, secret, phone, url+"/"+metawhatsapptest.Version)
		},
		text: func(base, msgID, text string) *http.Request {
			return post(base, metawhatsapptest.Notification(phone, []map[string]any{metawhatsapptest.TextMessage(user, "wamid."+msgID, text)}, nil))
		},
		image: func(base, _, msgID string) *http.Request {
			return post(base, metawhatsapptest.Notification(phone, []map[string]any{metawhatsapptest.ImageMessage(user, "wamid."+msgID, "4490709327384033", "")}, nil))
		},
		signatureHeader: metawhatsapp.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/download/") },
		replies: func() []string {
			api.Lock()
			defer api.Unlock()
			var out []string
			for _, s := range api.Sent {
				if t, ok := s["text"].(map[string]any); ok {
					out = append(out, t["body"].(string))
				} else if img, ok := s["image"].(map[string]any); ok {
					out = append(out, img["caption"].(string))
				}
			}
			return out
		},
	}
}

func twilioCase() channelCase {
	const sid, token, user = "AC0123456789abcdef0123456789abcdef", "e2e-auth-token", "+15551234567"
	const public = "https://bot.example.com/webhooks/sms"
	api := twiliotest.New(sid, token, user)
	api.Media["ME0001"] = photo
	post := func(base string, params url.Values) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/sms", strings.NewReader(params.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set(twilio.SignatureHeader, twilio.Sign(token, public, params))
		return r
	}
	return channelCase{
		name: "twilio", provider: "sms", chat: user,
		fake: api,
		toml: func(apiURL string) string {
			return fmt.Sprintf("id = \"sms\"\ntype = \"twilio\"\naccount_sid = %q\nauth_token = %q\nfrom = \"+15550001111\"\npublic_url = %q\napi_url = %q\n",
				sid, token, public, apiURL)
		},
		text: func(base, msgID, text string) *http.Request {
			return post(base, api.Inbound("SM"+msgID, user, text))
		},
		image: func(base, apiURL, msgID string) *http.Request {
			return post(base, api.Inbound("SM"+msgID, user, "", api.MediaURL(apiURL, "ME0001")))
		},
		signatureHeader: twilio.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/Media/") },
		replies: func() []string {
			api.Lock()
			defer api.Unlock()
			var out []string
			for _, s := range api.Sent {
				out = append(out, s.Get("Body"))
			}
			return out
		},
	}
}

func evolutionCase() channelCase {
	const key, jwtKey, instance, user = "e2e-instance-token", "e2e-evolution-jwt-key", "e2e", "5511999999999"
	api := evolutiontest.New(key, instance, user)
	api.Media["e2e-img"] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/evo", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(evolution.SignatureHeader, "Bearer "+evolutiontest.JWT(jwtKey, time.Now()))
		return r
	}
	return channelCase{
		name: "evolution", provider: "evo", chat: user + "@s.whatsapp.net",
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"evo\"\ntype = \"evolution\"\napi_url = %q\napi_key = %q\ninstance = %q\njwt_key = %q\n", url, key, instance, jwtKey)
		},
		text: func(base, msgID, text string) *http.Request {
			return post(base, api.Upsert(evolutiontest.Text(msgID, user, text)))
		},
		image: func(base, _, msgID string) *http.Request {
			// The inline base64 of webhook_base64 is ignored: the bytes
			// are asked of getBase64FromMediaMessage after the restart.
			return post(base, api.Upsert(evolutiontest.Image("e2e-img", user, "", photo)))
		},
		signatureHeader: evolution.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/chat/getBase64FromMediaMessage/") },
		replies:         func() []string { return api.Texts(user) },
	}
}

func wppconnectCase() channelCase {
	const token, hook, session, user = "e2e-session-token", "e2e-wpp-webhook-token", "e2e", "5511999999999"
	api := wppconnecttest.New(session, token, user)
	api.Media[wppconnecttest.MessageID(user, "e2e-img")] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/wpp?"+wppconnect.TokenParameter+"="+hook, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	return channelCase{
		name: "wppconnect", provider: "wpp", chat: user + "@c.us",
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"wpp\"\ntype = \"wppconnect\"\napi_url = %q\ntoken = %q\nsession = %q\nwebhook_token = %q\n", url, token, session, hook)
		},
		text: func(base, msgID, text string) *http.Request {
			return post(base, api.Event("onmessage", wppconnecttest.Text(msgID, user, text)))
		},
		image: func(base, _, msgID string) *http.Request {
			return post(base, api.Event("onmessage", wppconnecttest.Image("e2e-img", user, "", []byte("a thumbnail"))))
		},
		forge: func(r *http.Request) {
			r.URL.RawQuery = wppconnect.TokenParameter + "=" + hook + "0"
		},
		download: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/get-media-by-message/") },
		replies:  func() []string { return api.Texts(user) },
	}
}

// platformCase is a Messenger Platform channel (Messenger, Instagram), its
// webhooks of object for the page or account owner signed with secret, and
// its fake api with user; toml is its entry.
func platformCase(name, id, object, owner, secret, user string, api *messagingtest.API, toml func(api string) string) channelCase {
	api.Media["e2e.jpg"] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/"+id, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(graph.SignatureHeader, graph.Sign(secret, body))
		return r
	}
	return channelCase{
		name: name, provider: id, chat: user,
		fake: api,
		toml: toml,
		text: func(base, msgID, text string) *http.Request {
			return post(base, messagingtest.Body(object, owner, messagingtest.Text(user, owner, "m_"+msgID, text)))
		},
		image: func(base, apiURL, msgID string) *http.Request {
			return post(base, messagingtest.Body(object, owner, messagingtest.Media(user, owner, "m_"+msgID, "image", messagingtest.MediaURL(apiURL, "e2e.jpg"))))
		},
		signatureHeader: graph.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/cdn/") },
		replies:         func() []string { return api.Texts(user) },
	}
}

func messengerCase() channelCase {
	const token, secret, page, user = "EAAB-e2e", "e2e-fb-secret", "104050205060708", "6543210987654321"
	return platformCase("messenger", "fb", "page", page, secret, user, messengertest.New(token, user), func(url string) string {
		return fmt.Sprintf("id = \"fb\"\ntype = \"messenger\"\npage_token = %q\napp_secret = %q\nverify_token = \"v\"\npage_id = %q\napi_url = %q\n",
			token, secret, page, url+"/"+messengertest.Version)
	})
}

func instagramCase() channelCase {
	const token, secret, account, user = "IGAA-e2e", "e2e-ig-secret", "17841400000000001", "1234567890123456"
	return platformCase("instagram", "ig", "instagram", account, secret, user, instagramtest.New(token, account, user), func(url string) string {
		return fmt.Sprintf("id = \"ig\"\ntype = \"instagram\"\ntoken = %q\napp_secret = %q\nverify_token = \"v\"\naccount_id = %q\napi_url = %q\n",
			token, secret, account, url+"/"+instagramtest.Version)
	})
}

func gupshupCase() channelCase {
	const key, app, source, token, user = "gs-e2e-key", "E2EApp", "917834811114", "gs-e2e-webhook-token", "919876543210"
	api := gupshuptest.New(key, app, source, user)
	api.Media["e2e-photo"] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", gupshuptest.WebhookURL(base, "gs", token), bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	return channelCase{
		name: "gupshup", provider: "gs", chat: user,
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"gs\"\ntype = \"gupshup\"\napi_key = %q\napp_name = %q\nsource = %q\nwebhook_token = %q\napi_url = %q\n",
				key, app, source, token, url)
		},
		text: func(base, msgID, text string) *http.Request {
			return post(base, api.Text("ABEG"+msgID, user, text))
		},
		image: func(base, apiURL, msgID string) *http.Request {
			return post(base, api.Image("ABEG"+msgID, user, api.MediaURL(apiURL, "e2e-photo"), ""))
		},
		forge: func(r *http.Request) {
			r.URL.RawQuery = "token=" + token + "x"
		},
		download: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/fm/wamedia/") },
		replies:  func() []string { return api.Texts(user) },
	}
}

func gohighlevelCase() channelCase {
	const token, location, contact = "pit-e2e-token", "e2eLocation000000001", "e2eContact0000000001"
	api := gohighleveltest.New(token, location, contact)
	api.Media["e2e.jpg"] = photo
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/ghl", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(gohighlevel.SignatureHeader, gohighleveltest.Sign(body))
		return r
	}
	return channelCase{
		name: "gohighlevel", provider: "ghl", chat: contact,
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"ghl\"\ntype = \"gohighlevel\"\ntoken = %q\nlocation_id = %q\npublic_key = %q\nmessage_type = \"SMS\"\napi_url = %q\n",
				token, location, gohighleveltest.PublicKey(), url)
		},
		text: func(base, msgID, text string) *http.Request {
			// A redelivery is the same webhook: its id, its bytes.
			return post(base, api.Inbound("wh-"+msgID, "m-"+msgID, contact, "SMS", text))
		},
		image: func(base, apiURL, msgID string) *http.Request {
			return post(base, api.Inbound("wh-"+msgID, "m-"+msgID, contact, "SMS", "", api.MediaURL(apiURL, "e2e.jpg")))
		},
		signatureHeader: gohighlevel.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/msgsndr/") },
		replies:         func() []string { return api.Texts(contact) },
	}
}

func tiktokCase() channelCase {
	const token, secret, business, conv, user = "act.e2e-token", "tt-e2e-client-secret", "bus-e2e", "0:1:e2e:conv", "usr-e2e"
	api := tiktoktest.New(token, business, conv)
	api.Media["e2e-photo"] = photo
	return channelCase{
		name: "tiktok", provider: "tt", chat: conv,
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"tt\"\ntype = \"tiktok\"\naccess_token = %q\nclient_secret = %q\nbusiness_id = %q\napi_url = %q\n",
				token, secret, business, url)
		},
		text: func(base, msgID, text string) *http.Request {
			return tiktoktest.Request(base, "tt", secret, tiktoktest.Text("m-"+msgID, conv, user, text))
		},
		image: func(base, _, msgID string) *http.Request {
			return tiktoktest.Request(base, "tt", secret, tiktoktest.Image("m-"+msgID, conv, user, "e2e-photo"))
		},
		signatureHeader: "Tiktok-Signature",
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, tiktoktest.CDNPath) },
		replies:         func() []string { return api.Texts(conv) },
	}
}

// TestChannelsEndToEnd runs botrun (a real process, the Go echo example,
// SQLite) against each channel's fake: a forged webhook is refused; a signed
// one reaches the WASM handler and its reply reaches the fake, once, however
// often the channel redelivers. Then an image arrives, is journaled, and botrun
// is SIGKILLed while the guest's media download hangs; restarted, the guest
// loads the media bytes from the journaled reference and replies with their
// size.
func TestChannelsEndToEnd(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	for _, c := range []channelCase{telegramCase(), metaCase(), twilioCase(), messengerCase(), instagramCase(), discordCase(), gupshupCase(), gohighlevelCase(), tiktokCase(), evolutionCase(), wppconnectCase()} {
		t.Run(c.name, func(t *testing.T) { endToEnd(t, bin, module, c) })
	}
}

// channelBot starts botrun (module, SQLite in dir) with c's entry for its
// fake at api, and returns it with its address and config file.
func channelBot(t *testing.T, bin, module, dir, api string, c channelCase) (r *replica, base, cfg string) {
	addr := freePort(t)
	cfg = filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[bot]
module = %q
data_dir = %q
[http]
listen = %q
[durability]
backend = "sqlite"
path = %q
instance_id = "e2e"
poll = "50ms"
[durability.inbox]
lease = "2s"
[[providers]]
%s`, module, testDataDir(), addr, filepath.Join(dir, "bot.db"), c.toml(api))), 0o644)
	r = &replica{name: c.name, addr: addr, cfg: cfg}
	r.start(t, bin)
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	return r, "http://" + addr, cfg
}

func endToEnd(t *testing.T, bin, module string, c channelCase) {
	g := &gate{next: c.fake, download: c.download, reached: make(chan struct{}, 1)}
	api := httptest.NewServer(g)
	defer api.Close()
	dir := t.TempDir()
	r, base, cfg := channelBot(t, bin, module, dir, api.URL, c)
	send := func(req *http.Request) int { return deliverWebhook(t, req) }
	waitReply := func(want string) { t.Helper(); waitReply(t, c, r, want) }

	forged := c.text(base, "e2e-forged", "forged")
	if c.forge != nil {
		c.forge(forged)
	} else {
		forged.Header.Set(c.signatureHeader, "sha256=00"+forged.Header.Get(c.signatureHeader))
	}
	if code := send(forged); code != 401 && code != 403 {
		t.Fatalf("forged webhook: HTTP %d, want 401/403", code)
	}
	for i := 0; i < 3; i++ { // the channel redelivers
		if code := send(c.text(base, "e2e-1", "hola")); code/100 != 2 {
			t.Fatalf("webhook: HTTP %d", code)
		}
	}
	waitReply("echo: hola")

	g.hold(true)
	if code := send(c.image(base, api.URL, "e2e-img")); code/100 != 2 {
		t.Fatalf("image webhook: HTTP %d", code)
	}
	killDuringDownload(t, g, r, bin)
	want := fmt.Sprintf("echo: [image, %d bytes]", len(photo))
	waitReply(want)
	// An operator's scheduled send and broadcast reach the channel's fake
	// through the running bot's sweeper, once, the scheduled one not before
	// its time.
	sentAt := time.Now()
	if code, out, errs := runCLI("send", "-c", cfg, "--provider", c.provider, "--chat", c.chat, "--key", "e2e:later", "--at", "1s", "later"); code != 0 || !strings.HasPrefix(out, "scheduled") {
		t.Fatalf("botrun send --at: %d %q %q", code, out, errs)
	}
	chats := filepath.Join(dir, "chats.txt")
	os.WriteFile(chats, []byte(c.chat+"\n"), 0o600)
	if code, _, errs := runCLI("broadcast", "-c", cfg, "--provider", c.provider, "--chats", chats, "--key-prefix", "e2e:news", "news"); code != 0 {
		t.Fatalf("botrun broadcast: %d %q", code, errs)
	}
	waitReply("news")
	waitReply("later")
	if since := time.Since(sentAt); since < time.Second {
		t.Errorf("the scheduled send went out after %s, before its 1 s", since)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()
	got := c.replies()
	for _, once := range []string{"later", "news"} {
		if n := count(got, once); n != 1 {
			t.Errorf("%q sent %d times: %q", once, n, got)
		}
	}
	if n := count(got, "echo: hola"); n != 1 {
		t.Errorf("\"echo: hola\" sent %d times: %q", n, got)
	}
	if n := count(got, want); n != 1 {
		t.Errorf("%q sent %d times: %q", want, n, got)
	}
	if slices.Contains(got, "echo: forged") {
		t.Error("the forged message was handled")
	}
	if c.check != nil {
		c.check(t)
	}
}

// killDuringDownload waits until the guest's media download is held at g,
// SIGKILLs botrun there, opens the gate and starts botrun again.
func killDuringDownload(t *testing.T, g *gate, r *replica, bin string) {
	t.Helper()
	killWhileHeld(t, g.reached, func() { g.hold(false) }, r, bin)
}

// killWhileHeld waits until reached says the guest's media download is
// held, SIGKILLs botrun there, calls release and starts botrun again.
func killWhileHeld(t *testing.T, reached <-chan struct{}, release func(), r *replica, bin string) {
	t.Helper()
	select {
	case <-reached:
	case <-time.After(20 * time.Second):
		t.Fatalf("the guest never asked for the media bytes\n%s", r.stderr.String())
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	release()
	r.start(t, bin)
}

// deliverWebhook makes a webhook request and returns its status.
func deliverWebhook(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitReply waits until c's fake accepted the reply want.
func waitReply(t *testing.T, c channelCase, r *replica, want string) {
	t.Helper()
	if !waitfor.True(30*time.Second, func() bool { return slices.Contains(c.replies(), want) }) {
		t.Fatalf("no reply %q at the fake; it has %q\n%s", want, c.replies(), r.stderr.String())
	}
}

// TestSendHooksOnChannels runs examples/signature (a module with both send
// hooks) against each channel's fake: the reply the fake accepts is the one
// botrun_before_send signed, a reply it cancels never reaches the fake, and
// botrun_after_send logs each delivery with the id the channel gave it.
func TestSendHooksOnChannels(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/signature")
	for _, c := range []channelCase{telegramCase(), metaCase(), twilioCase(), messengerCase(), instagramCase(), discordCase(), gupshupCase(), gohighlevelCase(), tiktokCase(), evolutionCase(), wppconnectCase()} {
		t.Run(c.name, func(t *testing.T) {
			api := httptest.NewServer(c.fake)
			defer api.Close()
			r, base, _ := channelBot(t, bin, module, t.TempDir(), api.URL, c)
			for i, text := range []string{"hola", "my password is 1234", "bye"} {
				if code := deliverWebhook(t, c.text(base, fmt.Sprint("hk-", i), text)); code/100 != 2 {
					t.Fatalf("webhook: HTTP %d", code)
				}
				if i != 1 {
					waitReply(t, c, r, "echo: "+text+"\n-- botrun")
				}
			}
			if got := c.replies(); len(got) != 2 {
				t.Errorf("the fake accepted %q; want the two signed replies only", got)
			}
			if !waitfor.True(30*time.Second, func() bool { return strings.Count(r.stderr.String(), " to "+c.chat+" as message ") >= 2 }) {
				t.Fatalf("botrun_after_send did not log the delivery:\n%s", r.stderr.String())
			}
		})
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
