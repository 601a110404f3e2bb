package convtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/unit"
)

// Script is one conversation test file, parsed.
type Script struct {
	// Path is the file's path; lines its lines (for -update).
	Path  string
	lines []string
	Steps []Step
	// crlf and noFinalNewline are how the file ends its lines, for
	// -update to write it back alike.
	crlf, noFinalNewline bool
}

// StepKind is what a step does to the bot.
type StepKind int

// Step kinds.
const (
	// Say is a message from the user ("> text").
	Say StepKind = iota
	// Press is the press of a button or list row ("> [Title]").
	Press
	// Advance moves the test's clock (":advance 2h").
	Advance
)

// Step is one input of a conversation and what the bot must do after it.
type Step struct {
	Line int
	Kind StepKind
	// Chat and From are the chat and the sender the input comes from.
	Chat, From string
	// Text is the message's text, or the pressed title.
	Text string
	// MediaType and MediaRef are the message's attachment ("> (image
	// cat.png) look"): its type and its file, relative to the test.
	MediaType, MediaRef string
	// By is the time Advance moves the clock.
	By time.Duration
	// Stubs are the API answers in force for this step's calls, the latest
	// first.
	Stubs []Stub
	// Want are the replies expected after it, in order; States the state
	// values expected once it settled.
	Want   []Reply
	States []StateWant
	// first and end are the lines (0-based, end exclusive) after the
	// input that hold its expected replies, for -update.
	first, end int
	// replies are the lines (0-based) of its expected replies and their
	// indented lines: what -update replaces.
	replies []int
}

// Reply is one thing the bot did in a chat, as a test writes it.
type Reply struct {
	Line int
	// Chat is the chat it went to.
	Chat string
	// Text is the reply's text (its caption for media); Edit marks an edit
	// of an earlier message to Text.
	Text string
	Edit bool
	// Extra is the indented line under it: its buttons, list or media
	// ("[Yes] [No]", "{Menu: a | b}", "(image https://…)"), "" for none.
	Extra string
}

// StateWant is a ":state KEY VALUE" line: the chat's state KEY holds VALUE
// (":state KEY" alone: it holds nothing).
type StateWant struct {
	Line       int
	Chat, From string
	Key, Value string
	Absent     bool
}

// Stub is an ":api NAME METHOD PATH STATUS [BODY]" line: the bot's calls to
// API NAME with METHOD and PATH (its query included) answer STATUS and BODY.
type Stub struct {
	Line         int
	API          string
	Method, Path string
	Status       int
	Body         string
}

// maxAdvance is the most one :advance moves the clock.
const maxAdvance = 100 * 365 * 24 * time.Hour

// Default chat and sender of a conversation.
const (
	DefaultChat = "chat"
	DefaultFrom = "user"
)

// ParseFile reads and parses the conversation test at path.
func ParseFile(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("convtest: %w", err)
	}
	return Parse(path, string(b))
}

