// Command hola is examples/flow answering "hola: " where flow says "echo: ",
// the changed candidate of the dry-run tests. The original:
//
// Command flow is the example of a persistent flow: "/signup" asks two
// questions, greets the user between them and thanks them at the end; the
// conversation survives a restart of botrun, and the greeting goes out once.
// Other messages are echoed.
package main

import bot "github.com/botrun/botrun/guest-sdk/go"

var signup = bot.NewFlow("signup", func(f *bot.FlowContext) error {
	name, err := f.Ask("What is your name?")
	if err != nil {
		return err
	}
	if _, err := f.Reply("Nice to meet you, " + name + "!"); err != nil {
		return err
	}
	city, err := f.Ask("Which city do you live in, " + name + "?")
	if err != nil {
		return err
	}
	_, err = f.Reply("Thanks " + name + " from " + city + "!")
	return err
})

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		if ctx.Event.Text == "/signup" {
			return ctx.Start(signup)
		}
		if inFlow, err := ctx.Continue(); inFlow || err != nil {
			return err
		}
		_, err := ctx.Reply("hola: " + ctx.Event.Text)
		return err
	})
}

func main() {}
