package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/internal/groupcommit"
	"github.com/botrun/botrun/internal/journalfile"
)

func TestConformance(t *testing.T) {
	for name, opts := range map[string]Options{
		"snapshot":   {},
		"append_log": {AppendLog: true},
		"compacting": {AppendLog: true, CompactEvery: 7},
	} {
		t.Run(name, func(t *testing.T) {
			durabilitytest.Run(t, func(t *testing.T) durability.Backend {
				opts.Path = filepath.Join(t.TempDir(), "bot.journal")
				b, err := Open(context.Background(), opts)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, whole(opts.AppendLog)...)
		})
	}
}

// whole is the conformance options of a store with or without its append
// log: a snapshot without a log is rewritten whole on every commit.
func whole(appendLog bool) []durabilitytest.Option {
	if appendLog {
		return nil
	}
	return []durabilitytest.Option{durabilitytest.WholeRewrites}
}

func put(t *testing.T, s *Store, key, value string) {
	t.Helper()
	score := int64(len(value))
	if err := s.Commit(context.Background(), []durability.Write{{Key: key, Version: durability.AnyVersion, Value: []byte(value), Group: "ix/", Order: &score}}); err != nil {
		t.Fatal(err)
	}
}

func value(t *testing.T, s *Store, key string) string {
	t.Helper()
	v, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

func TestLockRefusesSecondOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	s, err := OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path, nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "already open in this process") {
		t.Fatalf("second open in the same process: %v", err)
	}
	if pid := LockHolder(path); pid != os.Getpid() {
		t.Fatalf("lock holder %d", pid)
	}
	s.Close()
	s2, err := OpenStore(path, nil)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	s2.Close()
	// A lock left by a dead process is broken.
	os.WriteFile(path+".lock", []byte("999999999\n"), 0o644)
	s3, err := OpenStore(path, nil)
	if err != nil {
		t.Fatalf("stale lock not broken: %v", err)
	}
	s3.Close()
	// A lock held by another live process refuses.
	os.WriteFile(path+".lock", []byte("1\n"), 0o644)
	if _, err := OpenStore(path, nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "held by live process 1") {
		t.Fatalf("lock of a live process: %v", err)
	}
	os.Remove(path + ".lock")
}

func TestAppendLogReplayAndCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	s, _ := OpenStore(path, &Options{AppendLog: true, CompactEvery: 3})
	put(t, s, "a", "1")
	put(t, s, "b", "22")
	if b, _ := os.ReadFile(path + ".log"); strings.Count(string(b), "\n") != 2 {
		t.Fatalf("log after two commits: %q", b)
	}
	put(t, s, "c", "333") // third entry: compacts
	if b, _ := os.ReadFile(path + ".log"); len(b) != 0 {
		t.Fatalf("log after compaction: %q", b)
	}
	put(t, s, "a", "4444")
	// Simulate a crash: drop the store without Close (the lock stays, from
	// this process, so release it by hand as a restart would find it stale).
	s.log.Close()
	s.releaseLock()
	s2, err := OpenStore(path, nil) // no append_log: a leftover log is still replayed
	if err != nil {
		t.Fatal(err)
	}
	if value(t, s2, "a") != "4444" || value(t, s2, "c") != "333" {
		t.Fatalf("after replay: a=%q c=%q", value(t, s2, "a"), value(t, s2, "c"))
	}
	e, err := s2.Range(context.Background(), "ix/", durability.IndexOrder, durability.IndexEntry{Score: -1}, 100, 10)
	if err != nil || len(e) != 3 || e[2].Key != "a" || e[2].Score != 4 {
		t.Fatalf("index after replay: %+v %v", e, err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path + ".log"); len(b) != 0 {
		t.Fatalf("close did not fold the log: %q", b)
	}
	s3, _ := OpenStore(path, nil)
	defer s3.Close()
	if value(t, s3, "a") != "4444" {
		t.Fatal("snapshot after close lost data")
	}
}

func writeLog(t *testing.T, path string, lines ...string) {
	t.Helper()
	os.WriteFile(path+".log", []byte(strings.Join(lines, "")), 0o600)
}

