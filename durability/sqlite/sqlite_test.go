package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/sqlite"
	"github.com/botrun/botrun/internal/journalfile"
	"github.com/botrun/botrun/internal/waitfor"
)

func TestConformance(t *testing.T) {
	for _, sync := range []string{"full", "normal"} {
		t.Run(sync, func(t *testing.T) {
			durabilitytest.Run(t, func(t *testing.T) durability.Backend {
				b, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "bot.db"), Synchronous: sync})
				if err != nil {
					t.Fatal(err)
				}
				return b
			})
		})
	}
}

func TestAckedWritesSurviveSIGKILL(t *testing.T) {
	durabilitytest.AckedWritesSurviveKill(t, "TestAckedWritesSurviveSIGKILL", func(path string) (durability.Kv, error) {
		return sqlite.OpenStore(path, nil)
	})
}

// TestCheckpointsBesideTheWriter: the writer never checkpoints in a commit's
// path; the checkpointer copies the WAL into the database file while commits
// land, so it grows without a close.
func TestCheckpointsBesideTheWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.db")
	s, err := sqlite.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	value := bytes.Repeat([]byte("x"), 1024)
	for i := range 500 {
		if err := s.Commit(context.Background(), []durability.Write{{Key: fmt.Sprint("k", i), Version: durability.AnyVersion, Value: value}}); err != nil {
			t.Fatal(err)
		}
	}
	if !waitfor.True(60*time.Second, func() bool { return size() >= before+400*1024 }) {
		t.Fatalf("after 60 s the database file is %d bytes (was %d): the WAL was not checkpointed", size(), before)
	}
}

// TestReadOnlyBesideAWriter: a read-only store opens and reads while another
// connection holds the write lock (a normal open would wait for it to
// migrate), never writes, and refuses a commit.
func TestReadOnlyBesideAWriter(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bot.db")
	w, err := sqlite.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	one := int64(1)
	if err := w.Commit(ctx, []durability.Write{{Key: "g/k", Version: durability.AnyVersion, Value: []byte("v"), Group: "g/", Order: &one}}); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	r, err := sqlite.OpenStore(path, &sqlite.Options{ReadOnly: true, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("read-only open beside a held write lock: %v", err)
	}
	defer r.Close()
	if v, _, err := r.Get(ctx, "g/k"); err != nil || string(v) != "v" {
		t.Fatalf("read-only get: %q %v", v, err)
	}
	if got, err := r.Range(ctx, "g/", durability.IndexOrder, durability.IndexEntry{Score: -1}, 10, 0); err != nil || len(got) != 1 {
		t.Fatalf("read-only range: %v %v", got, err)
	}
	if err := r.Commit(ctx, []durability.Write{{Key: "x", Version: durability.AnyVersion, Value: []byte("y")}}); !errors.Is(err, durability.ErrReadOnly) {
		t.Fatalf("a read-only store's commit: err = %v, want durability.ErrReadOnly (the state-index migration skips only that)", err)
	}
	if _, err := sqlite.OpenStore(filepath.Join(t.TempDir(), "missing.db"), &sqlite.Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing database created it")
	}
}

// TestPlantedLinkAndOpenFileAreRefused: a symbolic link planted at the
// database's path is refused and its target left as it was (issue 29, item
// 5); a database file open to others is refused with the fix.
func TestPlantedLinkAndOpenFileAreRefused(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim.txt")
	const victimText = "the victim's own content\n"
	if err := os.WriteFile(victim, []byte(victimText), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bot.db")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.OpenStore(path, nil); !errors.Is(err, journalfile.ErrNotPrivate) {
		t.Fatalf("a planted link: err = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != victimText {
		t.Fatalf("the victim was written through the link: %q", b)
	}
	wal := filepath.Join(dir, "wal.db")
	if err := os.Symlink(victim, wal+"-wal"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.OpenStore(wal, nil); !errors.Is(err, journalfile.ErrNotPrivate) {
		t.Fatalf("a link planted as the -wal file: err = %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != victimText {
		t.Fatalf("the victim was written through the -wal link: %q", b)
	}
	open := filepath.Join(dir, "open.db")
	if err := os.WriteFile(open, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	if _, err := sqlite.OpenDB(open); !errors.Is(err, journalfile.ErrNotPrivate) {
		t.Fatalf("a 0644 database: err = %v, want a refusal", err)
	}
}
