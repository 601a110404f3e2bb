package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/gohighlevel/gohighleveltest"
	"github.com/botrun/botrun/host/config"
)

// section returns the part of md from the heading line to the next heading
// of the same or a higher level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	rest := md[i+len(heading)+2:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	for j := 0; j < len(rest); {
		k := strings.Index(rest[j:], "\n#")
		if k < 0 {
			break
		}
		line := rest[j+k+1:]
		if h := line[:strings.IndexAny(line, " \n")+1]; len(h) <= len(level) && strings.Trim(h, "# ") == "" {
			return rest[:j+k]
		}
		j += k + 1
	}
	return rest
}

// TestREADMENamesEveryPlugin: the README documents every channel type and
// every backend this program registers, so adding one without its docs fails.
func TestREADMENamesEveryPlugin(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	channels := section(t, md, "## Channels")
	for _, typ := range channel.Types() {
		if !strings.Contains(channels, "`type = \""+typ+"\"`") && !strings.Contains(channels, "- `"+typ+"`:") {
			t.Errorf("README.md's Channels section does not document type %q (a heading with (`type = %q`) or an item \"- `%s`:\")", typ, typ, typ)
		}
	}
	backends := section(t, md, "### Backends")
	for _, name := range durability.Drivers() {
		if !strings.Contains(backends, "| `"+name+"`") {
			t.Errorf("README.md's Backends table has no row for %q", name)
		}
	}
	if len(channel.Types()) < 5 || len(durability.Drivers()) < 5 {
		t.Errorf("cmd/botrun registers %v and %v; the built-in set is larger", channel.Types(), durability.Drivers())
	}
}

