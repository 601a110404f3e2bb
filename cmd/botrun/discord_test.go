package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/host/channel/discord"
	"github.com/botrun/botrun/host/channel/discord/discordtest"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// discordCase drives Discord in interactions mode: each text is a slash
// command (its "text" option), the image a command with an attachment
// option whose URL is on the fake's CDN; replies go out as the commands'
// follow-ups (the interaction token kept in the backend's Kv, so the reply
// replayed after the SIGKILL finds it), the operator's sends as channel
// messages.
func discordCase() channelCase {
	const token, app, channel, user = "MTEwMA.e2e.bot-token", "1100000000000000000", "700000000000000001", "600000000000000001"
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
	api := discordtest.New(token, app, channel)
	post := func(base string, body []byte) *http.Request {
		r, _ := http.NewRequest("POST", base+"/webhooks/dc", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		r.Header.Set(discord.TimestampHeader, ts)
		r.Header.Set(discord.SignatureHeader, discord.Sign(key, ts, body))
		return r
	}
	command := func(base, msgID, text string, file *discordtest.Attachment) *http.Request {
		// A redelivery is the same interaction: the same id and token.
		return post(base, api.Command(discordtest.Command{ID: api.ID(msgID), Channel: channel, User: user, Name: "ask", Text: text, File: file}))
	}
	return channelCase{
		name: "discord", provider: "dc", chat: channel,
		fake: api,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"dc\"\ntype = \"discord\"\nmode = \"interactions\"\ntoken = %q\napplication_id = %q\npublic_key = %q\napi_url = %q\n",
				token, app, hex.EncodeToString(key.Public().(ed25519.PublicKey)), url)
		},
		text: func(base, msgID, text string) *http.Request { return command(base, msgID, text, nil) },
		image: func(base, apiURL, msgID string) *http.Request {
			a := api.Attachment(apiURL, channel, "photo.jpg", "image/jpeg", photo, 24*time.Hour)
			return command(base, msgID, "", &a)
		},
		signatureHeader: discord.SignatureHeader,
		download:        func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/attachments/") },
		replies:         func() []string { return api.Texts(channel) },
		check: func(t *testing.T) {
			api.Lock()
			defer api.Unlock()
			for _, m := range api.Sent {
				followUp := strings.HasPrefix(m.Content, "echo: ")
				if followUp != (m.Interaction != "") {
					t.Errorf("%q went out as a follow-up: %v, want %v (replies to commands follow up, the operator's sends do not)", m.Content, m.Interaction != "", followUp)
				}
			}
		},
	}
}

// TestDiscordGatewayEndToEnd runs botrun in Discord's gateway mode against
// the fake Gateway: messages are journaled and answered as channel
// messages; a drop in the middle of a stream of messages loses and doubles
// none (the session is resumed); an image message journaled before a
// SIGKILL is answered with its bytes by the restarted bot, which identifies
// anew.
func TestDiscordGatewayEndToEnd(t *testing.T) {
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	const token, app, channel, user = "MTEwMA.e2e.bot-token", "1100000000000000000", "700000000000000001", "600000000000000001"
	api := discordtest.New(token, app, channel)
	g := &gate{next: api, download: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/attachments/") }, reached: make(chan struct{}, 1)}
	srv := httptest.NewServer(g)
	defer srv.Close()
	c := channelCase{name: "discord-gateway", provider: "dc", chat: channel,
		toml: func(url string) string {
			return fmt.Sprintf("id = \"dc\"\ntype = \"discord\"\ntoken = %q\napplication_id = %q\napi_url = %q\n", token, app, url)
		},
		replies: func() []string { return api.Texts(channel) },
	}
	r, _, _ := channelBot(t, bin, module, t.TempDir(), srv.URL, c)
	connected := func() {
		t.Helper()
		if !waitfor.True(30*time.Second, api.Gateway.Connected) {
			t.Fatalf("botrun did not connect to the Gateway\n%s", r.stderr.String())
		}
	}
	connected()
	api.Gateway.DropAfter(2)
	var want []string
	for i := range 5 {
		api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate(fmt.Sprint(1300000000000000100+i), channel, user, false, fmt.Sprint("m", i)))
		want = append(want, fmt.Sprint("echo: m", i))
	}
	for _, w := range want {
		waitReply(t, c, r, w)
	}
	connected()
	g.hold(true)
	photoFile := api.Attachment(srv.URL, channel, "photo.jpg", "image/jpeg", photo, 24*time.Hour)
	api.Gateway.Dispatch("MESSAGE_CREATE", api.MessageCreate("1300000000000000200", channel, user, false, "", photoFile))
	killDuringDownload(t, g, r, bin)
	img := fmt.Sprintf("echo: [image, %d bytes]", len(photo))
	waitReply(t, c, r, img)
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()
	got := c.replies()
	for _, w := range append(want, img) {
		if n := count(got, w); n != 1 {
			t.Errorf("%q sent %d times: %q", w, n, got)
		}
	}
	if s := api.Gateway.Stats(); s.Identifies != 2 || s.Resumes < 1 {
		t.Errorf("want a resume after the drop and a new session after the restart: %+v", s)
	}
}
