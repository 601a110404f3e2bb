package journalfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CodeAppendLogCorrupt is the code of a log with a bad line before its end.
const CodeAppendLogCorrupt = "APPEND_LOG_CORRUPT"

// CorruptError is a log that cannot be replayed: a bad line followed by more
// lines. Cutting there would silently drop every later entry, so the journal
// refuses to open (or to write) and leaves the file as it is.
type CorruptError struct {
	Code string
	File string
	Line int
	Byte int
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: %s at line %d (byte %d): %v (restore it from a backup or move it aside)", e.File, e.Code, e.Line, e.Byte, e.Err)
}

// Unwrap returns the parse error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Scan parses a log's bytes, one entry per line, with parse, which returns
// the entry and its sequence number. It returns the entries and how many
// bytes hold them: a truncated or unreadable last line (a crash mid-write) is
// left out, and keep is where the file should be cut. A bad line with more
// lines after it is a *CorruptError naming the file (name), line and byte.
// Sequence numbers must increase. Bytes read from a file are untrusted: parse
// must refuse what it does not know.
func Scan[E any](name string, b []byte, parse func(line []byte) (E, int64, error)) (entries []E, keep int, err error) {
	off, line := 0, 0
	var last int64
	for off < len(b) {
		line++
		end := bytes.IndexByte(b[off:], '\n')
		final := end < 0
		if final {
			end = len(b) - off
		}
		e, seq, perr := parse(b[off : off+end])
		if perr == nil && seq <= 0 {
			perr = fmt.Errorf("sequence %d is not positive", seq)
		}
		if perr == nil && len(entries) > 0 && seq <= last {
			perr = fmt.Errorf("sequence %d after %d", seq, last)
		}
		if perr != nil || final {
			rest := bytes.TrimSpace(b[min(off+end+1, len(b)):])
			if perr != nil && len(rest) > 0 {
				return nil, 0, &CorruptError{Code: CodeAppendLogCorrupt, File: name, Line: line, Byte: off, Err: perr}
			}
			// The last line: complete lines end in '\n'; one without it, or
			// one that does not parse, was cut by a crash.
			return entries, off, nil
		}
		entries = append(entries, e)
		last = seq
		off += end + 1
	}
	return entries, off, nil
}

// Log is an append log open for writing. Every write goes to the end of the
// file (O_APPEND), also after another process truncated it.
//
// A write or a sync that fails leaves the log as it was before the append:
// the bytes past Bytes are cut off and the cut is synced. After a failed
// fsync the page cache cannot be trusted (the kernel may have dropped the
// pages it could not write and report success at the next fsync), so the
// appended lines are never kept on the hope that a later sync saves them.
// If the cut itself fails, the log is broken: each Append tries the cut
// again first, and fails while it fails.
type Log struct {
	f      File
	fsync  bool
	broken error
	// Lines and Bytes measure the log since it was last emptied: Bytes is
	// where the good lines end.
	Lines int
	Bytes int64
}

// OpenLog opens (creating) the log at path on fsys for appending, cut to
// keep bytes if it is longer (a torn last line), counting lines entries in
// it.
func OpenLog(fsys FS, path string, keep int64, lines int, fsync bool) (*Log, error) {
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() > keep {
		if err := f.Truncate(keep); err != nil {
			f.Close()
			return nil, fmt.Errorf("trimming a truncated last line of %s: %w", path, err)
		}
	}
	return &Log{f: f, fsync: fsync, Lines: lines, Bytes: min(keep, st.Size())}, nil
}

// Append writes buf, which holds lines complete lines, and syncs it unless
// the log was opened without fsync. On an error nothing of buf is kept.
func (l *Log) Append(buf []byte, lines int) error {
	if l.broken != nil {
		if err := l.Rewind(); err != nil {
			return err
		}
	}
	n, err := l.f.Write(buf)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err == nil && l.fsync {
		if err = l.f.Sync(); err != nil {
			err = fmt.Errorf("fsync: %w (the lines are cut off: after a failed fsync the data is not trusted to reach the disk)", err)
		}
	}
	if err != nil {
		if rerr := l.Rewind(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	l.Lines += lines
	l.Bytes += int64(len(buf))
	return nil
}

// Rewind cuts the file back to Bytes, the end of its good lines, and syncs
// the cut. Until it succeeds the log is broken.
func (l *Log) Rewind() error {
	st, err := l.f.Stat()
	if err == nil && st.Size() > l.Bytes {
		// Only ever shorter: a file found shorter than Bytes (emptied by
		// another process) is left as it is.
		err = l.f.Truncate(l.Bytes)
	}
	if err == nil && l.fsync {
		err = l.f.Sync()
	}
	if err != nil {
		l.broken = fmt.Errorf("%s is broken: the lines of a failed append could not be cut off (%w); the journal retries the cut", l.f.Name(), err)
		return l.broken
	}
	l.broken = nil
	return nil
}

// Repair retries the cut of a broken log (see Rewind); it returns nil at
// once when the log is not broken. A reader of the file must call it
// before reading: the lines of a failed append are still in the page
// cache, and must not be read back as committed.
func (l *Log) Repair() error {
	if l.broken == nil {
		return nil
	}
	return l.Rewind()
}

// Cut cuts the file to n bytes (a torn last line another process left) and
// makes n its end.
func (l *Log) Cut(n int64) error {
	if err := l.f.Truncate(n); err != nil {
		return err
	}
	l.Bytes = n
	return nil
}

// Full reports whether the log reached every lines or limit bytes: time to
// fold it into the snapshot.
func (l *Log) Full(every int, limit int64) bool {
	return l.Lines >= every || l.Bytes >= limit
}

// Reset empties the log (its entries are in a snapshot now).
func (l *Log) Reset() error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	l.Lines, l.Bytes = 0, 0
	return nil
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }

// WriteSnapshot replaces the file at path with b atomically, on fsys: it
// writes a temporary file of a random name next to it, created exclusively
// (a planted file or link there is never written through), syncs it (with
// fsync), and renames it over path; the rename replaces a link at path,
// never its target. With fsync the directory is synced too, so the rename
// survives a power loss; a failed directory sync is an error (the rename
// may not be durable), though path already holds b.
func WriteSnapshot(fsys FS, path string, b []byte, fsync bool) error {
	f, err := fsys.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeClose(f, b, fsync)
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err != nil {
		fsys.Remove(tmp)
		return err
	}
	if fsync {
		if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
			return fmt.Errorf("syncing the directory of %s after its rename: %w", path, err)
		}
	}
	return nil
}

// writeClose writes b to f, syncs it with fsync, and closes it.
func writeClose(f File, b []byte, fsync bool) error {
	n, err := f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err == nil && fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
