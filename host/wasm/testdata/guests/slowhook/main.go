// Command slowhook has costly send hooks. botrun_before_send: for a send
// whose text is "spin" it logs a line and never returns; for "log" it writes
// 64 lines of 1,000 bytes to stdout and lets the send go. botrun_after_send:
// for "spin after" it logs a line and never returns; for "quick after" it
// logs a line and returns at once. Its handler broadcasts
// the event's text to the chats c0 … c49.
package main

import (
	"fmt"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
	"github.com/botrun/botrun/guest-sdk/go/aftersend"
	"github.com/botrun/botrun/guest-sdk/go/beforesend"
)

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		chats := make([]string, 50)
		for i := range chats {
			chats[i] = fmt.Sprint("c", i)
		}
		res, err := ctx.Broadcast(chats, ctx.Event.Text, "b:"+ctx.Event.ID)
		if err != nil {
			return err
		}
		bot.Logf(bot.LevelInfo, "broadcast journaled=%d cancelled=%d", res.Journaled, res.Cancelled)
		return nil
	})
	beforesend.Handle(func(s *bot.Outgoing) error {
		line := strings.Repeat("x", 1000)
		switch s.Text {
		case "spin":
			fmt.Println("hook ran for " + s.Key)
			for i := 0; ; i++ {
				if i < 0 {
					return nil
				}
			}
		case "log":
			for range 64 {
				fmt.Println(line)
			}
		}
		return nil
	})
	aftersend.Handle(func(s bot.Outgoing) error {
		if s.Text == "quick after" {
			fmt.Println("after quick for " + s.Key)
		}
		if s.Text == "spin after" {
			fmt.Println("after ran for " + s.Key)
			for i := 0; ; i++ {
				if i < 0 {
					return nil
				}
			}
		}
		return nil
	})
}

func main() {}
