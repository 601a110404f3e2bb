// Package convtest runs conversation tests: a bot's conversations written
// as plain text, run against its module with an in-memory journal, a test
// channel and a test clock, with no network and the same result on every
// run ("botrun test"). With Options.Crash each conversation is run again
// with a crash at every journal write, and the bot restarted on the same
// journal: the replies must be those of the run without a crash.
//
// A test file, one line per step:
//
//	# a comment
//	> hello                  a message from the user
//	< Hi! What's your name?  the bot's next reply, exactly
//	> [Yes]                  a press of the button (or list row) titled Yes
//	> (image cat.png) look   a message with an attachment (a file beside the test)
//	< Done.                  (an indented line under a reply holds its
//	  [Again] [Stop]          buttons, "{Menu: a | b}" a list, "(image URL)" media)
//	<@alice You have mail.   a reply to another chat
//	<~ Done, for real.       an edit of an earlier message
//	:chat alice              the messages that follow come from chat alice
//	:from bob                ... sent by bob
//	:advance 2h              the clock moves on; the sends due go out
//	:api orders GET /orders/42 200 {"status":"shipped"}
//	                         the bot's calls to API orders answer so
//	:state count 3           the chat's state key count holds 3
//
// In texts, \n is a newline and \\ a backslash. The full guide is
// docs/testing.md.
//
// convtest imports host, its clock and its module loader; it is the one
// place that runs a bot the way a test does.
package convtest
