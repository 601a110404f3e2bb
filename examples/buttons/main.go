// Command buttons is the buttons example: "menu" posts "Pick one" with the
// reply buttons Yes and No; a press of one (an event of kind interaction)
// answers "you chose <id>"; "remind <n> <text>" answers "ok" and sends <text>
// to the same chat n seconds after the message arrived (an Enqueue WithAt, as
// examples/reminder); "edit" shows "typing…", sends "draft" and edits it to
// "final" (where the channel cannot edit, it sends "final" as a new message);
// anything else answers a usage line. examples/rust-buttons is the same bot
// in Rust. Build it with make examples (or GOOS=wasip1
// GOARCH=wasm go build -buildmode=c-shared -o buttons.wasm .).
package main

import (
	"errors"
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
		return draft(ctx)
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

// draft shows "typing…", sends "draft" and edits it to "final". The draft
// goes through Send, not Reply: a posted send is made after the handler
// returns, and the edit needs the ref the channel gave it. A retry of the
// event finds the draft journaled (deduped, with its ref) and edits it
// again, which changes nothing.
func draft(ctx *bot.Context) error {
	chat := ctx.Event.Chat
	// The indicator is a courtesy: a channel without it (Twilio), or one
	// that refused it, does not stop the answer.
	if err := ctx.Typing(chat); err != nil && !errors.Is(err, bot.ErrUnsupported) {
		ctx.Logf(bot.LevelWarn, "typing: %v", err)
	}
	res, err := ctx.Send(chat, "draft")
	if err != nil {
		return err
	}
	if res.Ref != "" {
		err := ctx.Edit(chat, res.Ref, "final")
		if err == nil {
			return nil
		}
		if !errors.Is(err, bot.ErrUnsupported) {
			ctx.Logf(bot.LevelWarn, "edit: %v", err) // e.g. a *bot.ChannelError: the channel refused
		}
	}
	// The channel cannot edit (WhatsApp, Twilio), refused, or gave no
	// ref: the final text as a new message.
	_, err = ctx.Reply("final")
	return err
}

func init() { bot.Handle(handle) }

func main() {}
