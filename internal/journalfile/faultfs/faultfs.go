// Package faultfs is a journalfile.FS that injects the faults of a real disk
// at a chosen operation: a failed or short write, a full disk (ENOSPC), a
// failed fsync, a failed truncate, create, rename or directory sync.
//
// A failed fsync also loses data, as a real one may: the bytes written to
// the file since its last good sync never reach the disk, though the page
// cache goes on showing them, and the writer is told nothing more (the
// kernel marks the pages clean and the next fsync succeeds; PostgreSQL's
// "fsyncgate"). PowerLoss then makes the files what the disk holds: zeros
// where those bytes were, nothing past a file's last good sync, and every
// rename not followed by a good sync of its directory undone. A journal
// that trusts what it reads back after a failed fsync, goes on appending
// after one, acknowledges bytes it never synced, or trusts a rename it did
// not make durable, loses what it acknowledged at the next open.
//
// Tests count a workload's operations with a dry run (Ops), then run it
// again failing each one in turn (FailAt), or keep failing every operation
// for a while (FailFrom, Heal) as a full disk does.
package faultfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/botrun/botrun/internal/journalfile"
)

// Op is a kind of operation that can fail.
type Op string

// The operations counted.
const (
	Open     Op = "open"
	Create   Op = "create"
	Write    Op = "write"
	Sync     Op = "sync"
	Truncate Op = "truncate"
	Rename   Op = "rename"
	SyncDir  Op = "syncdir"
)

// Fault is what an operation does instead of succeeding.
type Fault int

// The faults.
const (
	// EIO fails the operation with an I/O error; a write writes nothing.
	EIO Fault = iota + 1
	// NoSpace fails it with ENOSPC; a write writes nothing.
	NoSpace
	// Short writes half of a write's bytes, then fails with ENOSPC (other
	// operations fail with ENOSPC).
	Short
)

