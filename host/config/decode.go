package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Parse is Load for a file already read; lookup resolves ${VAR}.
//
// Every problem in the file is reported in one run, each once: a value that
// does not fit its key (a word where a number goes, a bad duration) is
// reported, taken out, and the file decoded again without it, so the keys
// around it are not reported unknown; an unknown key is reported with the
// known key it is closest to.
func Parse(path, src string, lookup func(string) (string, bool)) (*Config, error) {
	return parse(path, src, lookup, nil)
}

// LoadBackend is Load for the commands that work on the journals from
// outside the bot (inbox list, outbox list, log, status, replay, send, …):
// only the problems of the keys that say where the journals are (the bot's
// scope and [durability]) stop it. A channel's secret that is not in this
// shell's environment, or any other key the bot itself needs, does not.
func LoadBackend(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, string(src), os.LookupEnv, backendKey)
}

// backendKey reports whether an error at key stops LoadBackend.
func backendKey(key string) bool {
	switch {
	case key == "", key == "providers", strings.HasPrefix(key, "durability"):
		return true
	}
	return slices.Contains([]string{"bot.id", "bot.tenant", "bot.environment", "bot.connection", "bot.data_dir"}, key)
}

// parse is Parse; with keep, only the errors at the keys keep accepts stop
// it (the config comes back with the others dropped).
func parse(path, src string, lookup func(string) (string, bool), keep func(key string) bool) (*Config, error) {
	lines := locate(src)
	var tree map[string]any
	if _, err := toml.Decode(src, &tree); err != nil {
		// Not TOML: nothing past the error can be read.
		p := &parser{file: path, lines: lines}
		return nil, Errors{p.decodeError(err)}
	}
	var bad Errors
	cur := src
	for {
		p := &parser{file: path, lines: lines, section: "channels", tree: tree}
		cfg, failed := p.parseOnce(cur, lookup)
		if failed == nil {
			errs := oneMistake(bad, p.errs)
			if keep != nil {
				errs = slices.DeleteFunc(errs, func(e *Error) bool { return !keep(e.Key) })
			}
			if len(errs) > 0 {
				slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
				return nil, errs
			}
			return cfg, nil
		}
		failed.err.Msg = failed.words(tree)
		bad = append(bad, failed.err)
		if !prune(tree, failed.path) || len(bad) > 100 {
			slices.SortStableFunc(bad, func(a, b *Error) int { return a.Line - b.Line })
			return nil, bad
		}
		b, err := toml.Marshal(tree)
		if err != nil {
			return nil, append(bad, &Error{File: path, Msg: fmt.Sprintf("re-reading the file without the values above: %v", err)})
		}
		cur = string(b)
	}
}

// oneMistake drops a "missing" error for a key that an unknown key near it
// was meant to be ("tokn": did you mean token?), or whose ${VAR} is not
// set: the typo, or the variable, is the mistake.
func oneMistake(bad, found Errors) Errors {
	valued := map[string]bool{}
	for _, e := range bad {
		valued[e.Key] = true // a value that did not fit: the key is not missing
	}
	meant := map[string]bool{}
	unset := map[string]bool{}
	for _, e := range found {
		if strings.HasPrefix(e.Msg, "environment variable ") {
			unset[e.Key] = true
		}
		if _, name, ok := strings.Cut(e.Msg, "did you mean "); ok && strings.HasPrefix(e.Msg, "unknown key") {
			parent := ""
			if i := strings.LastIndexByte(e.Key, '.'); i >= 0 {
				parent = e.Key[:i+1]
			}
			meant[parent+strings.TrimSuffix(strings.Fields(name)[0], "?")] = true
		}
	}
	out := append(Errors{}, bad...)
	for _, e := range found {
		switch {
		case valued[e.Key]:
			// Its value was reported; what its absence breaks is not.
		case meant[e.Key] && strings.HasPrefix(e.Msg, "missing"):
		case unset[e.Key] && !strings.HasPrefix(e.Msg, "environment variable "):
			// The variable is the mistake; what its empty value breaks is not.
		default:
			out = append(out, e)
		}
	}
	return out
}

// valueError is a value that did not decode into its key's type, at path
// ("bot.workers", "channels[1].rate_limit").
type valueError struct {
	path string
	err  *Error
	// raw is the decoder's message.
	raw string
}

var (
	lastKey   = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)
	fromTo    = regexp.MustCompile(`TOML value has type (\S+); destination has type (\w+)`)
	arrayHead = regexp.MustCompile(`^\s*\[\[\s*([A-Za-z0-9_."-]+)\s*\]\]`)
)

