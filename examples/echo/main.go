// Command echo is the example bot: it replies "echo: <text>" to every text
// message. Build it with make examples (or GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared -o echo.wasm .).
package main

import bot "github.com/botrun/botrun/guest-sdk/go"

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		if ctx.Event.Text == "" {
			// Media without a caption: send it back, named.
			if len(ctx.Event.Media) > 0 {
				m := ctx.Event.Media[0]
				_, err := ctx.Reply("echo: ["+m.Type+"]", bot.WithMedia(bot.Media{Type: m.Type, Ref: m.Ref}))
				return err
			}
			return nil
		}
		_, err := ctx.Reply("echo: " + ctx.Event.Text)
		return err
	})
}

func main() {}
