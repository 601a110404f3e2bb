package channel

import "github.com/botrun/botrun/abi"

// Limiter is implemented by a channel that limits the length of a text
// message: the host splits a longer text, on character boundaries, into
// parts sent in order, each within both of the limits TextLimits gives (the
// choices go under the last part).
type Limiter interface {
	// TextLimits are the longest text of one message: chars in characters
	// (Unicode code points), bytes in bytes of UTF-8 (Instagram: 1,000); 0
	// is no limit of that kind. buttons and list are the choices the
	// message carries (none for a plain text): a channel whose messages
	// with choices hold less text (WhatsApp's button body, Twilio's
	// numbered lines) gives that smaller limit for them, so the part that
	// carries them fits.
	TextLimits(buttons []abi.Button, list *abi.List) (chars, bytes int)
}
