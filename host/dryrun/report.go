package dryrun

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

// quietLogger drops the candidate's logs: a dry run's output is its report.
var quietLogger = slog.New(slog.DiscardHandler)

// sortSends orders a record's sends by key, numbering first: a derived key's
// position is in it, and a broadcast's chats come in key order however they
// were journaled.
func sortSends(s []Send) {
	sort.SliceStable(s, func(i, j int) bool { return keyLess(s[i].Key, s[j].Key) })
}

// keyLess orders keys by their text, and keys that differ only in a numeric
// suffix after ':' by its number ("m:2" before "m:10").
func keyLess(a, b string) bool {
	ia, ib := strings.LastIndexByte(a, ':'), strings.LastIndexByte(b, ':')
	if ia >= 0 && ib >= 0 && a[:ia] == b[:ib] {
		na, ea := strconv.Atoi(a[ia+1:])
		nb, eb := strconv.Atoi(b[ib+1:])
		if ea == nil && eb == nil {
			return na < nb
		}
	}
	return a < b
}

// lines renders sends one a line: key, chat and content.
func lines(sends []Send) []string {
	out := make([]string, len(sends))
	for i, s := range sends {
		var b strings.Builder
		fmt.Fprintf(&b, "%s → %s: %q", s.Key, s.Chat, s.Text)
		if s.At != 0 {
			fmt.Fprintf(&b, " at=%s", time.UnixMilli(s.At).UTC().Format(time.RFC3339Nano))
		}
		if s.Media != nil {
			m, _ := json.Marshal(s.Media)
			fmt.Fprintf(&b, " media=%s", m)
		}
		if len(s.Buttons) > 0 {
			m, _ := json.Marshal(s.Buttons)
			fmt.Fprintf(&b, " buttons=%s", m)
		}
		if s.List != nil {
			m, _ := json.Marshal(s.List)
			fmt.Fprintf(&b, " list=%s", m)
		}
		out[i] = b.String()
	}
	return out
}

// diff is the line diff of a and b ("-" lines only in a, "+" only in b, " "
// in both), or "" when they are equal.
func diff(a, b []string) string {
	if len(a) == len(b) {
		same := true
		for i := range a {
			if a[i] != b[i] {
				same = false
				break
			}
		}
		if same {
			return ""
		}
	}
	// Longest common subsequence; a record's sends are few.
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString(" " + a[i] + "\n")
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("-" + a[i] + "\n")
			i++
		default:
			out.WriteString("+" + b[j] + "\n")
			j++
		}
	}
	return out.String()
}

// Summary counts a report's outcomes.
type Summary struct {
	Replayed  int `json:"replayed"`
	Identical int `json:"identical"`
	Changed   int `json:"changed"`
	// Conversations is how many chats have a changed record or a new fault.
	Conversations int `json:"changed_conversations"`
	// Faults counts new faults by kind.
	Faults map[string]int `json:"new_faults"`
	// CannotReplay counts the records that cannot be replayed by reason.
	CannotReplay map[string]int `json:"cannot_replay"`
}

// Summary counts the report's outcomes.
func (r *Report) Summary() Summary {
	s := Summary{Faults: map[string]int{}, CannotReplay: map[string]int{}}
	chats := map[string]bool{}
	for _, res := range r.Results {
		switch res.Outcome {
		case Identical:
			s.Identical++
		case Changed:
			s.Changed++
			chats[res.Provider+"\x00"+res.Chat] = true
		case Fault:
			s.Faults[res.Fault]++
			chats[res.Provider+"\x00"+res.Chat] = true
		case CannotReplay:
			s.CannotReplay[reasonKind(res.Reason)]++
			continue
		}
		s.Replayed++
	}
	s.Conversations = len(chats)
	return s
}

// reasonKind is the category of a cannot-replay reason: its text up to the
// first colon or parenthesis.
func reasonKind(reason string) string {
	if i := strings.IndexAny(reason, ":("); i > 0 {
		return strings.TrimSpace(reason[:i])
	}
	return reason
}

// WriteText writes the report for a person: a unified diff per changed
// conversation (records in admission order), then the summary.
func (r *Report) WriteText(w io.Writer) {
	type conv struct {
		provider, chat string
		results        []*Result
	}
	var convs []*conv
	byChat := map[string]*conv{}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Outcome != Changed && res.Outcome != Fault {
			continue
		}
		k := res.Provider + "\x00" + res.Chat
		c := byChat[k]
		if c == nil {
			c = &conv{provider: res.Provider, chat: res.Chat}
			byChat[k] = c
			convs = append(convs, c)
		}
		c.results = append(c.results, res)
	}
	for _, c := range convs {
		fmt.Fprintf(w, "--- %s/%s as sent\n+++ %s/%s with %s\n", c.provider, c.chat, c.provider, c.chat, r.Module)
		for _, res := range c.results {
			fmt.Fprintf(w, "@@ %s (%s, %s) @@\n", res.ID, res.State, time.UnixMilli(res.CreatedAt).UTC().Format(time.RFC3339))
			if res.Outcome == Fault {
				fmt.Fprintf(w, "!new fault: %s\n", oneLine(res.Reason))
				for _, l := range lines(res.Sent) {
					fmt.Fprintln(w, " "+l)
				}
				continue
			}
			io.WriteString(w, res.Diff)
		}
	}
	if r.ModuleError != "" {
		fmt.Fprintf(w, "the candidate does not load: %s\n", oneLine(r.ModuleError))
	}
	s := r.Summary()
	digest := r.Digest
	if len(digest) > 12 {
		digest = digest[:12]
	} else if digest == "" {
		digest = "-"
	}
	fmt.Fprintf(w, "replayed %d records with %s (sha256 %s) in %s: %d identical, %d changed",
		s.Replayed, r.Module, digest, r.Elapsed.Round(time.Millisecond), s.Identical, s.Changed)
	faults := 0
	for _, n := range s.Faults {
		faults += n
	}
	fmt.Fprintf(w, ", %d new faults%s", faults, counts(s.Faults))
	if s.Conversations > 0 {
		fmt.Fprintf(w, " in %d conversations", s.Conversations)
	}
	fmt.Fprintln(w)
	if len(s.CannotReplay) > 0 {
		n := 0
		for _, c := range s.CannotReplay {
			n += c
		}
		fmt.Fprintf(w, "cannot replay %d records%s\n", n, counts(s.CannotReplay))
		shown := 0
		for _, res := range r.Results {
			if res.Outcome == CannotReplay && shown < 5 {
				fmt.Fprintf(w, "  %s: %s\n", res.ID, oneLine(res.Reason))
				shown++
			}
		}
		if n > shown {
			fmt.Fprintf(w, "  … and %d more (--json lists them all)\n", n-shown)
		}
	}
}

// counts renders " (k1 n1, k2 n2)" in key order, or "".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// WriteJSON writes one JSON object per record, one a line.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for i := range r.Results {
		if err := enc.Encode(&r.Results[i]); err != nil {
			return err
		}
	}
	return nil
}
