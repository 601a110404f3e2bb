// Command reminder is the scheduled-send example: "remind <n> <text>" answers
// "ok" and sends <text> to the same chat n seconds after the message arrived;
// anything else answers a usage line. The reminder is an Enqueue WithAt: the
// host journals it at once and its outbox sends it once when it is due, across
// restarts (botrun outbox list --state scheduled shows it, botrun discard KEY
// cancels it). Build it with GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared -o reminder.wasm .
package main

import (
	"strconv"
	"strings"
	"time"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

// maxSeconds bounds n: 30 days (2592000 s).
const maxSeconds = 30 * 24 * 3600

const usage = "usage: remind <seconds> <text>"

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		f := strings.SplitN(ctx.Event.Text, " ", 3)
		var n int
		if len(f) == 3 && f[0] == "remind" && strings.TrimSpace(f[2]) != "" {
			n, _ = strconv.Atoi(f[1])
		}
		if n < 1 || n > maxSeconds {
			_, err := ctx.Reply(usage)
			return err
		}
		// The guest's clock is the event's: the same time on every replay,
		// so a replay finds the reminder journaled under the same key.
		at := time.UnixMilli(ctx.Event.ReceivedAt).Add(time.Duration(n) * time.Second)
		if _, err := ctx.Enqueue(ctx.Event.Chat, f[2], bot.WithAt(at)); err != nil {
			return err
		}
		_, err := ctx.Reply("ok")
		return err
	})
}

func main() {}
