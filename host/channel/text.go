package channel

// TextLimiter is implemented by providers whose channel limits the length of a
// text message; longer texts are split into parts sent in order.
type TextLimiter interface {
	// TextLimit is the longest text, in characters (Unicode code points).
	TextLimit() int
}

// ByteLimiter is implemented by a channel that limits a text's length in
// bytes of UTF-8 (Instagram: 1,000) rather than, or as well as, in
// characters: the host splits a longer text, on character boundaries, so
// that every part fits this and the TextLimit alike.
type ByteLimiter interface {
	// TextByteLimit is the longest text, in bytes of UTF-8.
	TextByteLimit() int
}
