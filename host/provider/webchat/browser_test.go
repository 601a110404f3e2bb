package webchat_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/config"
	_ "github.com/botrun/botrun/host/provider/webchat"
	"github.com/botrun/botrun/internal/browsertest"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// startButtons runs examples/buttons behind a webchat "web" on loopback and
// returns its base URL.
func startButtons(t *testing.T) string {
	t.Helper()
	module := wasmbuild.Go(t, "../../../examples/buttons")
	dir := t.TempDir()
	src := "[bot]\nmodule = \"" + module + "\"\ndata_dir = \"" + filepath.Join(dir, "data") + "\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"
	cfg, err := config.Parse(filepath.Join(dir, "bot.toml"), src, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	bot, err := host.New(context.Background(), cfg, host.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bot.Run(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// send types text into the chat page and presses its Send button.
func send(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	browsertest.Do(t, ctx, "sending "+text,
		chromedp.WaitVisible(chromedp.CSS("#t")),
		chromedp.SendKeys(chromedp.CSS("#t"), text),
		chromedp.Click(chromedp.CSS("#f button")))
}

// TestPageInBrowser drives the chat page in Chromium: a message typed and
// sent gets the bot's reply, a reply's buttons render and a press reaches
// the bot as an interaction, and a reload keeps the history.
func TestPageInBrowser(t *testing.T) {
	base := startButtons(t)
	ctx := browsertest.Tab(t)
	browsertest.Do(t, ctx, "opening the chat page", chromedp.Navigate(base+"/webchat/web/"))

	send(t, ctx, "hello")
	browsertest.Do(t, ctx, "waiting for the reply to hello",
		browsertest.WaitText(".msg.me", "hello"),
		browsertest.WaitText(".msg.bot", "usage: menu | remind <n> <text> | edit"))

	send(t, ctx, "menu")
	browsertest.Do(t, ctx, "waiting for the menu's buttons",
		browsertest.WaitText(".msg.bot", "Pick one"),
		browsertest.WaitText(".choices button", "Yes"),
		browsertest.WaitText(".choices button", "No"))
	browsertest.Do(t, ctx, "pressing Yes",
		chromedp.Click(chromedp.Search(`//div[@class="choices"]/button[normalize-space(text())="Yes"]`)),
		browsertest.WaitText(".msg.bot", "you chose yes"))

	browsertest.Do(t, ctx, "reloading the page", chromedp.Reload(),
		browsertest.WaitText(".msg.bot", "you chose yes"),
		browsertest.WaitText(".msg.me", "hello"),
		browsertest.WaitText(".choices button", "No"))
	// The reloaded page shows each message once: the history and the
	// transcript's long poll do not both draw it.
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`Array.from(document.querySelectorAll(".msg.bot")).filter((e) => e.textContent === "you chose yes").length`))
	if err != nil || n != 1 {
		t.Fatalf("after the reload %d copies of the reply (err %v), want 1", n, err)
	}
}
