// Command orders is a bot that looks orders up in a REST API: "order 42"
// answers with the status GET /orders/42 of the [[apis]] entry "orders"
// returns. The host makes the call (the bot has no network), adds the
// entry's headers (its credentials, which the bot never sees) and an
// Idempotency-Key, and journals the answer before the bot reads it: a
// replayed message reads the same answer, and the API is not called again.
// Build it with make examples.
package main

import (
	"errors"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		id, ok := strings.CutPrefix(strings.TrimSpace(ctx.Event.Text), "order ")
		if !ok || id == "" || strings.ContainsAny(id, "/?#%") {
			_, err := ctx.Reply(`Ask me "order <number>".`)
			return err
		}
		ctx.Typing(ctx.Event.Chat) // a courtesy while the API answers
		res, err := ctx.Fetch("orders", bot.Request{Path: "/orders/" + id})
		var failed *bot.FetchError
		switch {
		case errors.As(err, &failed):
			_, err = ctx.Reply("The order service did not answer (" + failed.Reason + "); try again in a minute.")
			return err
		case err != nil:
			return err
		case res.Status == 404:
			_, err = ctx.Reply("There is no order " + id + ".")
			return err
		case res.Status != 200:
			_, err = ctx.Reply("The order service answered " + http(res.Status) + "; try again later.")
			return err
		}
		_, err = ctx.Reply("Order " + id + ": " + strings.TrimSpace(string(res.Body)))
		return err
	})
}

// http is a status as text without fmt.
func http(status int) string {
	return "HTTP " + string(rune('0'+status/100)) + string(rune('0'+status/10%10)) + string(rune('0'+status%10))
}

func main() {}
