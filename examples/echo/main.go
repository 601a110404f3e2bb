// Command echo is the example bot: it replies "echo: <text>" to every text
// message, and to a photo without a caption "echo: [image, N bytes]" with the
// photo sent back. Build it with make examples (or GOOS=wasip1 GOARCH=wasm go
// build -buildmode=c-shared -o echo.wasm .).
package main

import (
	"errors"
	"fmt"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		if ctx.Event.Text == "" {
			if len(ctx.Event.Media) == 0 {
				return nil
			}
			// Media without a caption: load it, say how big it is, send it back.
			m := ctx.Event.Media[0]
			label := m.Type
			b, err := ctx.LoadMedia(0)
			var unavailable *bot.MediaUnavailableError
			switch {
			case err == nil:
				label = fmt.Sprintf("%s, %d bytes", m.Type, len(b))
			case errors.As(err, &unavailable):
				label = m.Type + ", unavailable: " + unavailable.Reason
			case !errors.Is(err, bot.ErrUnsupported):
				return err
			}
			var opts []bot.SendOption
			if m.Ref != "" { // empty when the reference did not survive
				opts = append(opts, bot.WithMedia(bot.Media{Type: m.Type, Ref: m.Ref}))
			}
			_, err = ctx.Reply("echo: ["+label+"]", opts...)
			return err
		}
		_, err := ctx.Reply("echo: " + ctx.Event.Text)
		return err
	})
}

func main() {}