// valueFailed turns a decode error into the value that caused it. entry,
// for an error decoding one [[array]] entry ("channels[1]"), is that entry:
// the decoder's line for it is not the entry's.
func (p *parser) valueFailed(err error, entry ...string) *valueError {
	m := lastKey.FindStringSubmatch(err.Error())
	if m == nil {
		e := p.decodeError(err)
		return &valueError{path: e.Key, err: e, raw: e.Msg}
	}
	line, _ := strconv.Atoi(m[1])
	path := p.indexed(m[2], line)
	if len(entry) == 1 {
		name, _, _ := strings.Cut(entry[0], "[")
		path = entry[0] + strings.TrimPrefix(m[2], name)
	}
	return &valueError{path: path, raw: m[3], err: &Error{File: p.file, Line: p.line(path), Key: path}}
}

// indexed is key ("channels.token", as the decoder names it) with the
// index of the [[array]] entry it is in at line of the text being decoded
// ("channels[1].token").
func (p *parser) indexed(key string, line int) string {
	count := map[string]int{}
	current := ""
	for i, l := range strings.Split(p.src, "\n") {
		if i+1 > line {
			break
		}
		if m := arrayHead.FindStringSubmatch(l); m != nil {
			name := unquote(m[1])
			count[name]++
			current = name
		} else if t := strings.TrimSpace(l); strings.HasPrefix(t, "[") {
			// A table inside the entry ([apis.headers]) keeps it.
			name := unquote(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(t, "]", 2)[0], "[")))
			if current == "" || !strings.HasPrefix(name, current+".") {
				current = ""
			}
		}
	}
	if current != "" && strings.HasPrefix(key, current+".") {
		return fmt.Sprintf("%s[%d]%s", current, count[current]-1, strings.TrimPrefix(key, current))
	}
	return key
}

// words says what is wrong with the value, in words: what the key wants
// and what the file has.
func (v *valueError) words(tree map[string]any) string {
	m := fromTo.FindStringSubmatch(v.raw)
	if m == nil {
		return v.raw
	}
	want := kindWords(m[2])
	got, ok := lookupPath(tree, v.path)
	if _, isTable := got.(map[string]any); isTable && slices.Contains(arrays, v.path) {
		return fmt.Sprintf("[%s] is one table: write [[%s]] (two brackets) above each entry", v.path, v.path)
	}
	if !ok {
		return "want " + want
	}
	return fmt.Sprintf("want %s, not %s", want, showValue(got))
}

// kindWords names a Go or TOML type as a user writes its values.
func kindWords(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), t == "integer":
		return "a whole number (e.g. 8)"
	case strings.HasPrefix(t, "float"):
		return "a number (e.g. 0.5)"
	case t == "string":
		return `text in quotes (e.g. "abc")`
	case t == "bool":
		return "true or false"
	case t == "slice", t == "array":
		return `a list (e.g. ["a", "b"])`
	case t == "map", t == "struct":
		return "a table (e.g. { key = \"value\" })"
	}
	return "a " + t
}

// showValue is a value as the file wrote it.
func showValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the text %q", x)
	case bool:
		return fmt.Sprintf("%v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%v", v)
}

var pathPart = regexp.MustCompile(`^([^\[]+)(?:\[(\d+)\])?$`)

// walk follows path through tree to the table that holds its last key,
// and returns that table and the key.
func walk(tree map[string]any, path string) (map[string]any, string, bool) {
	parts := strings.Split(path, ".")
	cur := tree
	for i, part := range parts {
		m := pathPart.FindStringSubmatch(part)
		if m == nil {
			return nil, "", false
		}
		if i == len(parts)-1 && m[2] == "" {
			return cur, m[1], true
		}
		next, ok := cur[m[1]]
		if !ok {
			return nil, "", false
		}
		if m[2] != "" {
			idx, _ := strconv.Atoi(m[2])
			list, ok := next.([]map[string]any)
			if !ok {
				if anys, isAny := next.([]any); isAny && idx < len(anys) {
					if t, isTable := anys[idx].(map[string]any); isTable {
						cur = t
						continue
					}
				}
				return nil, "", false
			}
			if idx >= len(list) {
				return nil, "", false
			}
			next = list[idx]
		}
		t, ok := next.(map[string]any)
		if !ok {
			return nil, "", false
		}
		cur = t
	}
	return nil, "", false
}

func lookupPath(tree map[string]any, path string) (any, bool) {
	t, key, ok := walk(tree, path)
	if !ok {
		return nil, false
	}
	v, ok := t[key]
	return v, ok
}

