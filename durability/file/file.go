// Package file is the seed's FileDurability: the journals in one JSON snapshot
// file, optionally with an append log (<path>.log) of every committed change.
//
// A lock file (<path>.lock, holding the pid) refuses a second live process and
// a second open in the same process until Close. Snapshots are written
// atomically (temp file, fsync, rename). With AppendLog each commit appends one
// line to the log; the log is folded into the snapshot every CompactEvery
// entries or CompactBytes bytes, and at Close. A leftover log is always
// replayed at open. Concurrent commits share one write and one fsync, and a
// caller returns only once its change is on disk.
//
// An unreadable snapshot is refused with an error naming the file. A truncated
// last log line (a crash mid-write) is trimmed; a bad line followed by more
// lines is corruption: Open refuses it with a *CorruptError (code
// APPEND_LOG_CORRUPT, file, line and byte) and leaves the file as it is.
//
// SharedStore keeps the same format for a few processes of one host at once
// (the events package's SharedFileEventJournal): every operation runs under a
// cross-process mutex instead of the lock. The format's rules (the log, its
// corruption, the lock and the mutex) are internal/journalfile's.
//
// The journal holds users' messages: the files it creates (snapshot, log, lock)
// are readable by their owner only (0600), and the directories it creates
// 0700, whatever the process umask.
package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/internal/groupcommit"
	"github.com/botrun/botrun/internal/journalfile"
)

// Options tune the file journal. The zero value is a snapshot rewritten on
// every commit, fsynced.
type Options struct {
	// Path is the journal file (Open only; OpenStore takes it apart).
	Path string
	// AppendLog appends each change to <path>.log instead of rewriting the
	// snapshot.
	AppendLog bool
	// CompactEvery folds the log into the snapshot after this many entries
	// (default 1000).
	CompactEvery int
	// CompactBytes folds the log after it reaches this size (default 4 MiB).
	CompactBytes int64
	// NoFsync skips fsync: renames stay atomic but may sit in the page cache
	// if the machine loses power.
	NoFsync bool
	// NoLock opens the file without its lock file, for an application that
	// guarantees a single writer itself. The durability backend always
	// locks.
	NoLock bool
	// FS is the file system the journal writes through (default
	// journalfile.OS); tests inject faults with it.
	FS journalfile.FS
}

// Store is a durability.Kv kept in memory and persisted to the file.
type Store struct {
	path string
	opts Options
	// kv is the journal in memory: replaced whole when a failed write is
	// undone (recover).
	kv   atomic.Pointer[memory.Kv]
	lock *journalfile.Lock

	mu      sync.Mutex // orders apply + log line
	seq     int64      // last sequence applied in memory
	pending bytes.Buffer
	waiters []chan error
	kick    chan struct{}

	flushMu sync.Mutex // held by the flusher while writing
	log     *journalfile.Log
	snapSeq int64
	closed  bool
	stop    chan struct{}
	done    chan struct{}
	// broken is the error of a write that failed: memory is ahead of the
	// disk, so commits are refused until recover reads the disk again
	// (tried at most every recoverEvery, at a commit).
	broken    error
	lastTried time.Time
}

// recoverEvery is the least time between two attempts to recover from a
// failed write: each reads the whole journal again.
const recoverEvery = 100 * time.Millisecond

// Backend is the journals over a Store.
type Backend struct {
	*durability.KvDurability
	*Store
}

// Close closes the store: the log is folded into the snapshot and the lock is
// released.
func (b *Backend) Close() error { return b.Store.Close() }

// Open opens the journal at opts.Path (creating it if absent), replaying a leftover
// log.
func Open(_ context.Context, opts Options) (*Backend, error) {
	s, err := OpenStore(opts.Path, &opts)
	if err != nil {
		return nil, err
	}
	return &Backend{KvDurability: durability.NewKvDurability(s), Store: s}, nil
}

// ErrLocked is wrapped by the error of opening a journal another live process
// (or this one) holds, or a shared journal uses.
var ErrLocked = journalfile.ErrLocked

// withDefaults returns o with the compaction defaults filled in.
func (o Options) withDefaults() Options {
	if o.CompactEvery <= 0 {
		o.CompactEvery = 1000
	}
	if o.CompactBytes <= 0 {
		o.CompactBytes = 4 << 20
	}
	if o.FS == nil {
		o.FS = journalfile.OS
	}
	return o
}

