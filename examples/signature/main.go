// Command signature shows the send hooks (abi/SPEC.md section 4.7). Its
// handler echoes every message; its before-send hook signs each send with a
// last line "-- botrun" and cancels any send that mentions a password; its
// after-send hook logs each delivered send with the channel's message id.
// Build it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o
// signature.wasm .
package main

import (
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
	"github.com/botrun/botrun/guest-sdk/go/aftersend"
	"github.com/botrun/botrun/guest-sdk/go/beforesend"
)

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		_, err := ctx.Reply("echo: " + ctx.Event.Text)
		return err
	})
	beforesend.Handle(func(s *bot.Outgoing) error {
		if strings.Contains(strings.ToLower(s.Text), "password") {
			return bot.ErrCancelSend
		}
		s.Text += "\n-- botrun"
		return nil
	})
	aftersend.Handle(func(s bot.Outgoing) error {
		bot.Logf(bot.LevelInfo, "delivered %s to %s as message %s", s.Key, s.Chat, s.Ref)
		return nil
	})
}

func main() {}