func TestTruncatedLastLineIsTrimmed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	good := `{"seq":1,"w":[{"k":"a","v":"MQ=="}]}` + "\n"
	writeLog(t, path, good, `{"seq":2,"w":[{"k":"b","v`)
	s, err := OpenStore(path, &Options{AppendLog: true})
	if err != nil {
		t.Fatal(err)
	}
	if value(t, s, "a") != "1" || value(t, s, "b") != "" {
		t.Fatal("replay of the good line")
	}
	if b, _ := os.ReadFile(path + ".log"); string(b) != good {
		t.Fatalf("log not trimmed: %q", b)
	}
	put(t, s, "c", "3")
	s.Close()
}

func TestCorruptMiddleLineIsRefusedAndUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	lines := []string{`{"seq":1,"w":[{"k":"a","v":"MQ=="}]}` + "\n", "garbage\n", `{"seq":3,"w":[{"k":"c","v":"Mw=="}]}` + "\n"}
	writeLog(t, path, lines...)
	_, err := OpenStore(path, nil)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Code != "APPEND_LOG_CORRUPT" || ce.Line != 2 || ce.Byte != len(lines[0]) || !strings.Contains(err.Error(), path+".log") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path + ".log"); string(b) != strings.Join(lines, "") {
		t.Fatal("a corrupt log was modified")
	}
	if _, err := os.Stat(path + ".lock"); !os.IsNotExist(err) {
		t.Fatal("a refused open left its lock")
	}
}

func TestUnreadableSnapshotIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	os.WriteFile(path, []byte(`{"format":"botrun-file-journal/1","seq":3,"kv":{"items":{`), 0o600)
	_, err := OpenStore(path, nil)
	if err == nil || !strings.Contains(err.Error(), path+": snapshot is unreadable") {
		t.Fatalf("err = %v", err)
	}
}

func TestSnapshotModeRewritesAtomically(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	s, _ := OpenStore(path, nil)
	put(t, s, "a", "1")
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), `"seq":1`) {
		t.Fatalf("snapshot after a commit: %q %v", b, err)
	}
	if left, _ := filepath.Glob(path + ".tmp*"); len(left) > 0 {
		t.Fatalf("temp file left behind: %v", left)
	}
	s.Close()
}

