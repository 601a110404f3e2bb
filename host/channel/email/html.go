package email

import (
	"strings"

	"golang.org/x/net/html"
)

// htmlToText renders an HTML body as plain text with a tokenizer (no regular
// expressions, no tree: linear in the input): text is kept, blocks and <br>
// become line breaks, <script>, <style> and <head> are dropped, and
// <blockquote> (quoted history) is dropped with what it holds. A <head> need
// not be closed: <body>, or any block of the body, ends it.
func htmlToText(src string) string {
	z := html.NewTokenizer(strings.NewReader(src))
	z.SetMaxBuf(MaxMessageBytes)
	var b strings.Builder
	skip := 0 // depth inside elements whose text is dropped
	head := 0 // depth inside <head> and <title>, which the body ends
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return collapse(b.String())
		case html.TextToken:
			if skip == 0 && head == 0 {
				b.Write(z.Text())
			}
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "head", "title":
				if tt == html.StartTagToken {
					head++
				} else if tt == html.EndTagToken && head > 0 {
					head--
				}
			case "body":
				if tt == html.StartTagToken {
					head = 0
				}
			case "script", "style", "blockquote":
				if tt == html.StartTagToken {
					skip++
				} else if tt == html.EndTagToken && skip > 0 {
					skip--
				}
			case "br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "hr":
				if tt != html.EndTagToken {
					head = 0 // content of the body
				}
				if skip == 0 {
					b.WriteByte('\n')
				}
			}
		}
	}
}

// collapse trims each line and squeezes runs of blank lines and spaces.
func collapse(s string) string {
	var out []string
	blank := false
	for _, l := range strings.Split(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			if !blank && len(out) > 0 {
				out = append(out, "")
			}
			blank = true
			continue
		}
		blank = false
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
