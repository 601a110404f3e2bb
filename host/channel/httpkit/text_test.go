package httpkit

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSplitTextUnchanged: Split without a byte limit cuts exactly as
// SplitText did before byte limits (these are that version's cuts): a
// replay of an older journal must cut a text the same way.
func TestSplitTextUnchanged(t *testing.T) {
	for _, tt := range []struct {
		text  string
		limit int
		want  []string
	}{
		{"hola qué tal\nbien y tú", 10, []string{"hola qué ", "tal\nbien y", " tú"}},
		{"palabra ñandú 🦜 palabra ñandú 🦜 palabra", 12, []string{"palabra ñand", "ú 🦜 palabra ", "ñandú 🦜 pala", "bra"}},
		{"xxxxxxxxxxxxxxxxxxxxxxxxx", 10, []string{"xxxxxxxxxx", "xxxxxxxxxx", "xxxxx"}},
		{"ab cdefghijklmnop", 5, []string{"ab cd", "efghi", "jklmn", "op"}},
		{"\xff\xfe abc \xc3 def", 4, []string{"\xff\xfe a", "bc \xc3", " def"}},
		{"short", 10, []string{"short"}},
		{"one two three four five six", 0, []string{"one two three four five six"}},
	} {
		if got := SplitText(tt.text, tt.limit); !slices.Equal(got, tt.want) {
			t.Errorf("SplitText(%q, %d) = %q, want %q", tt.text, tt.limit, got, tt.want)
		}
	}
}

func TestSplitBytes(t *testing.T) {
	text := strings.Repeat("palabra ñandú 🦜 ", 200)
	parts := Split(text, 0, 1000)
	if len(parts) < 4 || strings.Join(parts, "") != text {
		t.Fatalf("%d parts", len(parts))
	}
	for i, p := range parts {
		if len(p) > 1000 || !utf8.ValidString(p) {
			t.Fatalf("part %d: %d bytes, valid %v", i, len(p), utf8.ValidString(p))
		}
		if i < len(parts)-1 && len(p) < 800 {
			t.Fatalf("part %d is %d bytes: cut too early", i, len(p))
		}
	}
	// Both limits: the tighter one cuts.
	for _, p := range Split(strings.Repeat("a", 50)+strings.Repeat("€", 50), 40, 60) {
		if utf8.RuneCountInString(p) > 40 || len(p) > 60 {
			t.Fatalf("part %q over a limit", p)
		}
	}
	if got := Split("€€", 0, 2); strings.Join(got, "") != "€€" || len(got) != 2 {
		t.Fatalf("a limit under one character: %q", got)
	}
}

func FuzzSplit(f *testing.F) {
	f.Add("hola qué tal\nbien", 5, 7)
	f.Add(strings.Repeat("🦜 ñ", 40), 9, 0)
	f.Add("\xff\xfe abc \xc3", 2, 3)
	f.Fuzz(func(t *testing.T, text string, runes, bytes int) {
		runes, bytes = runes%300, bytes%300
		parts := Split(text, runes, bytes)
		if strings.Join(parts, "") != text {
			t.Fatalf("the parts do not join into the text")
		}
		for _, p := range parts[:len(parts)-1] {
			if p == "" {
				t.Fatalf("Split(%q, %d, %d) = %q: an empty part", text, runes, bytes, parts)
			}
		}
		for _, p := range parts {
			if runes > 0 && utf8.RuneCountInString(p) > runes {
				t.Fatalf("part %q over %d characters", p, runes)
			}
			if bytes >= utf8.UTFMax && len(p) > bytes {
				t.Fatalf("part %q over %d bytes", p, bytes)
			}
		}
	})
}
