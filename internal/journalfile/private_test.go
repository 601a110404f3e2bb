package journalfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// openFlags are the ways botrun opens its journal files.
var openFlags = map[string]int{
	"read":   os.O_RDONLY,
	"append": os.O_CREATE | os.O_WRONLY | os.O_APPEND,
	"create": os.O_CREATE | os.O_RDONLY,
}

// TestOpenPrivateRefusesAFIFO: a FIFO planted at a journal's path is
// refused at once, for reading and for writing, instead of blocking the
// open (and botrun's start) until someone opens its other end.
func TestOpenPrivateRefusesAFIFO(t *testing.T) {
	for name, flag := range openFlags {
		path := filepath.Join(t.TempDir(), "journal.json.log")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			f, err := OpenPrivate(path, flag)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("%s: a FIFO: err = %v, want a refusal", name, err)
			}
		case <-time.After(time.Minute):
			// Unblock the stuck open so the test binary can exit.
			if peer, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
				peer.Close()
			}
			t.Fatalf("%s: opening a planted FIFO blocked", name)
		}
	}
}

// TestOpenPrivateRefusesAHardLink: a journal path that is a hard link to
// another file (a victim the bot's user can write) is refused: botrun would
// write its state and secret into the victim.
func TestOpenPrivateRefusesAHardLink(t *testing.T) {
	for name, flag := range openFlags {
		dir := t.TempDir()
		victim := filepath.Join(dir, "victim.txt")
		if err := os.WriteFile(victim, []byte("victim"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "journal.json.log")
		if err := os.Link(victim, path); err != nil {
			t.Fatal(err)
		}
		f, err := OpenPrivate(path, flag)
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "2 hard links") {
			t.Fatalf("%s: a hard link: err = %v, want a refusal", name, err)
		}
	}
}

// TestOpenPrivateOpensItsOwnFile: a new file is created 0600 and written;
// a missing one opened for reading is os.ErrNotExist.
func TestOpenPrivateOpensItsOwnFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json.log")
	if _, err := ReadPrivate(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: err = %v, want os.ErrNotExist", err)
	}
	f, err := OpenPrivate(path, openFlags["append"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("line\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := ReadPrivate(path)
	if err != nil || string(b) != "line\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != FileMode {
		t.Fatalf("mode %v, want %v", st.Mode().Perm(), FileMode)
	}
}
