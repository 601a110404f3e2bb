package convtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// render is a reply as a test writes it, in a step whose chat is chat:
// its line, and its indented line when it has buttons, a list or media.
func (r Reply) render(chat string) []string {
	head := "<"
	if r.Edit {
		head += "~"
	}
	if r.Chat != chat {
		name := r.Chat
		if strings.ContainsAny(name, " \t\"\\") || !utf8.ValidString(name) {
			name = strconv.Quote(name)
		}
		head += "@" + name
	}
	out := []string{head + " " + escape(r.Text)}
	if r.Text == "" {
		out[0] = head
	}
	if r.Extra != "" {
		out = append(out, "  "+r.Extra)
	}
	return out
}

func (r Reply) equal(o Reply) bool {
	return r.Chat == o.Chat && r.Text == o.Text && r.Edit == o.Edit && r.Extra == o.Extra
}

// compare checks got against want after step st; what names what got is
// ("after this step the bot").
func compare(file string, st Step, want, got []Reply, what string) *Failure {
	same := len(want) == len(got)
	for i := 0; same && i < len(want); i++ {
		same = want[i].equal(got[i])
	}
	if same {
		return nil
	}
	line := st.Line
	msg := fmt.Sprintf("%s sent %d replies, want %d", what, len(got), len(want))
	for i := range min(len(want), len(got)) {
		if !want[i].equal(got[i]) {
			if want[i].Line > 0 {
				line = want[i].Line
			}
			msg = fmt.Sprintf("reply %d differs", i+1)
			break
		}
	}
	return &Failure{File: file, Line: line, Message: msg, Diff: diff(st.Chat, want, got)}
}

// diff shows want and got side by side, line by line: "  " where they agree,
// "- " for what the test expects and "+ " for what the bot did.
func diff(chat string, want, got []Reply) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		switch {
		case i < len(want) && i < len(got) && want[i].equal(got[i]):
			for _, l := range want[i].render(chat) {
				b.WriteString("    " + l + "\n")
			}
			continue
		}
		var w, g []string
		if i < len(want) {
			w = want[i].render(chat)
		}
		if i < len(got) {
			g = got[i].render(chat)
		}
		if slices.Equal(w, g) {
			// They print alike (bytes that are not UTF-8, a chat's name):
			// show them quoted, where they differ.
			w = []string{fmt.Sprintf("%q in chat %q", want[i].Text, want[i].Chat)}
			g = []string{fmt.Sprintf("%q in chat %q", got[i].Text, got[i].Chat)}
		}
		for _, l := range w {
			b.WriteString("  - " + l + "\n")
		}
		for _, l := range g {
			b.WriteString("  + " + l + "\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// rewrite writes the file with each step's expected replies replaced by the
// ones the bot made (runs[i] for step i) and each ":state" line by the value
// the bot left; every other line stays where it was.
func (s *Script) rewrite(runs []stepRun) error {
	drop := map[int]bool{}
	insert := map[int][]string{}
	states := map[int]string{}
	eol := ""
	if s.crlf {
		eol = "\r"
	}
	for i, st := range s.Steps {
		for _, j := range st.replies {
			drop[j] = true
		}
		at := st.first
		if len(st.replies) > 0 {
			at = st.replies[0] // where the old replies began
		}
		for _, r := range runs[i].replies {
			for _, l := range r.render(st.Chat) {
				insert[at] = append(insert[at], l+eol)
			}
		}
		for _, w := range st.States {
			states[w.Line-1] = runs[i].states[w.Line].line() + eol
		}
	}
	var out []string
	for j := 0; j <= len(s.lines); j++ {
		out = append(out, insert[j]...)
		switch {
		case j == len(s.lines), drop[j]:
		case states[j] != "":
			out = append(out, states[j])
		default:
			out = append(out, s.lines[j])
		}
	}
	text := strings.Join(out, "\n")
	if !s.noFinalNewline {
		text += "\n"
	}
	info, err := os.Stat(s.Path)
	if err != nil {
		return fmt.Errorf("update %s: %w", s.Path, err)
	}
	if err := os.WriteFile(s.Path, []byte(text), info.Mode().Perm()); err != nil {
		return fmt.Errorf("update %s: %w", s.Path, err)
	}
	return nil
}

// line is w as a test writes it.
func (w StateWant) line() string {
	if w.Absent {
		return ":state " + w.Key
	}
	return ":state " + w.Key + " " + escape(w.Value)
}
