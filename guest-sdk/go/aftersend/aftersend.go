// Package aftersend gives a bot the botrun_after_send hook (SPEC.md section
// 4.7): importing it exports the hook, and the host then journals, with each
// send, a record that runs it at least once after the send was delivered.
// A bot that does not import it pays nothing. Register the hook from an init
// function:
//
//	func init() {
//		aftersend.Handle(func(s bot.Outgoing) error {
//			bot.Logf(bot.LevelInfo, "delivered %s as %s", s.Key, s.Ref)
//			return nil
//		})
//	}
//
// The hook reads no state and makes no sends: it sees the send, its key and
// the channel's message id (Ref).
package aftersend

import bot "github.com/botrun/botrun/guest-sdk/go"

var hook func(bot.Outgoing) error

// Handle registers the after-send hook. Call it from an init function.
func Handle(fn func(bot.Outgoing) error) { hook = fn }

func run(n int32) int32 {
	if hook == nil {
		return 0
	}
	return bot.RunAfterSend(n, hook)
}
