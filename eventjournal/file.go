package eventjournal

import (
	"time"

	"github.com/botrun/botrun/durability/file"
)

// FileOptions tune a FileEventJournal; the zero value (or nil) is a snapshot
// rewritten whole on every write, fsynced, without a lock file.
type FileOptions struct {
	// Lock takes <path>.lock with this process's pid: a second live
	// process is refused, and so is a second open of the file in this
	// process until Close, and a file a live SharedFileEventJournal uses.
	// A bot's journal must be locked.
	Lock bool
	// AppendLog appends each write to <path>.log instead of rewriting the
	// file; the log is folded into the snapshot every CompactEvery entries
	// (default 1000) or CompactBytes (default 4 MiB), and at Close.
	AppendLog    bool
	CompactEvery int
	CompactBytes int64
	// NoFsync skips fsync: renames stay atomic, but a power loss may lose
	// writes still in the page cache.
	NoFsync bool
	// Now is the journal's clock (nil: time.Now).
	Now func() time.Time
}

// FileEventJournal is a Journal in one file that one process owns. A leftover
// log is replayed at open; a torn last line is trimmed; a bad line before
// the end is refused with a *file.CorruptError (APPEND_LOG_CORRUPT, file, line
// and byte) and the file is left as it is. Concurrent writes share one file
// write and one fsync.
type FileEventJournal struct {
	*KvJournal
	store *file.Store
}

// OpenFile opens the journal at path, creating it if absent.
func OpenFile(path string, o *FileOptions) (*FileEventJournal, error) {
	if o == nil {
		o = &FileOptions{}
	}
	s, err := file.OpenStore(path, &file.Options{AppendLog: o.AppendLog, CompactEvery: o.CompactEvery,
		CompactBytes: o.CompactBytes, NoFsync: o.NoFsync, NoLock: !o.Lock})
	if err != nil {
		return nil, err
	}
	return &FileEventJournal{KvJournal: NewKvJournal(s, o.Now), store: s}, nil
}

// Path is the journal's file.
func (j *FileEventJournal) Path() string { return j.store.Path() }

// Locked reports whether the journal was opened with Lock.
func (j *FileEventJournal) Locked() bool { return j.store.Locked() }

// SharedOptions tune a SharedFileEventJournal; the zero value (or nil) is a
// snapshot rewritten whole on every write, fsynced, with a 30 s stale lock.
type SharedOptions struct {
	// AppendLog, CompactEvery, CompactBytes and NoFsync are as in
	// FileOptions; the log is folded every CompactEvery entries or
	// CompactBytes (not at Close: other processes may go on using it).
	AppendLog    bool
	CompactEvery int
	CompactBytes int64
	NoFsync      bool
	// StaleLock is how long a holder of <path>.mutex may go without a
	// heartbeat before it is declared abandoned (default 30 s); a holder
	// whose process is gone is broken at once. Keep it far above the
	// slowest write.
	StaleLock time.Duration
	// Heartbeat is how often a holder refreshes the mutex (default a third
	// of StaleLock).
	Heartbeat time.Duration
	// Now is the journal's clock (nil: time.Now).
	Now func() time.Time
}

// SharedFileEventJournal is a Journal in one file that a few processes of one
// host open at once (a local disk with atomic rename and exclusive create;
// not NFS). Every operation runs under the cross-process mutex <path>.mutex
// over the current file, so claims are exclusive and fencing tokens hold
// across processes. The file's format is FileEventJournal's; a file that a
// live locked FileEventJournal holds is refused at every operation.
type SharedFileEventJournal struct {
	*KvJournal
	store *file.SharedStore
}

// OpenShared opens the journal at path for sharing, creating it if absent.
func OpenShared(path string, o *SharedOptions) (*SharedFileEventJournal, error) {
	if o == nil {
		o = &SharedOptions{}
	}
	s, err := file.OpenSharedStore(path, &file.SharedOptions{
		Options:   file.Options{AppendLog: o.AppendLog, CompactEvery: o.CompactEvery, CompactBytes: o.CompactBytes, NoFsync: o.NoFsync},
		StaleLock: o.StaleLock, Heartbeat: o.Heartbeat,
	})
	if err != nil {
		return nil, err
	}
	return &SharedFileEventJournal{KvJournal: NewKvJournal(s, o.Now), store: s}, nil
}

// Path is the journal's file.
func (j *SharedFileEventJournal) Path() string { return j.store.Path() }
