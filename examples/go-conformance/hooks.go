package main

import (
	"errors"
	"fmt"
	"strings"

	bot "github.com/botrun/botrun/guest-sdk/go"
	"github.com/botrun/botrun/guest-sdk/go/aftersend"
	"github.com/botrun/botrun/guest-sdk/go/beforesend"
)

// codeWord is an SDK error's outcome in a probe: its code's name, or "ok".
func codeWord(err error) string {
	if err == nil {
		return "ok"
	}
	return bot.CodeOf(err).String()
}

// The send hooks of examples/CONFORMANCE.md, chosen by the send's text.
func init() {
	beforesend.Handle(func(s *bot.Outgoing) error {
		words := strings.Split(s.Text, " ")
		switch words[0] {
		case "hook-cancel":
			return bot.ErrCancelSend
		case "hook-fail":
			return errors.New("hook failed")
		case "hook-same":
			s.Text = strings.Clone(s.Text)
		case "hook-rewrite":
			if len(words) == 3 {
				s.Chat, s.Text = arg(words[1]), arg(words[2])
			}
		case "hook-probe":
			media, list := "-", "-"
			if s.Media != nil {
				media = s.Media.Type
			}
			if s.List != nil {
				list = s.List.Button
			}
			ctx := &bot.Context{}
			_, _, stateErr := ctx.StateGet("k")
			_, sendErr := ctx.Send("x", "y")
			s.Text = fmt.Sprintf("hook=%s event=%s provider=%s chat=%s key=%s at=%d time=%d now=%d media=%s buttons=%d list=%s state=%s send=%s",
				s.Hook, s.Event, s.Provider, s.Chat, s.Key, s.At, s.Time, bot.NowMs(), media, len(s.Buttons), list, codeWord(stateErr), codeWord(sendErr))
		}
		return nil
	})
	aftersend.Handle(func(s bot.Outgoing) error {
		if strings.HasPrefix(s.Text, "hook-fail") {
			return errors.New("hook failed")
		}
		bot.Logf(bot.LevelInfo, "after_send key=%s ref=%s chat=%s text=%s time=%d", s.Key, s.Ref, s.Chat, s.Text, s.Time)
		return nil
	})
}
