package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
)

// The docs live in README.md (one page: what botrun is, the first commands,
// where to go next) and docs/ (one page per topic, one per channel type).
// These tests keep them so: a registered channel type without its page, a
// README past a page, a docs page the README does not link, or a relative
// link that leads nowhere fails.

const (
	repoRoot       = "../.."
	readmeMaxLines = 300
)

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsChannelPages: every channel type this program registers has its
// page docs/channels/<type>.md, headed with its type, and the channels'
// index links it; every backend has a row in durability.md's table.
func TestDocsChannelPages(t *testing.T) {
	index := readDoc(t, "docs/channels/README.md")
	for _, typ := range channel.Types() {
		page := "docs/channels/" + typ + ".md"
		b, err := os.ReadFile(filepath.Join(repoRoot, page))
		if err != nil {
			t.Errorf("channel type %q has no page: write %s (docs/adding-a-channel.md says what goes in it)", typ, page)
			continue
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if !strings.HasPrefix(first, "# ") || !strings.Contains(first, "`type = \""+typ+"\"`") {
			t.Errorf("%s: the first line should be a title naming (`type = %q`), not %q", page, typ, first)
		}
		if !strings.Contains(index, "]("+typ+".md)") {
			t.Errorf("docs/channels/README.md does not link %s.md", typ)
		}
	}
	durabilityMD := readDoc(t, "docs/durability.md")
	for _, name := range durability.Drivers() {
		if !strings.Contains(durabilityMD, "| `"+name+"`") {
			t.Errorf("docs/durability.md's backends table has no row for %q", name)
		}
	}
	if len(channel.Types()) < 5 || len(durability.Drivers()) < 5 {
		t.Errorf("cmd/botrun registers %v and %v; the built-in set is larger", channel.Types(), durability.Drivers())
	}
}

// TestDocsChannelTable: docs/channels/README.md's at-a-glance table has a
// row for every registered channel type, naming it as (`type`), with a
// cell for each of its columns.
func TestDocsChannelTable(t *testing.T) {
	md := readDoc(t, "docs/channels/README.md")
	const header = "| channel (type) | inbound verification | dedupe id | media ref | text limit | buttons | edits | typing |"
	start := strings.Index(md, header)
	if start < 0 {
		t.Fatalf("docs/channels/README.md has no table headed %s", header)
	}
	rows := map[string]int{}
	for _, line := range strings.Split(md[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		name := cells[0]
		if i, j := strings.Index(name, "(`"), strings.Index(name, "`)"); i >= 0 && j > i {
			rows[name[i+2:j]] = len(cells)
		}
	}
	for _, typ := range channel.Types() {
		switch n, ok := rows[typ]; {
		case !ok:
			t.Errorf("the channel table has no row for type %q (a first cell with (`%s`))", typ, typ)
		case n != 8:
			t.Errorf("the channel table's row for %q has %d cells, want 8", typ, n)
		}
	}
}

// TestDocsREADME: README.md fits on a page and links every page of docs/;
// docs/README.md, the index, links every page under docs/.
func TestDocsREADME(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, at most %d: move the details to a page of docs/ and link it", n, readmeMaxLines)
	}
	index := readDoc(t, "docs/README.md")
	for _, page := range docPages(t) {
		rel, _ := filepath.Rel("docs", page)
		if filepath.Dir(rel) == "." && !strings.Contains(readme, "]("+filepath.ToSlash(page)+")") && !strings.Contains(readme, "]("+filepath.ToSlash(page)+"#") {
			t.Errorf("README.md does not link %s (its \"Where to go next\" list links every page of docs/)", page)
		}
		if rel != "README.md" && !strings.Contains(index, "]("+filepath.ToSlash(rel)+")") {
			t.Errorf("docs/README.md does not link %s", rel)
		}
	}
	// The docs say what is true now; how it came to be is git's.
	history := regexp.MustCompile(`(?i)\b(until|before|since|after) issue \d+|\bthis session\b|\(was [^)]*\)`)
	for _, page := range append([]string{"README.md"}, docPages(t)...) {
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			if m := history.FindString(line); m != "" {
				t.Errorf("%s:%d: %q is change history: state what is true now", page, i+1, m)
			}
		}
	}
}

// TestDocsLinks: every relative link in README.md and docs/ leads to a file
// of the repository, and every #fragment to a heading of its page.
func TestDocsLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range append([]string{"README.md"}, docPages(t)...) {
		md := readDoc(t, page)
		for i, line := range strings.Split(stripCode(md), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(filepath.Join(repoRoot, path)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", page, i+1, target, path)
					continue
				}
				if frag == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if !anchors(readDoc(t, path))[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", page, i+1, target, path, frag)
				}
			}
		}
	}
}

// docPages lists the Markdown pages under docs/, relative to the root.
func docPages(t *testing.T) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			pages = append(pages, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// stripCode blanks fenced code blocks and inline code (keeping the lines),
// where brackets are not links.
func stripCode(md string) string {
	lines := strings.Split(md, "\n")
	fenced := false
	inline := regexp.MustCompile("`[^`]*`")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
			continue
		}
		lines[i] = inline.ReplaceAllString(l, "``")
	}
	return strings.Join(lines, "\n")
}

// anchors returns the fragments GitHub gives md's headings: lowercased,
// punctuation dropped, spaces as hyphens, a repeated one suffixed -1, -2, ….
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
