package httpkit

import "unicode/utf8"

// SplitText cuts text into pieces of at most limit code points, preferring to
// cut after a newline or a space in the last fifth of a piece. The pieces
// depend only on the text and the limit, so every replay cuts the same way.
func SplitText(text string, limit int) []string {
	return Split(text, limit, 0)
}

// Split cuts text into pieces of at most runes code points and at most bytes
// bytes of UTF-8 (0: no such limit), on character boundaries, preferring to
// cut after a newline or a space in the last fifth of a piece. With bytes 0
// it is SplitText. The pieces depend only on the text and the limits.
func Split(text string, runes, bytes int) []string {
	if runes <= 0 && bytes <= 0 {
		return []string{text}
	}
	fits := func(s string) bool {
		return (runes <= 0 || utf8.RuneCountInString(s) <= runes) && (bytes <= 0 || len(s) <= bytes)
	}
	var out []string
	for !fits(text) {
		// cut is the longest prefix within both limits, on a boundary.
		cut, n := 0, 0
		for cut < len(text) {
			_, size := utf8.DecodeRuneInString(text[cut:])
			if (runes > 0 && n == runes) || (bytes > 0 && cut+size > bytes) {
				break
			}
			cut += size
			n++
		}
		if cut == 0 {
			// Not even the first character fits (a limit under 4 bytes):
			// it goes alone rather than forever.
			_, size := utf8.DecodeRuneInString(text)
			cut = size
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
	if text == "" && len(out) > 0 {
		return out // the last character alone was over the byte limit
	}
	return append(out, text)
}