// OpenStore opens the Kv alone.
func OpenStore(path string, opts *Options) (*Store, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o = o.withDefaults()
	s := &Store{path: path, opts: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := s.load(); err != nil {
		return nil, err
	}
	go s.flusher()
	return s, nil
}

func (s *Store) load() error {
	if err := os.MkdirAll(filepath.Dir(s.path), journalfile.DirMode); err != nil {
		return fmt.Errorf("file journal %s: %w", s.path, err)
	}
	if !s.opts.NoLock {
		lock, err := journalfile.TakeLock(s.path)
		if err != nil {
			return fmt.Errorf("file journal: %w", err)
		}
		s.lock = lock
	}
	kv, seq, log, err := loadFiles(s.opts.FS, s.path, !s.opts.NoFsync)
	if err != nil {
		s.releaseLock()
		return err
	}
	s.kv.Store(kv)
	s.seq, s.snapSeq, s.log = seq.now, seq.snapshot, log
	return nil
}

// seqs are a loaded journal's sequence numbers: of its snapshot and of its
// last entry.
type seqs struct{ snapshot, now int64 }

// loadFiles reads the journal at path: its snapshot, then the entries of its
// log the snapshot does not hold; a torn last line is trimmed. It returns the
// log open for appending.
func loadFiles(fsys journalfile.FS, path string, fsync bool) (*memory.Kv, seqs, *journalfile.Log, error) {
	var sq seqs
	state := memory.State{}
	if b, err := journalfile.ReadPrivate(path); err == nil {
		snap, err := DecodeSnapshot(b)
		if err != nil {
			return nil, sq, nil, fmt.Errorf("file journal %s: snapshot is unreadable: %w (restore it from a backup or move it aside)", path, err)
		}
		state, sq.snapshot = snap.KV, snap.Seq
	} else if !os.IsNotExist(err) {
		return nil, sq, nil, fmt.Errorf("file journal %s: %w", path, err)
	}
	kv := memory.Import(state)
	sq.now = sq.snapshot
	logPath := path + ".log"
	b, err := journalfile.ReadPrivate(logPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, sq, nil, fmt.Errorf("file journal %s: %w", logPath, err)
	}
	entries, keep, err := DecodeLog(logPath, b)
	if err != nil {
		return nil, sq, nil, fmt.Errorf("file journal: %w", err)
	}
	lines := 0
	for _, e := range entries {
		lines++
		if e.Seq <= sq.now {
			continue // already in the snapshot (a crash between snapshot and truncate)
		}
		if err := kv.Commit(context.Background(), e.writes()); err != nil {
			return nil, sq, nil, fmt.Errorf("file journal %s: replaying entry %d: %w", logPath, e.Seq, err)
		}
		sq.now = e.Seq
	}
	log, err := journalfile.OpenLog(fsys, logPath, int64(keep), lines, fsync)
	if err != nil {
		return nil, sq, nil, fmt.Errorf("file journal %s: %w", logPath, err)
	}
	return kv, sq, log, nil
}

func (s *Store) releaseLock() {
	if s.lock != nil {
		s.lock.Release()
	}
}

// Get implements durability.Kv.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	return s.kv.Load().Get(ctx, key)
}

// Range implements durability.Kv.
func (s *Store) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	return s.kv.Load().Range(ctx, group, ix, after, max, limit)
}

// Commit implements durability.Kv: it applies the commit in memory, queues its
// log line (or a snapshot), and returns once that is on disk. After a write
// failed (a full disk, an I/O error, a failed fsync) it first reads the
// journal back from the disk (recover), so service resumes without a restart
// once the disk takes writes again; until then it fails fast.
func (s *Store) Commit(ctx context.Context, writes []durability.Write) error {
	// Every write gets its version here, so the log replays it exactly; the
	// line is encoded before taking the lock, which orders only the apply and
	// the append.
	writes = slices.Clone(writes)
	for i := range writes {
		if writes[i].Next <= 0 && !writes[i].Delete {
			writes[i].Next = time.Now().UnixNano()
		}
	}
	var body []byte
	if s.opts.AppendLog {
		var err error
		if body, err = json.Marshal(newEntry(0, writes).Writes); err != nil {
			return err
		}
	}
	if err := s.recover(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return durability.ErrClosed
	}
	if s.broken != nil {
		err := s.broken
		s.mu.Unlock()
		return err
	}
	if err := s.kv.Load().Commit(ctx, writes); err != nil {
		s.mu.Unlock()
		return err
	}
	s.seq++
	if s.opts.AppendLog {
		s.pending.WriteString(`{"seq":` + strconv.FormatInt(s.seq, 10) + `,"w":`)
		s.pending.Write(body)
		s.pending.WriteString("}\n")
	}
	done := make(chan error, 1)
	s.waiters = append(s.waiters, done)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return <-done
}

// flusher writes what Commit queued: one write and one fsync for every commit
// that arrived meanwhile (group commit).
func (s *Store) flusher() {
	defer close(s.done)
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			s.flush()
			return
		}
		s.flush()
	}
}