func (f Fault) String() string {
	switch f {
	case EIO:
		return "EIO"
	case NoSpace:
		return "ENOSPC"
	case Short:
		return "short write"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

func (f Fault) err() error {
	if f == EIO {
		return syscall.EIO
	}
	return syscall.ENOSPC
}

// Event is one counted operation.
type Event struct {
	N    int // 1-based
	Op   Op
	Path string
}

func (e Event) String() string { return fmt.Sprintf("#%d %s %s", e.N, e.Op, e.Path) }

// FS injects faults into journalfile.OS. The zero value injects none.
type FS struct {
	mu  sync.Mutex
	n   int
	ops []Event
	at  int
	// plan is FailEach's: an operation's number, and its fault.
	plan  map[int]Fault
	from  int
	only  Op
	fault Fault
	// delay slows every operation of kind slow.
	slow   Op
	delay  time.Duration
	failed []Event
	// lost is, per file, the ranges a failed fsync did not write.
	lost map[string][]span
	// durable is, per file, the length its last good sync (or its state
	// when first seen) made durable.
	durable map[string]int64
	// renames are the renames no good sync of their directory followed,
	// oldest first.
	renames []rename
}

// rename is one rename to undo at a power loss: what the target held.
type rename struct {
	dir, to string
	old     []byte // nil: the target did not exist
	durable int64
}

// span is a byte range of a file.
type span struct{ off, end int64 }

// FailAt makes the n-th operation from now on (1 is the next) fail with
// fault, once.
func (f *FS) FailAt(n int, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.from, f.only, f.fault = f.n+n, 0, "", fault
}

// FailEach makes each operation of faults (the n-th from now on, as for
// FailAt) fail once with its fault: several faults in one run.
func (f *FS) FailEach(faults map[int]Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = map[int]Fault{}
	for n, fault := range faults {
		f.plan[f.n+n] = fault
	}
}

// FailFrom makes every operation from the n-th from now on fail with fault,
// until Heal.
func (f *FS) FailFrom(n int, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.from, f.only, f.fault = 0, f.n+n, "", fault
}

// FailOps makes every operation of kind op fail with fault, until Heal.
func (f *FS) FailOps(op Op, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.from, f.only, f.fault = 0, f.n+1, op, fault
}

// Slow makes every operation of kind op take d longer (a slow disk),
// until Heal: it widens the windows between operations.
func (f *FS) Slow(op Op, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slow, f.delay = op, d
}

// Heal stops injecting faults.
func (f *FS) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.from, f.only, f.fault = 0, 0, "", 0
	f.plan = nil
	f.slow, f.delay = "", 0
}

// PowerLoss makes the files what the disk holds after the machine lost
// power: the bytes a failed fsync did not write are zeros. Call it with
// the journal closed, before opening it again.
func (f *FS) PowerLoss() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	// Renames the directory never made durable are undone, newest first.
	for i := len(f.renames) - 1; i >= 0; i-- {
		r := f.renames[i]
		if r.old == nil {
			os.Remove(r.to)
			delete(f.durable, r.to)
			continue
		}
		if err := os.WriteFile(r.to, r.old, 0o600); err != nil {
			errs = append(errs, err)
		}
		f.durable[r.to] = r.durable
	}
	f.renames = nil
	// Nothing past a file's last good sync survives.
	for path, n := range f.durable {
		if st, err := os.Stat(path); err == nil && st.Size() > n {
			if err := os.Truncate(path, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for path, spans := range f.lost {
		for _, sp := range spans {
			if err := zero(path, sp.off, sp.end); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	f.lost = nil
	return errors.Join(errs...)
}

// seen records a file's length when the FS first meets it: what was there
// before is durable.
func (f *FS) seen(path string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.durable == nil {
		f.durable = map[string]int64{}
	}
	if _, ok := f.durable[path]; !ok {
		f.durable[path] = size
	}
}

// synced records that a good sync made path durable up to size.
func (f *FS) synced(path string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.durable[path] = size
}

// syncFailed records that the bytes of path past its last good sync, up
// to size, never reached the disk.
func (f *FS) syncFailed(path string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off := f.durable[path]; size > off {
		if f.lost == nil {
			f.lost = map[string][]span{}
		}
		f.lost[path] = append(f.lost[path], span{off, size})
	}
}

// truncated records a truncate of path to size: what lay past it is gone
// (taken as durable: a cut that a power loss undid would bring back old
// bytes, not lose new ones).
func (f *FS) truncated(path string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.durable[path]; ok && n > size {
		f.durable[path] = size
	}
	var keep []span
	for _, sp := range f.lost[path] {
		if sp.off < size {
			keep = append(keep, span{sp.off, min(sp.end, size)})
		}
	}
	if f.lost != nil {
		f.lost[path] = keep
	}
}

// Ops returns the operations counted so far.
func (f *FS) Ops() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.ops...)
}

// Failed returns the operations that were made to fail.
func (f *FS) Failed() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Event(nil), f.failed...)
}

// next counts an operation and returns the fault it gets, if any.
func (f *FS) next(op Op, path string) Fault {
	f.mu.Lock()
	if op == f.slow && f.delay > 0 {
		d := f.delay
		f.mu.Unlock()
		time.Sleep(d) // the slow disk under test
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	f.n++
	ev := Event{N: f.n, Op: op, Path: path}
	f.ops = append(f.ops, ev)
	if (f.at != 0 && f.n == f.at) || (f.from != 0 && f.n >= f.from && (f.only == "" || f.only == op)) {
		f.failed = append(f.failed, ev)
		return f.fault
	}
	if fault, ok := f.plan[f.n]; ok {
		f.failed = append(f.failed, ev)
		return fault
	}
	return 0
}

// OpenFile implements journalfile.FS.
func (f *FS) OpenFile(path string, flag int) (journalfile.File, error) {
	if ft := f.next(Open, path); ft != 0 {
		return nil, &os.PathError{Op: "open", Path: path, Err: ft.err()}
	}
	inner, err := journalfile.OS.OpenFile(path, flag)
	if err != nil {
		return nil, err
	}
	return newFile(f, inner)
}

// dirOf is the directory of path, as SyncDir is given it.
func dirOf(path string) string { return filepath.Dir(path) }

// CreateTemp implements journalfile.FS.
func (f *FS) CreateTemp(dir, pattern string) (journalfile.File, error) {
	if ft := f.next(Create, dir+"/"+pattern); ft != 0 {
		return nil, &os.PathError{Op: "createtemp", Path: dir + "/" + pattern, Err: ft.err()}
	}
	inner, err := journalfile.OS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return newFile(f, inner)
}

// Rename implements journalfile.FS.
func (f *FS) Rename(from, to string) error {
	if ft := f.next(Rename, to); ft != 0 {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: ft.err()}
	}
	old, err := os.ReadFile(to)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if errors.Is(err, os.ErrNotExist) {
		old = nil
	} else if old == nil {
		old = []byte{}
	}
	if err := journalfile.OS.Rename(from, to); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.durable == nil {
		f.durable = map[string]int64{}
	}
	f.renames = append(f.renames, rename{dir: dirOf(to), to: to, old: old, durable: f.durable[to]})
	f.durable[to] = f.durable[from]
	delete(f.durable, from)
	return nil
}

// Remove implements journalfile.FS; it never fails by injection (removing
// frees space).
func (f *FS) Remove(path string) error { return journalfile.OS.Remove(path) }

// SyncDir implements journalfile.FS.
func (f *FS) SyncDir(dir string) error {
	if ft := f.next(SyncDir, dir); ft != 0 {
		return &os.PathError{Op: "sync", Path: dir, Err: ft.err()}
	}
	if err := journalfile.OS.SyncDir(dir); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := f.renames[:0]
	for _, r := range f.renames {
		if r.dir != filepath.Clean(dir) {
			keep = append(keep, r)
		}
	}
	f.renames = keep
	return nil
}

// file is a journal file whose operations go through FS.
type file struct {
	fs    *FS
	inner journalfile.File
}

func newFile(f *FS, inner journalfile.File) (*file, error) {
	st, err := inner.Stat()
	if err != nil {
		inner.Close()
		return nil, err
	}
	f.seen(inner.Name(), st.Size())
	return &file{fs: f, inner: inner}, nil
}

func (w *file) Name() string               { return w.inner.Name() }
func (w *file) Stat() (fs.FileInfo, error) { return w.inner.Stat() }
func (w *file) Close() error               { return w.inner.Close() }

func (w *file) Write(b []byte) (int, error) {
	switch ft := w.fs.next(Write, w.Name()); ft {
	case 0:
		return w.inner.Write(b)
	case Short:
		n, err := w.inner.Write(b[:len(b)/2])
		if err != nil {
			return n, err
		}
		return n, &os.PathError{Op: "write", Path: w.Name(), Err: ft.err()}
	default:
		return 0, &os.PathError{Op: "write", Path: w.Name(), Err: ft.err()}
	}
}

func (w *file) Truncate(size int64) error {
	if ft := w.fs.next(Truncate, w.Name()); ft != 0 {
		return &os.PathError{Op: "truncate", Path: w.Name(), Err: ft.err()}
	}
	if err := w.inner.Truncate(size); err != nil {
		return err
	}
	w.fs.truncated(w.Name(), size)
	return nil
}

func (w *file) Sync() error {
	st, err := w.inner.Stat()
	if err != nil {
		return err
	}
	if ft := w.fs.next(Sync, w.Name()); ft != 0 {
		// The writeback failed: the disk keeps zeros where the unsynced
		// bytes were, the cache keeps showing them, and the kernel will
		// not try them again.
		w.fs.syncFailed(w.Name(), st.Size())
		return &os.PathError{Op: "sync", Path: w.Name(), Err: ft.err()}
	}
	if err := w.inner.Sync(); err != nil {
		return err
	}
	w.fs.synced(w.Name(), st.Size())
	return nil
}

// zero overwrites the bytes of the file at path from off to end (or its
// end, if shorter) with zeros.
func zero(path string, off, end int64) error {
	g, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if st, err := g.Stat(); err == nil {
		end = min(end, st.Size())
	}
	if end > off {
		_, err = g.WriteAt(make([]byte, end-off), off)
	}
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	return err
}
