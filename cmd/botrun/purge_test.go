package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
)

// TestPurgeSaysWhatItDeletesAndDeadLettersNeedAsking: botrun purge --before
// deletes done inbound and sent outbound records and says so, keeping the
// dead letters; botrun purge --dead deletes those (a dead send with the later
// part of its text), older than --before or, with --all, every one: --dead
// alone is a usage error.
func TestPurgeSaysWhatItDeletesAndDeadLettersNeedAsking(t *testing.T) {
	cfg, j, b := sqliteScope(t)
	ctx := context.Background()
	old := time.Now().Add(-10 * 24 * time.Hour).UnixMilli()
	l := durability.Lease{Owner: "i1", Now: old, Until: old + 1000}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"web:done", "web:dead"} {
		_, _, err := j.Inbox.Put(ctx, durability.InboxPut{ID: id, Provider: "web", Chat: "c1", Payload: []byte(`{}`)}, old, &l)
		must(err)
	}
	must(j.Inbox.Complete(ctx, "web:done", 1, durability.Completion{Now: old}))
	must(j.Inbox.Fail(ctx, "web:dead", 1, "trap", durability.FailOptions{Now: old, Dead: true}))
	for _, key := range []string{"k:sent", "k:dead"} {
		_, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: key, Provider: "web", Chat: "c1", Payload: []byte(`{}`)}, old, &l)
		must(err)
	}
	_, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "k:dead#2", Provider: "web", Chat: "c1", Payload: []byte(`{}`), PreviousPart: "k:dead"}, old, nil)
	must(err)
	must(j.Outbox.MarkSent(ctx, "k:sent", 1, "ref", old))
	must(j.Outbox.MarkFailed(ctx, "k:dead", 1, "refused", durability.FailOptions{Now: old, Dead: true}))
	b.Close()

	code, out, errs := runCLI("purge", "-c", cfg, "--before", "7d")
	if code != 0 || !strings.HasPrefix(out, "purged 1 done inbox records, 1 sent outbox records and 0 API answers completed before ") ||
		!strings.HasSuffix(out, "; dead letters are kept (botrun purge --dead deletes them)\n") {
		t.Fatalf("purge --before 7d: %d %q %q", code, out, errs)
	}
	if _, out, _ := runCLI("inbox", "list", "-c", cfg, "--state", "dead"); !strings.Contains(out, "web:dead") {
		t.Fatalf("the dead inbound record was purged by --before: %q", out)
	}
	if code, out, errs := runCLI("purge", "-c", cfg, "--dead", "--before", "30d"); code != 0 || !strings.HasPrefix(out, "purged 0 dead inbox records and 0 dead or unknown outbox records completed before ") {
		t.Fatalf("purge --dead --before 30d: %d %q %q", code, out, errs)
	}
	for _, args := range [][]string{{"--dead"}, {"--all"}, {"--dead", "--all", "--before", "1d"}} {
		if code, out, errs := runCLI(append([]string{"purge", "-c", cfg}, args...)...); code != 2 || out != "" || !strings.Contains(errs, "--all") {
			t.Fatalf("purge %v: %d %q %q, want a usage error naming --all", args, code, out, errs)
		}
	}
	if code, out, errs := runCLI("purge", "-c", cfg, "--dead", "--all"); code != 0 || out != "purged 1 dead inbox records and 1 dead or unknown outbox records\n" {
		t.Fatalf("purge --dead --all: %d %q %q", code, out, errs)
	}
	_, j, b, err = openScope(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := j.Inbox.Get(ctx, "web:dead"); !errors.Is(err, durability.ErrNotFound) {
		t.Errorf("web:dead after purge --dead: %v", err)
	}
	for _, key := range []string{"k:dead", "k:dead#2"} {
		if _, err := j.Outbox.Get(ctx, key); !errors.Is(err, durability.ErrNotFound) {
			t.Errorf("%s after purge --dead: %v", key, err)
		}
	}
	if code, _, errs := runCLI("purge", "-c", cfg); code != 2 || !strings.Contains(errs, "--before DURATION is required") {
		t.Fatalf("purge without --before: %d %q", code, errs)
	}
}

// TestRetryRearmsAfterSend: botrun retry of a dead send re-arms its
// after_send record (settled without running the hook while the send was
// dead), as the admin API's retry does: it is pending again, to run once
// the send is delivered.
func TestRetryRearmsAfterSend(t *testing.T) {
	cfg, j, b := sqliteScope(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	l := durability.Lease{Owner: "i1", Now: now, Until: now + 60000}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := j.Outbox.Put(ctx, durability.OutboxPut{Key: "k:1", Provider: "web", Chat: "c1", Payload: []byte(`{"text":"hi"}`)}, now, &l)
	must(err)
	must(j.Outbox.MarkFailed(ctx, "k:1", 1, "refused", durability.FailOptions{Now: now, Dead: true}))
	_, _, err = j.Outbox.Put(ctx, durability.OutboxPut{Key: "k:1@after_send", Provider: "_after_send", Chat: "c1", Payload: []byte(`{"text":"{}"}`)}, now, &l)
	must(err)
	must(j.Outbox.MarkSent(ctx, "k:1@after_send", 1, "", now))
	b.Close()

	if code, out, errs := runCLI("retry", "-c", cfg, "k:1"); code != 0 {
		t.Fatalf("retry: %d %q %q", code, out, errs)
	}
	_, j, b, err = openScope(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, key := range []string{"k:1", "k:1@after_send"} {
		rec, err := j.Outbox.Get(ctx, key)
		must(err)
		if rec.State != durability.OutboxPending {
			t.Errorf("%s after botrun retry: %s; want pending (re-armed)", key, rec.State)
		}
	}
}

// sqliteScope writes a bot.toml on a SQLite journal in a temporary folder
// and opens it: its path, the journals and their backend (to close).
func sqliteScope(t *testing.T) (string, durability.Journals, durability.Backend) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "bot.toml")
	os.WriteFile(cfg, []byte("[bot]\nmodule = \"bot.wasm\"\n[durability]\nbackend = \"sqlite\"\npath = \"bot.db\"\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n"), 0o600)
	_, j, b, err := openScope(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, j, b
}