func (s *Store) flush() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	buf := bytes.Clone(s.pending.Bytes())
	s.pending.Reset()
	waiters := s.waiters
	s.waiters = nil
	seq := s.seq
	broken := s.broken
	var state memory.State
	if !s.opts.AppendLog && len(waiters) > 0 && broken == nil {
		state = s.kv.Load().Export()
	}
	s.mu.Unlock()
	if len(waiters) == 0 {
		return
	}
	if broken != nil {
		// Queued behind a write that failed: their changes sit on top of
		// the failed one in memory, which recover throws away.
		for _, w := range waiters {
			w <- broken
		}
		return
	}
	start := time.Now()
	var err error
	if s.opts.AppendLog {
		// A failed append leaves the log as it was (journalfile.Log).
		err = s.log.Append(buf, len(waiters))
		if err == nil && s.log.Full(s.opts.CompactEvery, s.opts.CompactBytes) {
			// The lines are on disk: a failed compaction does not fail
			// their commits; the log keeps growing until one succeeds.
			s.compact()
		}
	} else {
		err = s.writeSnapshot(state, seq)
	}
	groupcommit.Report(len(waiters), time.Since(start))
	if err != nil {
		err = fmt.Errorf("file journal %s: %w", s.path, err)
		s.mu.Lock()
		s.broken = err // memory is ahead of the disk: refuse further commits
		// Undone now, so that no read serves the failed commits; if the
		// disk refuses even that, the next commits try again.
		s.recoverLocked()
		s.mu.Unlock()
	}
	for _, w := range waiters {
		w <- err
	}
}

// recover finishes undoing a failed write that flush could not undo at
// once (recoverLocked failed). It returns nil when the store is not broken
// (or is no longer), and the write's error while the disk still refuses, or
// when it was tried less than recoverEvery ago.
func (s *Store) recover() error {
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken == nil {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		return nil // another commit recovered it
	}
	if s.closed {
		return durability.ErrClosed
	}
	if time.Since(s.lastTried) < recoverEvery {
		return s.broken
	}
	return s.recoverLocked()
}

// recoverLocked undoes a failed write, with flushMu and mu held: it
// answers the commits queued behind it with its error, cuts the log back to
// its last good line, and reads the journal again from the disk, so memory
// holds exactly what was acknowledged. Reads in between may have seen the
// failed commits (as they may see any commit before it is acknowledged).
func (s *Store) recoverLocked() error {
	s.lastTried = time.Now()
	for _, w := range s.waiters {
		w <- s.broken
	}
	s.waiters = nil
	s.pending.Reset()
	if err := s.log.Rewind(); err != nil {
		return fmt.Errorf("%w (recovering: %w)", s.broken, err)
	}
	kv, seq, log, err := loadFiles(s.opts.FS, s.path, !s.opts.NoFsync)
	if err != nil {
		return fmt.Errorf("%w (recovering: %w)", s.broken, err)
	}
	s.log.Close()
	// The old memory is not closed: a read that loaded it just before
	// the swap finishes on it.
	s.kv.Store(kv)
	s.seq, s.snapSeq, s.log = seq.now, seq.snapshot, log
	s.broken = nil
	return nil
}

// compact folds the log into the snapshot: it snapshots everything applied
// so far (with its sequence), then truncates the log. A crash in between is
// harmless: replay skips the entries the snapshot holds.
func (s *Store) compact() error {
	s.mu.Lock()
	state, seq := s.kv.Load().Export(), s.seq
	queued := bytes.Clone(s.pending.Bytes())
	s.pending.Reset()
	s.mu.Unlock()
	if err := s.writeSnapshot(state, seq); err != nil {
		// The lines queued meanwhile are not in a snapshot: put them back
		// in front of those queued since.
		s.mu.Lock()
		rest := bytes.Clone(s.pending.Bytes())
		s.pending.Reset()
		s.pending.Write(queued)
		s.pending.Write(rest)
		s.mu.Unlock()
		return err
	}
	// Lines queued meanwhile are in the snapshot already; their waiters are
	// answered by the next flush.
	return s.log.Reset()
}

func (s *Store) writeSnapshot(state memory.State, seq int64) error {
	b, err := encodeSnapshot(state, seq)
	if err != nil {
		return err
	}
	if err := journalfile.WriteSnapshot(s.opts.FS, s.path, b, !s.opts.NoFsync); err != nil {
		return err
	}
	s.snapSeq = seq
	return nil
}

// Close flushes, folds the log into the snapshot, closes the files and
// releases the lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var err error
	if s.broken == nil {
		s.mu.Lock()
		state, seq := s.kv.Load().Export(), s.seq
		s.mu.Unlock()
		if err = s.writeSnapshot(state, seq); err == nil {
			err = s.log.Reset()
		}
	}
	err = errors.Join(err, s.log.Close())
	s.kv.Load().Close()
	s.releaseLock()
	if err != nil {
		return fmt.Errorf("file journal %s: close: %w", s.path, err)
	}
	return nil
}

// Path is the snapshot file.
func (s *Store) Path() string { return s.path }

// Locked reports whether the store holds its lock file (it was opened
// without NoLock).
func (s *Store) Locked() bool { return s.lock != nil }

// LockHolder returns the pid in the lock file of the journal at path, or 0
// when no live process holds it.
func LockHolder(path string) int { return journalfile.LockHolder(path) }
