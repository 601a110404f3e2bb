package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/gohighlevel/gohighleveltest"
	"github.com/botrun/botrun/host/config"
)

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
	if code, out, errs := runCLI("send", "-c", cfg, "--provider", "web", "--chat", "c1", "--key", "remind:1", "--at", "1h", "tea time"); code != 0 || !strings.HasPrefix(out, "scheduled remind:1 for ") {
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
	// A journal that is not there yet is an error of the path, not an
	// empty log (the read-only commands do not create one).
	if code, _, errs := runCLI("log", "-c", cfg, "--chat", "c1"); code != 1 || !strings.Contains(errs, "is durability.path the bot's database?") {
		t.Fatalf("log of a journal that is not there: %d %q", code, errs)
	}
	if code, _, errs := runCLI("send", "-c", cfg, "--provider", "web", "--chat", "c9", "--at", "1h", "x"); code != 0 { // journals: creates it
		t.Fatalf("send: %d %q", code, errs)
	}
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