// Parse parses a conversation test; path names it in errors.
func Parse(path, src string) (*Script, error) {
	src = strings.TrimPrefix(src, "\ufeff") // a byte order mark some editors write
	s := &Script{Path: path, lines: strings.Split(strings.TrimSuffix(src, "\n"), "\n"),
		crlf: strings.Contains(src, "\r\n"), noFinalNewline: !strings.HasSuffix(src, "\n")}
	chat, from := DefaultChat, DefaultFrom
	var stubs []Stub
	var cur *Step
	bad := func(i int, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", path, i+1, fmt.Sprintf(format, a...))
	}
	for i, raw := range s.lines {
		line := strings.TrimRight(raw, "\r")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			continue
		case strings.HasPrefix(line, "> ") || line == ">":
			// Trailing blanks are not part of a message ("\s" writes one).
			raw := strings.TrimRight(strings.TrimPrefix(strings.TrimPrefix(line, ">"), " "), " \t")
			text := unescape(raw)
			st := Step{Line: i + 1, Kind: Say, Chat: chat, From: from, Text: text, Stubs: stubs, first: i + 1, end: i + 1}
			if t, ok := pressed(raw); ok {
				st.Kind, st.Text = Press, unescape(t)
			} else if typ, ref, caption, ok := attachment(raw); ok {
				if ref == "" {
					return nil, bad(i, "an attachment is \"> (%s FILE) caption\", e.g. \"> (image cat.png) look\" (FILE relative to the test)", typ)
				}
				st.MediaType, st.MediaRef, st.Text = typ, ref, unescape(caption)
			}
			s.Steps = append(s.Steps, st)
			cur = &s.Steps[len(s.Steps)-1]
		case strings.HasPrefix(line, "<"):
			if cur == nil {
				return nil, bad(i, "a reply before any message: write the user's message first (\"> hello\")")
			}
			r, err := parseReply(line, chat)
			if err != nil {
				return nil, bad(i, "%v", err)
			}
			r.Line = i + 1
			cur.Want = append(cur.Want, r)
			cur.end = i + 1
			cur.replies = append(cur.replies, i)
		case line[0] == ' ' || line[0] == '\t':
			if cur == nil || len(cur.Want) == 0 || cur.end != i {
				return nil, bad(i, "an indented line belongs right under a reply (\"< text\"): it holds that reply's buttons, list or media")
			}
			cur.Want[len(cur.Want)-1].Extra = trimmed
			cur.end = i + 1
			cur.replies = append(cur.replies, i)
		case strings.HasPrefix(line, ":"):
			word, rest, _ := strings.Cut(strings.TrimPrefix(trimmed, ":"), " ")
			rest = strings.TrimSpace(rest)
			switch word {
			case "chat":
				if rest == "" {
					return nil, bad(i, ":chat needs a name (\":chat alice\")")
				}
				chat = rest
			case "from":
				if rest == "" {
					return nil, bad(i, ":from needs a name (\":from bob\")")
				}
				from = rest
			case "advance":
				d, err := unit.ParseDuration(rest)
				switch {
				case err != nil:
					return nil, bad(i, ":advance needs a duration (\":advance 2h\", \":advance 90s\"): %v", err)
				case d <= 0:
					return nil, bad(i, ":advance needs a positive duration (\":advance 2h\", \":advance 90s\"), not %q", rest)
				case d > maxAdvance:
					return nil, bad(i, ":advance %s is more than %d years: a test's clock moves at most that far in one step", rest, maxAdvance/(365*24*time.Hour))
				}
				s.Steps = append(s.Steps, Step{Line: i + 1, Kind: Advance, Chat: chat, From: from, By: d, Stubs: stubs, first: i + 1, end: i + 1})
				cur = &s.Steps[len(s.Steps)-1]
			case "api":
				st, err := parseStub(rest)
				if err != nil {
					return nil, bad(i, "%v", err)
				}
				st.Line = i + 1
				stubs = append([]Stub{st}, stubs...)
			case "state":
				if cur == nil {
					return nil, bad(i, ":state checks the state after a step: write a message first")
				}
				key, value, has := strings.Cut(rest, " ")
				if key == "" {
					return nil, bad(i, ":state needs a key (\":state count 3\"; \":state count\" alone expects none)")
				}
				cur.States = append(cur.States, StateWant{Line: i + 1, Chat: chat, From: from, Key: key, Value: unescape(value), Absent: !has})
			default:
				return nil, bad(i, "unknown directive :%s (known: :chat, :from, :advance, :api, :state)", word)
			}
		default:
			return nil, bad(i, "a line must start with \"> \" (a message), \"< \" (a reply), \":\" (a directive) or \"#\" (a comment); got %q", short(line))
		}
	}
	if len(s.Steps) == 0 {
		return nil, fmt.Errorf("%s: no step: a test needs at least one message (\"> hello\") and the replies expected after it (\"< …\")", path)
	}
	return s, nil
}

// attachment reads "(TYPE FILE) caption", TYPE one of the ABI's media
// types (any other text in parentheses is a message; "\(" writes one
// that starts with a media type).
func attachment(text string) (typ, ref, caption string, ok bool) {
	if !strings.HasPrefix(text, "(") {
		return "", "", "", false
	}
	head, rest, closed := strings.Cut(text[1:], ")")
	typ, ref, _ = strings.Cut(head, " ")
	if !slices.Contains(abi.MediaTypes, typ) {
		return "", "", "", false
	}
	if !closed {
		return typ, "", "", true
	}
	return typ, strings.TrimSpace(ref), strings.TrimPrefix(rest, " "), true
}