// TestREADMEChannelTable: the Channels section's at-a-glance table has a
// row for every registered channel type, naming it as (`type`), with a
// cell for each of its columns.
func TestREADMEChannelTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	channels := section(t, string(b), "## Channels")
	const header = "| channel (type) | inbound verification | dedupe id | media ref | text limit | buttons | edits | typing |"
	start := strings.Index(channels, header)
	if start < 0 {
		t.Fatalf("README.md's Channels section has no table headed %s", header)
	}
	rows := map[string]int{}
	for _, line := range strings.Split(channels[start:], "\n")[2:] {
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

// TestExampleChannels uncomments every channel (and API) of
// bot.toml.example: each one's keys, as documented there, must load, and
// every channel type this program registers must be there.
func TestExampleChannels(t *testing.T) {
	src, err := os.ReadFile("../../bot.toml.example")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	first := -1
	for i, l := range lines {
		if l == "[[channels]]" {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("bot.toml.example has no [[channels]]")
	}
	key := regexp.MustCompile(`^# ([a-z_]+ = |\[\[channels\]\]|\[\[apis\]\])`)
	types := map[string]bool{"webchat": true} // the one left uncommented
	for i := first + 1; i < len(lines); i++ {
		if key.MatchString(lines[i]) {
			lines[i] = strings.TrimPrefix(lines[i], "# ")
			if typ, ok := strings.CutPrefix(lines[i], "type = "); ok {
				types[strings.Trim(typ, `"`)] = true
			}
		}
	}
	env := func(name string) (string, bool) {
		if strings.HasSuffix(name, "ACCOUNT_SID") {
			return "AC0123456789abcdef0123456789abcdef", true
		}
		if strings.HasSuffix(name, "PUBLIC_KEY") {
			return gohighleveltest.PublicKey(), true // a PEM key, as GoHighLevel's
		}
		return "0123456789abcdef0123456789abcdef", true
	}
	cfg, err := config.Parse("bot.toml.example", strings.Join(lines, "\n"), env)
	if err != nil {
		t.Fatalf("the example's channels do not load:\n%v", err)
	}
	if len(cfg.APIs) != 1 || cfg.APIs[0].Name != "orders" {
		t.Errorf("the example's [[apis]] entry loads as %+v", cfg.APIs)
	}
	for _, typ := range channel.Types() {
		if !types[typ] {
			t.Errorf("bot.toml.example does not show type %q", typ)
		}
	}
	if len(cfg.Channels) != len(channel.Types()) {
		t.Errorf("%d providers loaded, want one per type (%d)", len(cfg.Channels), len(channel.Types()))
	}
}

// TestSendSchedulesForTheRunningBot: botrun send journals a send in the
// bot's backend, held until --at; outbox list --state scheduled shows it and
// discard cancels it.
func TestSendSchedulesForTheRunningBot(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte("[bot]\nmodule = \"bot.wasm\"\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"), 0o600)
	if code, out, errs := runCLI("send", "-c", cfg, "--provider", "web", "--chat", "c1", "--key", "remind:1", "--at", "1h", "tea time"); code != 0 || out != "scheduled remind:1\n" {
		t.Fatalf("send --at: %d %q %q", code, out, errs)
	}
	code, out, errs := runCLI("outbox", "list", "-c", cfg, "--state", "scheduled")
	if code != 0 || !strings.Contains(out, "remind:1") || !strings.Contains(out, "scheduled") {
		t.Fatalf("outbox list --state scheduled: %d %q %q", code, out, errs)
	}
	if code, _, errs := runCLI("send", "-c", cfg, "--provider", "tg", "--chat", "c1", "x"); code != 2 || !strings.Contains(errs, `--provider "tg" is not a [[channels]] id`) {
		t.Fatalf("send to an unknown provider: %d %q", code, errs)
	}
	if code, _, errs := runCLI("send", "-c", cfg, "--provider", "web", "--chat", "c1", "--at", "tomorrow", "x"); code != 2 || !strings.Contains(errs, "neither an RFC 3339 time") {
		t.Fatalf("send --at tomorrow: %d %q", code, errs)
	}
	if code, _, errs := runCLI("discard", "-c", cfg, "remind:1"); code != 0 {
		t.Fatalf("discard: %d %q", code, errs)
	}
	if _, out, _ := runCLI("outbox", "list", "-c", cfg, "--state", "scheduled"); strings.Contains(out, "remind:1") {
		t.Fatalf("discarded send still listed: %q", out)
	}
}

// TestBroadcastJournalsEachChatOnce: botrun broadcast journals one send per
// chat of the file; run again with the prefix, it journals nothing new.
func TestBroadcastJournalsEachChatOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte("[bot]\nmodule = \"bot.wasm\"\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"), 0o600)
	chats := filepath.Join(dir, "chats.txt")
	os.WriteFile(chats, []byte("c1\nc2\n\nc3\nc1\n"), 0o600)
	args := []string{"broadcast", "-c", cfg, "--provider", "web", "--chats", chats, "--key-prefix", "news:7", "hello all"}
	if code, out, errs := runCLI(args...); code != 0 || out != "journaled 3, already journaled 0\n" {
		t.Fatalf("broadcast: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(args...); code != 0 || out != "journaled 0, already journaled 3\n" {
		t.Fatalf("broadcast again: %d %q %q", code, out, errs)
	}
	_, out, _ := runCLI("outbox", "list", "-c", cfg)
	for _, key := range []string{"news:7:c1", "news:7:c2", "news:7:c3"} {
		if !strings.Contains(out, key) {
			t.Fatalf("outbox list lacks %s:\n%s", key, out)
		}
	}
	if code, _, errs := runCLI("broadcast", "-c", cfg, "--provider", "web", "--chats", chats, "hello"); code != 2 || !strings.Contains(errs, "key_prefix") {
		t.Fatalf("broadcast without --key-prefix: %d %q", code, errs)
	}
}

// TestLogCommand: botrun log needs --chat and reads the bot's journals.
func TestLogCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bot.toml")
	os.WriteFile(cfg, []byte("[bot]\nmodule = \"bot.wasm\"\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"), 0o600)
	if code, out, errs := runCLI("log", "-c", cfg, "--chat", "c1"); code != 0 || !strings.HasPrefix(out, "AT") {
		t.Fatalf("log: %d %q %q", code, out, errs)
	}
	if code, out, _ := runCLI("log", "-c", cfg, "--chat", "c1", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("log --json: %d %q", code, out)
	}
	if code, _, errs := runCLI("log", "-c", cfg); code != 2 || !strings.Contains(errs, "--chat is required") {
		t.Fatalf("log without --chat: %d %q", code, errs)
	}
}
