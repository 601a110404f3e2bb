package journalfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrLocked is wrapped by the error of opening a journal that a live process
// (or this one) holds, and of a shared journal's operation on a file that a
// locked journal holds.
var ErrLocked = errors.New("journal file is locked")

// Lock is the pid lock file (<path>.lock) of a journal one process owns.
type Lock struct {
	f    *os.File
	path string
	abs  string
}

// locked holds the absolute paths of the journals this process locked, for
// the same-process check.
var locked sync.Map

// TakeLock takes the lock of the journal at path: it creates <path>.lock
// holding this process's pid. A lock left by a dead process is broken; one
// held by a live process, a second TakeLock of the same path in this process
// before Release, and a file that a live shared journal uses are refused with
// an error wrapping ErrLocked.
func TakeLock(path string) (*Lock, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, loaded := locked.LoadOrStore(abs, true); loaded {
		return nil, fmt.Errorf("%w: %s is already open in this process (close it first)", ErrLocked, path)
	}
	l, err := takeLock(path)
	if err != nil {
		locked.Delete(abs)
		return nil, err
	}
	l.abs = abs
	// A shared journal that joined before the lock existed: refuse. One
	// that joins after sees the lock at its next operation.
	if pid := sharedUser(path); pid != 0 {
		l.Release()
		return nil, fmt.Errorf("%w: %s is in use by a shared journal in process %d (a locked journal needs the file to itself: stop that process or use the shared journal)", ErrLocked, path, pid)
	}
	return l, nil
}

func takeLock(path string) (*Lock, error) {
	lockPath := path + ".lock"
	for range 3 {
		f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, FileMode)
		if err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			return &Lock{f: f, path: lockPath}, nil
		}
		if !os.IsExist(err) {
			return nil, fmt.Errorf("journal lock %s: %w", lockPath, err)
		}
		if pid := LockHolder(path); pid != 0 {
			return nil, fmt.Errorf("%w: %s is held by live process %d (the journal allows one process: stop that process first)", ErrLocked, lockPath, pid)
		}
		os.Remove(lockPath) // stale: its process is gone
	}
	return nil, fmt.Errorf("%w: could not take %s", ErrLocked, lockPath)
}

// Release removes the lock file.
func (l *Lock) Release() {
	l.f.Close()
	os.Remove(l.path)
	if l.abs != "" {
		locked.Delete(l.abs)
	}
}

// LockHolder returns the pid in the lock file of the journal at path, or 0
// when no live process holds it.
func LockHolder(path string) int {
	b, err := os.ReadFile(path + ".lock")
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !ProcessAlive(pid) {
		return 0
	}
	return pid
}

// ProcessAlive reports whether a process with that pid exists on this host.
func ProcessAlive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// shared counts this process's shared journals per absolute path.
var shared struct {
	sync.Mutex
	n map[string]int
}

// sharedMarker is the file that says process pid uses the shared journal at
// path: <path>.shared.<pid>.
func sharedMarker(path string, pid int) string {
	return path + ".shared." + strconv.Itoa(pid)
}

// JoinShared records that this process uses the journal at path as a shared
// journal, so that a later TakeLock refuses it; leave undoes it (once per
// JoinShared).
func JoinShared(path string) (leave func(), err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	marker := sharedMarker(path, os.Getpid())
	shared.Lock()
	defer shared.Unlock()
	if shared.n == nil {
		shared.n = map[string]int{}
	}
	if shared.n[abs] == 0 {
		f, err := OpenPrivate(marker, os.O_CREATE|os.O_WRONLY)
		if err != nil {
			return nil, fmt.Errorf("shared journal %s: %w", path, err)
		}
		f.Close()
	}
	shared.n[abs]++
	var once sync.Once
	return func() {
		once.Do(func() {
			shared.Lock()
			defer shared.Unlock()
			if shared.n[abs]--; shared.n[abs] == 0 {
				delete(shared.n, abs)
				os.Remove(marker)
			}
		})
	}, nil
}

// sharedUser returns the pid of a live process using the journal at path as
// a shared journal, or 0; markers of dead processes are removed.
func sharedUser(path string) int {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	prefix := base + ".shared."
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(rest)
		if err != nil || pid <= 0 {
			continue
		}
		if ProcessAlive(pid) {
			return pid
		}
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return 0
}