// pressed reports whether a message's text is a press: "[Title]" ("\["
// writes a message that starts with a bracket).
func pressed(text string) (string, bool) {
	if len(text) > 2 && text[0] == '[' && text[len(text)-1] == ']' && !strings.ContainsAny(text[1:len(text)-1], "[]") {
		return text[1 : len(text)-1], true
	}
	return "", false
}

// parseReply reads "< text", "<@chat text", "<~ text" (an edit) and
// "<~@chat text".
func parseReply(line, chat string) (Reply, error) {
	rest := strings.TrimPrefix(line, "<")
	r := Reply{Chat: chat}
	if strings.HasPrefix(rest, "~") {
		r.Edit, rest = true, rest[1:]
	}
	if strings.HasPrefix(rest, "@") {
		name, text, _ := strings.Cut(rest[1:], " ")
		if strings.HasPrefix(rest[1:], `"`) {
			// A quoted name: "<@\"a b\" hello".
			q, err := strconv.QuotedPrefix(rest[1:])
			if err != nil {
				return r, fmt.Errorf("\"<@\" with a quoted chat name needs its closing quote: %v", err)
			}
			name, _ = strconv.Unquote(q)
			text = strings.TrimPrefix(rest[1+len(q):], " ")
		}
		if name == "" {
			return r, fmt.Errorf("\"<@\" needs the chat's name (\"<@alice hello\")")
		}
		r.Chat, rest = name, " "+text
	}
	switch {
	case rest == "":
	case rest[0] == ' ':
		rest = rest[1:]
	default:
		return r, fmt.Errorf("a reply is \"< text\" (a space after \"<\"), got %q", short(line))
	}
	r.Text = unescape(rest)
	return r, nil
}

// parseStub reads "NAME METHOD PATH STATUS [BODY]".
func parseStub(s string) (Stub, error) {
	f := strings.Fields(s)
	if len(f) > 4 {
		// The body is the rest of the line, as written.
		rest := s
		for range 4 {
			rest = strings.TrimLeft(rest, " \t")
			rest = rest[strings.IndexAny(rest+" ", " \t"):]
		}
		f = append(f[:4], strings.TrimLeft(rest, " \t"))
	}
	if len(f) < 4 {
		return Stub{}, fmt.Errorf(":api needs NAME METHOD PATH STATUS [BODY] (\":api orders GET /orders/42 200 {\\\"status\\\":\\\"shipped\\\"}\"), got %q", s)
	}
	if !config.ValidAPIName(f[0]) {
		return Stub{}, fmt.Errorf(":api: %q is not an API name: want 1 to 63 lower-case letters, digits, _ and -, as [[apis]] name", f[0])
	}
	status, err := strconv.Atoi(f[3])
	if err != nil || status < 100 || status > 599 {
		return Stub{}, fmt.Errorf(":api: the status must be an HTTP status (100-599), not %q", f[3])
	}
	if !strings.HasPrefix(f[2], "/") {
		return Stub{}, fmt.Errorf(":api: the path must start with \"/\", not %q", f[2])
	}
	st := Stub{API: f[0], Method: strings.ToUpper(f[1]), Path: f[2], Status: status}
	if len(f) == 5 {
		st.Body = unescape(f[4])
	}
	return st, nil
}

// unescape reads a test's text: "\n" is a newline, "\r" a carriage
// return, "\t" a tab, "\s" a space (one at the end of a message), "\\" a
// backslash, and "\[" and "\(" a bracket and a parenthesis (a message
// that starts with one is then not a press or an attachment).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 'r':
				b.WriteByte('\r')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case 's':
				b.WriteByte(' ')
				i++
				continue
			case '[', '(':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// escape writes text as a test's line holds it.
func escape(s string) string {
	s = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	if strings.HasSuffix(s, " ") {
		s = s[:len(s)-1] + `\s` // a trailing blank stays visible, and is read back
	}
	return s
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