// TestCommitsAreObserved: the file journal's own group commits reach the
// process's commit observers (botrun_journal_commit_*), in both modes.
func TestCommitsAreObserved(t *testing.T) {
	for _, appendLog := range []bool{false, true} {
		var writes atomic.Int64
		stop := groupcommit.Observe(func(size int, took time.Duration) {
			if took > 0 {
				writes.Add(int64(size))
			}
		})
		s, err := OpenStore(filepath.Join(t.TempDir(), "bot.journal"), &Options{AppendLog: appendLog})
		if err != nil {
			t.Fatal(err)
		}
		put(t, s, "a", "1")
		put(t, s, "b", "2")
		s.Close()
		stop()
		if n := writes.Load(); n < 2 {
			t.Errorf("append_log %v: %d commits observed, want 2", appendLog, n)
		}
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add([]byte(`{"seq":1,"w":[{"k":"a","v":"MQ==","g":"x/","o":1}]}` + "\n"))
	f.Add([]byte("{\"seq\":1,\"w\":[]}\ngarbage\n{\"seq\":3,\"w\":[]}\n"))
	f.Add([]byte(`{"seq":2,"w":[{"k":"b"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, keep, err := DecodeLog("fuzz.log", b)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Code != CodeAppendLogCorrupt || ce.Byte > len(b) {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if keep > len(b) {
			t.Fatalf("keep %d > %d", keep, len(b))
		}
		for i := 1; i < len(entries); i++ {
			if entries[i].Seq <= entries[i-1].Seq {
				t.Fatal("sequence not increasing")
			}
		}
		again, keep2, err := DecodeLog("fuzz.log", b[:keep])
		if err != nil || keep2 != keep || len(again) != len(entries) {
			t.Fatalf("re-reading the kept prefix: %d entries, keep %d, %v", len(again), keep2, err)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(`{"format":"botrun-file-journal/1","seq":3,"kv":{"version":4,"items":{"a":{"value":"MQ==","v":4,"g":"x/","order":1}}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		snapshotSeq(b) // a shared store reads the header of any file
		s, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		if s.KV.Items == nil {
			t.Fatal("nil items accepted")
		}
		// What a store writes starts with a header holding its sequence.
		enc, err := encodeSnapshot(s.KV, s.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if seq, ok := snapshotSeq(enc[:min(len(enc), 64)]); !ok || seq != s.Seq {
			t.Fatalf("header of an encoded snapshot: %d %v, want %d", seq, ok, s.Seq)
		}
	})
}

func TestAckedWritesSurviveSIGKILL(t *testing.T) {
	durabilitytest.AckedWritesSurviveKill(t, "TestAckedWritesSurviveSIGKILL", func(path string) (durability.Kv, error) {
		return OpenStore(path, &Options{AppendLog: true, CompactEvery: 100})
	})
}

// TestPlantedLinksAreNeverWrittenThrough: a symbolic link planted where the
// journal keeps a file (issue 29, item 5: journal.json.log → victim.txt made
// the backend truncate the victim and write the journal, with the bot's
// random secret, into it) is refused at open, or replaced rather than
// followed; the victim keeps its content.
func TestPlantedLinksAreNeverWrittenThrough(t *testing.T) {
	const victimText = "the victim's own content, longer than any journal line\n"
	for _, tc := range []struct {
		name, planted string
		refused       bool
		open          func(path string) (durability.Kv, func() error, error)
	}{
		{"log", ".log", true, openAppendLog},
		{"snapshot", "", true, openAppendLog},
		{"snapshot temp file", ".tmp", false, openSnapshotMode},
		{"shared log", ".log", true, openShared},
		{"shared snapshot", "", true, openShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim.txt")
			if err := os.WriteFile(victim, []byte(victimText), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "journal.json")
			if err := os.Symlink(victim, path+tc.planted); err != nil {
				t.Fatal(err)
			}
			kv, closeKv, err := tc.open(path)
			if tc.refused {
				if !errors.Is(err, journalfile.ErrNotPrivate) || !strings.Contains(err.Error(), path+tc.planted+" is a symbolic link") {
					t.Fatalf("open with a planted %s link: err = %v, want a refusal naming the link", tc.name, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				score := int64(1)
				if err := kv.Commit(context.Background(), []durability.Write{{Key: "k", Version: durability.AnyVersion, Value: []byte("v"), Group: "ix/", Order: &score}}); err != nil {
					t.Fatal(err)
				}
				closeKv()
			}
			if b, _ := os.ReadFile(victim); string(b) != victimText {
				t.Fatalf("the victim was written through the planted link: %q", b)
			}
		})
	}
}

func openAppendLog(path string) (durability.Kv, func() error, error) {
	s, err := OpenStore(path, &Options{AppendLog: true})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openSnapshotMode(path string) (durability.Kv, func() error, error) {
	s, err := OpenStore(path, nil)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openShared(path string) (durability.Kv, func() error, error) {
	s, err := OpenSharedStore(path, nil)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := s.Get(context.Background(), "k"); err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, s.Close, nil
}

// TestJournalOpenToOthersIsRefused: a journal file readable by others, or
// by its group, is refused with the fix (chmod 600).
func TestJournalOpenToOthersIsRefused(t *testing.T) {
	for _, suffix := range []string{"", ".log"} {
		path := filepath.Join(t.TempDir(), "journal.json")
		if err := os.WriteFile(path+suffix, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path+suffix, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenStore(path, &Options{AppendLog: true})
		if !errors.Is(err, journalfile.ErrNotPrivate) || !strings.Contains(err.Error(), "chmod 600 "+path+suffix) {
			t.Fatalf("a 0644 %s: err = %v, want a refusal with chmod 600", path+suffix, err)
		}
		if _, err := os.Stat(path + ".lock"); !os.IsNotExist(err) {
			t.Fatal("a refused open left its lock")
		}
	}
}