// prune takes path out of tree; false when it is not there.
func prune(tree map[string]any, path string) bool {
	t, key, ok := walk(tree, path)
	if !ok {
		return false
	}
	if _, ok := t[key]; !ok {
		return false
	}
	delete(t, key)
	return true
}

// arrays are the file's arrays of tables.
var arrays = []string{"channels", "providers", "apis"}

// unknownKeys reports the keys nothing decoded, each at its entry
// ("channels[2].tokn"), with the known key it is closest to.
func (p *parser) unknownKeys(md toml.MetaData, c *Config) {
	tree := p.tree
	seen := map[string]bool{}
	unknown := map[string]bool{}
	for _, k := range md.Undecoded() {
		unknown[k.String()] = true
	}
	for _, k := range md.Undecoded() {
		if underUnknown(k, unknown) {
			continue // its table is unknown: that is the one mistake
		}
		for _, path := range p.entries(tree, k) {
			if seen[path] || p.skipped(path) {
				continue
			}
			seen[path] = true
			parent, name := "", path
			if i := strings.LastIndexByte(path, '.'); i >= 0 {
				parent, name = path[:i], path[i+1:]
			}
			p.add(path, "unknown key%s (bot.toml.example lists every key)", didYouMean(name, p.known(parent, c)))
		}
	}
}

// underUnknown reports whether a table k is in is itself unknown.
func underUnknown(k toml.Key, unknown map[string]bool) bool {
	for i := 1; i < len(k); i++ {
		if unknown[k[:i].String()] {
			return true
		}
	}
	return false
}

// entries are the paths of key in tree: with the index of each [[array]]
// entry that has it.
func (p *parser) entries(tree map[string]any, k toml.Key) []string {
	if len(k) > 1 && slices.Contains(arrays, k[0]) {
		var out []string
		list, _ := tree[k[0]].([]map[string]any)
		for i := range list {
			path := fmt.Sprintf("%s[%d].%s", k[0], i, strings.Join(k[1:], "."))
			if _, ok := lookupPath(tree, path); ok {
				out = append(out, path)
			}
		}
		return out
	}
	return []string{k.String()}
}

func (p *parser) skipped(path string) bool {
	for _, s := range p.skip {
		if path == s || strings.HasPrefix(path, s+".") {
			return true
		}
	}
	return false
}

// known are the keys the table at parent takes.
func (p *parser) known(parent string, c *Config) []string {
	parts := strings.Split(parent, ".")
	if parent == "" {
		return append(keysOf(reflect.TypeOf(Config{})), "channels", "providers")
	}
	m := pathPart.FindStringSubmatch(parts[0])
	if m == nil {
		return nil
	}
	var types []reflect.Type
	switch m[1] {
	case "channels", "providers":
		types = append(types, reflect.TypeOf(Channel{}))
		if idx, err := strconv.Atoi(m[2]); err == nil && p.settings[idx] != nil {
			types = append(types, reflect.TypeOf(p.settings[idx]))
		}
	case "durability":
		types = append(types, reflect.TypeOf(Durability{}))
		if c.Durability.Options != nil {
			types = append(types, reflect.TypeOf(c.Durability.Options))
		}
	default:
		f, ok := fieldByTag(reflect.TypeOf(Config{}), m[1])
		if !ok {
			return nil
		}
		types = append(types, f)
	}
	var out []string
	for _, t := range types {
		for _, part := range parts[1:] {
			f, ok := fieldByTag(t, part)
			if !ok {
				t = nil
				break
			}
			t = f
		}
		if t != nil {
			out = append(out, keysOf(t)...)
		}
	}
	return out
}

// elem is t without pointers and slices.
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

// keysOf are the keys a struct takes: its fields' toml names.
func keysOf(t reflect.Type) []string {
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, keysOf(f.Type)...)
			continue
		}
		if name := tomlName(f); name != "" {
			out = append(out, name)
		}
	}
	return out
}

func fieldByTag(t reflect.Type, name string) (reflect.Type, bool) {
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			if ft, ok := fieldByTag(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tomlName(f) == name {
			return f.Type, true
		}
	}
	return nil, false
}

func tomlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	switch tag {
	case "-":
		return ""
	case "":
		return strings.ToLower(f.Name)
	}
	return tag
}

// didYouMean is ": did you mean X?" for the known name closest to name, if
// one is close enough to be a typo of it.
func didYouMean(name string, known []string) string {
	best, bestD := "", 0
	for _, k := range known {
		if k == name {
			continue
		}
		d := distance(strings.ToLower(name), strings.ToLower(k))
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(1, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(": did you mean %s?", best)
}

// distance is the Levenshtein distance of a and b (bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
