// Command buttons is the buttons example: "menu" posts "Pick one" with the
// reply buttons Yes and No; a press of one (an event of kind interaction)
// answers "you chose <id>"; "remind <n> <text>" answers "ok" and sends <text>
// to the same chat n seconds after the message arrived (an Enqueue WithAt, as
// examples/reminder); "edit" says that editing a sent message is not
// available yet; anything else answers a usage line. examples/rust-buttons is
// the same bot in Rust. Build it with make examples (or GOOS=wasip1
// GOARCH=wasm go build -buildmode=c-shared -o buttons.wasm .).
package main

import (
	"strconv"
	"strings"
	"time"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

// maxSeconds bounds a reminder: 30 days.
const maxSeconds = 30 * 24 * 3600

const usage = "usage: menu | remind <n> <text> | edit"

func handle(ctx *bot.Context) error {
	// A press first: its text is the pressed title ("Yes"), which a bot
	// that knows no interactions would read as a message.
	if in := ctx.Event.Interaction; ctx.Event.Kind == bot.KindInteraction && in != nil {
		_, err := ctx.Reply("you chose " + in.ID)
		return err
	}
	text := ctx.Event.Text
	switch {
	case text == "menu":
		_, err := ctx.Reply("Pick one", bot.WithButtons(bot.ReplyButton("yes", "Yes"), bot.ReplyButton("no", "No")))
		return err
	case text == "edit":
		// Editing a sent message is not in the ABI yet: say so rather
		// than pretend.
		_, err := ctx.Reply("edit is not available yet")
		return err
	case strings.HasPrefix(text, "remind "):
		f := strings.SplitN(text, " ", 3)
		n := 0
		if len(f) == 3 && strings.TrimSpace(f[2]) != "" {
			n, _ = strconv.Atoi(f[1])
		}
		if n < 1 || n > maxSeconds {
			break
		}
		// The event's clock: the same time on every replay, so a replay
		// finds the reminder journaled under the same key.
		at := time.UnixMilli(ctx.Event.ReceivedAt).Add(time.Duration(n) * time.Second)
		if _, err := ctx.Enqueue(ctx.Event.Chat, f[2], bot.WithAt(at)); err != nil {
			return err
		}
		_, err := ctx.Reply("ok")
		return err
	}
	_, err := ctx.Reply(usage)
	return err
}

func init() { bot.Handle(handle) }

func main() {}
