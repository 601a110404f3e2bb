// Package beforesend gives a bot the botrun_before_send hook (SPEC.md
// section 4.7): importing it exports the hook, so a bot that does not import
// it pays nothing. Register the hook from an init function:
//
//	func init() {
//		beforesend.Handle(func(s *bot.Outgoing) error {
//			s.Text += "\n-- sent by botrun"
//			return nil
//		})
//	}
//
// The hook runs once for each send of a handler, before it is journaled:
// change the Outgoing's Chat, Text, Media, Buttons or List to rewrite it,
// return bot.ErrCancelSend to cancel it, or another error to fail it.
package beforesend

import bot "github.com/botrun/botrun/guest-sdk/go"

var hook func(*bot.Outgoing) error

// Handle registers the before-send hook. Call it from an init function.
func Handle(fn func(*bot.Outgoing) error) { hook = fn }

func run(n int32) int32 {
	if hook == nil {
		return 0 // no hook registered: every send goes out as asked
	}
	return bot.RunBeforeSend(n, hook)
}
