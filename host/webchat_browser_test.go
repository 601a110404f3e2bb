package host

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/botrun/botrun/internal/browsertest"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// typeInChat types text into the chat page and presses its Send button.
func typeInChat(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	browsertest.Do(t, ctx, "sending "+text,
		chromedp.WaitVisible(chromedp.CSS("#t")),
		chromedp.SendKeys(chromedp.CSS("#t"), text),
		chromedp.Click(chromedp.CSS("#f button")))
}

// TestChatPageInBrowser drives the webchat's page in Chromium against
// examples/buttons: a message typed and sent gets the bot's reply, a reply's
// buttons render and a press reaches the bot as an interaction, and a reload
// keeps the history.
func TestChatPageInBrowser(t *testing.T) {
	base, _ := startBot(t, wasmbuild.Go(t, "../examples/buttons"), "")
	ctx := browsertest.Tab(t)
	browsertest.Do(t, ctx, "opening the chat page", chromedp.Navigate(base+"/webchat/web/"))

	typeInChat(t, ctx, "hello")
	browsertest.Do(t, ctx, "waiting for the reply to hello",
		browsertest.WaitText(".msg.me", "hello"),
		browsertest.WaitText(".msg.bot", "usage: menu | remind <n> <text> | edit"))

	typeInChat(t, ctx, "menu")
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
	// transcript's long poll do not both draw it. A new exchange after the
	// reload passes through the long poll, so anything it would have drawn
	// twice is on the page by its reply.
	typeInChat(t, ctx, "after the reload")
	browsertest.Do(t, ctx, "waiting for the reply after the reload",
		browsertest.WaitText(".msg.me", "after the reload"),
		chromedp.Poll[chromedp.Void](`Array.from(document.querySelectorAll(".msg.bot")).filter((e) => e.textContent.startsWith("usage:")).length >= 2`,
			chromedp.WithPollingTimeout(browsertest.Wait)))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`Array.from(document.querySelectorAll(".msg.bot")).filter((e) => e.textContent === "you chose yes").length`))
	if err != nil || n != 1 {
		t.Fatalf("after the reload %d copies of the reply (err %v), want 1", n, err)
	}
}
