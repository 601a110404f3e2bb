package channel

// Limiter is implemented by a channel that limits the length of a text
// message: the host splits a longer text, on character boundaries, into
// parts sent in order, each within both of the limits TextLimits gives (the
// choices go under the last part).
type Limiter interface {
	// TextLimits are the longest text of a message like msg: chars in
	// characters (Unicode code points), bytes in bytes of UTF-8 (Instagram:
	// 1,000); 0 is no limit of that kind. Only msg's choices (Buttons,
	// List; none for a plain text) are read: a channel whose messages with
	// choices hold less text (WhatsApp's button body, Twilio's numbered
	// lines) gives that smaller limit for them, so the part that carries
	// them fits.
	TextLimits(msg Outbound) (chars, bytes int)
}
