// Command orders is a bot that looks orders up in a REST API: "order 42"
// answers with the status GET /orders/42 of the [[apis]] entry "orders"
// returns. The host makes the call (the bot has no network), adds the
// entry's headers (its credentials, which the bot never sees) and an
// Idempotency-Key, and journals the answer before the bot reads it: a
// replayed message reads the same answer, and the API is not called again.
//
// "order" alone starts a flow: it asks for the number, looks the order up,
// and offers to cancel it (POST /orders/<id>/cancel). The lookup is made
// once, by the message that gives the number; the flow's later message,
// which replays that step, reads the kept answer (bot.Context.Fetch).
// Build it with make examples.
package main

import (
	"errors"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		if in, err := ctx.Continue(); in || err != nil {
			return err
		}
		text := strings.TrimSpace(ctx.Event.Text)
		if text == "order" {
			return ctx.Start(lookup)
		}
		id, ok := strings.CutPrefix(text, "order ")
		if !ok || !validID(id) {
			_, err := ctx.Reply(`Ask me "order <number>", or "order" to look one up step by step.`)
			return err
		}
		_, err := ctx.Reply(status(ctx, id))
		return err
	})
}

// lookup asks for an order's number, tells its status, and cancels it if
// asked to.
var lookup = bot.NewFlow("lookup", func(f *bot.FlowContext) error {
	id, err := f.Ask("Which order number?")
	if err != nil {
		return err
	}
	if !validID(id) {
		_, err := f.Reply("That is not an order number.")
		return err
	}
	if _, err := f.Reply(status(f.Context, id)); err != nil {
		return err
	}
	yes, err := f.Ask("Shall I cancel order " + id + "? (yes/no)")
	if err != nil || strings.ToLower(strings.TrimSpace(yes)) != "yes" {
		return err
	}
	res, err := f.Fetch("orders", bot.Request{Method: "POST", Path: "/orders/" + id + "/cancel"})
	switch {
	case err != nil:
		_, err = f.Reply("I could not reach the order service; order " + id + " is not cancelled.")
	case res.Status == 200:
		_, err = f.Reply("Order " + id + " is cancelled.")
	default:
		_, err = f.Reply("The order service refused to cancel order " + id + " (" + http(res.Status) + ").")
	}
	return err
})

// status looks order id up: the text to answer with.
func status(ctx *bot.Context, id string) string {
	ctx.Typing(ctx.Event.Chat) // a courtesy while the API answers
	res, err := ctx.Fetch("orders", bot.Request{Path: "/orders/" + id})
	var failed *bot.FetchError
	switch {
	case errors.As(err, &failed):
		return "The order service did not answer (" + failed.Reason + "); try again in a minute."
	case err != nil:
		return "The order service cannot be called: " + err.Error()
	case res.Status == 404:
		return "There is no order " + id + "."
	case res.Status != 200:
		return "The order service answered " + http(res.Status) + "; try again later."
	}
	return "Order " + id + ": " + strings.TrimSpace(string(res.Body))
}

// validID says id can go in the API's path as it is.
func validID(id string) bool {
	return id != "" && len(id) <= 32 && !strings.ContainsAny(id, "/?#% ")
}

// http is a status as text without fmt.
func http(status int) string {
	return "HTTP " + string(rune('0'+status/100)) + string(rune('0'+status/10%10)) + string(rune('0'+status%10))
}

func main() {}
