package journalfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// FS is the file system a journal writes through: the append log, the
// snapshot's temporary file, its rename and the directory's sync. OS is the
// real one; a test passes one that injects faults (faultfs) to try every
// failure of a commit, a compaction and a snapshot. Reads go to the files
// directly: a fault there is an error at open, never damage.
type FS interface {
	// OpenFile opens path as OpenPrivate does (private, no links followed).
	OpenFile(path string, flag int) (File, error)
	// CreateTemp creates a new file in dir exclusively, as os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Rename renames from over to atomically.
	Rename(from, to string) error
	// Remove removes path.
	Remove(path string) error
	// SyncDir makes the directory's entries (a rename) durable.
	SyncDir(dir string) error
}

// File is a journal file open for writing.
type File interface {
	Write(b []byte) (int, error)
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
	Close() error
	Name() string
}

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(path string, flag int) (File, error) {
	f, err := OpenPrivate(path, flag)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return f, nil
}

func (osFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

func (osFS) Remove(path string) error { return os.Remove(path) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
