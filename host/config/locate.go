package config

import (
	"fmt"
	"strings"
)

// locate maps each key of a TOML document to the line it is on. Keys under an
// array of tables appear twice: with the index ("providers[1].type") and
// without it ("providers.type", first occurrence). Table headers map to their
// own line. It is a line scanner, not a parser: good enough to point at the
// line of an error in the files people write.
func locate(src string) map[string]int {
	lines := map[string]int{}
	set := func(k string, l int) {
		if _, ok := lines[k]; !ok {
			lines[k] = l
		}
	}
	arrays := map[string]int{}
	prefix, plain := "", ""
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		t := strings.TrimSpace(line)
		switch {
		case t == "" || t[0] == '#':
		case strings.HasPrefix(t, "[["):
			name := unquote(strings.TrimSpace(strings.Trim(strings.SplitN(t, "]]", 2)[0], "[")))
			idx := arrays[name]
			arrays[name]++
			prefix, plain = fmt.Sprintf("%s[%d]", name, idx), name
			set(prefix, n)
			set(plain, n)
		case t[0] == '[':
			name := unquote(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(t, "]", 2)[0], "[")))
			prefix, plain = name, name
			set(name, n)
		default:
			eq := strings.IndexByte(t, '=')
			if eq <= 0 {
				continue
			}
			key := unquote(strings.TrimSpace(t[:eq]))
			join := func(p string) string {
				if p == "" {
					return key
				}
				return p + "." + key
			}
			set(join(prefix), n)
			set(join(plain), n)
		}
	}
	return lines
}

func unquote(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}
