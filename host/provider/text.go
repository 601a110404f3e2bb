package provider

import "unicode/utf8"

// TextLimiter is implemented by providers whose channel limits the length of a
// text message; longer texts are split into parts sent in order.
type TextLimiter interface {
	// TextLimit is the longest text, in characters (Unicode code points).
	TextLimit() int
}

// SplitText cuts text into pieces of at most limit code points, preferring to
// cut after a newline or a space in the last fifth of a piece. The pieces
// depend only on the text and the limit, so every replay cuts the same way.
func SplitText(text string, limit int) []string {
	if limit <= 0 || utf8.RuneCountInString(text) <= limit {
		return []string{text}
	}
	var out []string
	for utf8.RuneCountInString(text) > limit {
		cut, n := 0, 0
		for i := range text {
			if n == limit {
				cut = i
				break
			}
			n++
		}
		best := cut
		for i := cut - 1; i > 0 && i > cut*4/5; i-- {
			if text[i] == '\n' || text[i] == ' ' {
				best = i + 1
				break
			}
		}
		out = append(out, text[:best])
		text = text[best:]
	}
	return append(out, text)
}
