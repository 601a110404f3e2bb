// Command counter is a guest for botrun test's own tests: "state" counts
// in the chat's state (right: a replay reads the count as it was), "global"
// in a global variable (wrong: a replay after a crash counts the message
// twice, which botrun test --crash reports), "name X" keeps X under the
// sender's key "user/name".
package main

import (
	"strconv"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

var count int

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		text := ctx.Event.Text
		var reply string
		switch {
		case text == "global":
			count++
			reply = "global " + strconv.Itoa(count)
		case text == "state":
			n := 0
			if b, ok, err := ctx.StateGet("n"); err != nil {
				return err
			} else if ok {
				n, _ = strconv.Atoi(string(b))
			}
			n++
			if err := ctx.StateSet("n", []byte(strconv.Itoa(n))); err != nil {
				return err
			}
			reply = "state " + strconv.Itoa(n)
		case strings.HasPrefix(text, "name "):
			if err := ctx.StateSet("user/name", []byte(strings.TrimPrefix(text, "name "))); err != nil {
				return err
			}
			reply = "ok"
		default:
			reply = "?"
		}
		_, err := ctx.Reply(reply)
		return err
	})
}

func main() {}
