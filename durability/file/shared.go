package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/internal/groupcommit"
	"github.com/botrun/botrun/internal/journalfile"
)

// SharedOptions tune a SharedStore.
type SharedOptions struct {
	// AppendLog, CompactEvery, CompactBytes and NoFsync are as in Options
	// (NoLock does not apply: a shared store never takes the lock file).
	Options
	// StaleLock is how long a holder of the cross-process mutex may go
	// without a heartbeat before it is declared abandoned (default 30 s).
	// A holder whose process is gone is broken at once.
	StaleLock time.Duration
	// Heartbeat is how often a holder refreshes the mutex (default a third
	// of StaleLock).
	Heartbeat time.Duration
}

// SharedStore is a durability.Kv in the file journal's format (snapshot and
// append log) that several processes of one host open at once. Every
// operation, reads included, runs under a cross-process mutex (<path>.mutex)
// over the current file: it first applies what other processes wrote since
// (the log's new lines, or the snapshot if it is newer), then reads or
// writes. A write appends one line to <path>.log (AppendLog) or rewrites the
// snapshot. Concurrent operations of this process share one mutex hold and
// one write (group commit), and a caller returns once its write is on disk.
//
// A file that a live locked journal (a file journal or a locked events
// journal) holds is refused at every operation with an error wrapping
// ErrLocked, and a locked journal refuses a file a live SharedStore uses.
// It is meant for a few processes on one host's local disk (not NFS).
type SharedStore struct {
	path  string
	opts  SharedOptions
	mutex *journalfile.Mutex
	leave func()
	gc    *groupcommit.Committer[*sharedOp]

	// Owned by the group committer's writer.
	kv     *memory.Kv
	seq    int64 // last sequence applied
	logOff int64 // bytes of the log applied or skipped
	lines  int   // lines in those bytes
	log    *journalfile.Log
	reload bool // kv is ahead of or apart from the file: read it again

	closeOnce sync.Once
	closeErr  error
}

type sharedOp struct {
	ctx context.Context
	// run reads from kv or applies a commit to it, returning the writes
	// to persist.
	run  func(kv *memory.Kv) ([]durability.Write, error)
	done chan error
}

// OpenSharedStore opens the journal file at path for sharing (creating it if
// absent). It refuses a file a live locked journal holds and a damaged file.
func OpenSharedStore(path string, opts *SharedOptions) (*SharedStore, error) {
	o := SharedOptions{}
	if opts != nil {
		o = *opts
	}
	o.Options = o.withDefaults()
	if err := os.MkdirAll(filepath.Dir(path), journalfile.DirMode); err != nil {
		return nil, fmt.Errorf("shared journal %s: %w", path, err)
	}
	leave, err := journalfile.JoinShared(path)
	if err != nil {
		return nil, err
	}
	log, err := journalfile.OpenLog(o.FS, path+".log", math.MaxInt64, 0, !o.NoFsync)
	if err != nil {
		leave()
		return nil, fmt.Errorf("shared journal %s: %w", path, err)
	}
	s := &SharedStore{path: path, opts: o, mutex: journalfile.NewMutex(path, o.StaleLock, o.Heartbeat),
		leave: leave, log: log, reload: true}
	s.gc = groupcommit.New(256, s.run)
	// A first operation reads the file: a damaged or locked file is refused
	// now rather than at the first write.
	if err := s.do(context.Background(), func(*memory.Kv) ([]durability.Write, error) { return nil, nil }); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// do runs fn under the mutex over the current file, in this process's next
// batch, and returns once its writes are on disk.
func (s *SharedStore) do(ctx context.Context, fn func(kv *memory.Kv) ([]durability.Write, error)) error {
	op := &sharedOp{ctx: ctx, run: fn, done: make(chan error, 1)}
	if err := s.gc.Submit(op); err != nil {
		return durability.ErrClosed
	}
	return <-op.done
}

// run is the group committer's batch: one mutex hold, one refresh, the
// operations in order, one write.
func (s *SharedStore) run(batch []*sharedOp) {
	answer := func(err error) {
		for _, op := range batch {
			op.done <- err
		}
	}
	held, err := s.mutex.Lock(context.Background())
	if err != nil {
		answer(fmt.Errorf("shared journal %s: %w", s.path, err))
		return
	}
	// A failed append whose lines could not be cut off: cut them now,
	// before reading the log (they are not committed).
	err = s.log.Repair()
	if err == nil {
		err = s.refresh()
	}
	if err == nil {
		if pid := journalfile.LockHolder(s.path); pid != 0 {
			err = fmt.Errorf("shared journal: %w: %s.lock is held by live process %d, which opened the file as a locked journal (stop it, or open the file shared everywhere)", ErrLocked, s.path, pid)
		}
	}
	if err != nil {
		if uerr := held.Unlock(); uerr != nil {
			s.reload = true
		}
		answer(err)
		return
	}
	errs := make([]error, len(batch))
	var writes []durability.Write
	for i, op := range batch {
		if errs[i] = op.ctx.Err(); errs[i] != nil {
			continue
		}
		ws, err := op.run(s.kv)
		errs[i] = err
		if err == nil {
			writes = append(writes, ws...)
		}
	}
	var perr error
	if len(writes) > 0 {
		if perr = s.persist(writes); perr != nil {
			perr = fmt.Errorf("shared journal %s: %w", s.path, perr)
			s.reload = true // memory is ahead of the file
		}
	}
	if uerr := held.Unlock(); uerr != nil && len(writes) > 0 {
		// Another process took the mutex from this one as abandoned: its
		// writes may have raced ours. Say so, and read the file again.
		perr = errors.Join(perr, uerr)
		s.reload = true
	}
	for i, op := range batch {
		if errs[i] == nil {
			errs[i] = perr
		}
		op.done <- errs[i]
	}
}

// refresh brings kv up to the file: a newer snapshot is read whole, new log
// lines are applied, and a torn last line (a writer that died mid-append) is
// trimmed. Called under the mutex.
func (s *SharedStore) refresh() error {
	if !s.reload {
		head := make([]byte, 64)
		n, err := readHead(s.path, head)
		if err != nil {
			return err
		}
		if seq, ok := snapshotSeq(head[:n]); (n > 0 && !ok) || seq > s.seq {
			s.reload = true
		}
	}
	if s.reload {
		if err := s.loadSnapshot(); err != nil {
			return err
		}
	}
	err := s.tail()
	if errors.Is(err, errLogMoved) {
		// Emptied and written again since we read it, or out of step
		// with the snapshot: read everything.
		if err = s.loadSnapshot(); err == nil {
			err = s.tail()
		}
	}
	return err
}

// errLogMoved says the log is not the continuation of what kv holds.
var errLogMoved = errors.New("the log moved")

func readHead(path string, head []byte) (int, error) {
	f, err := journalfile.OpenPrivate(path, os.O_RDONLY)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("shared journal %s: %w", path, err)
	}
	defer f.Close()
	n, err := io.ReadFull(f, head)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return n, err
}

// loadSnapshot replaces kv with the snapshot's content; the log is read
// again from its start.
func (s *SharedStore) loadSnapshot() error {
	state, seq := memory.State{}, int64(0)
	if b, err := journalfile.ReadPrivate(s.path); err == nil {
		snap, err := DecodeSnapshot(b)
		if err != nil {
			return fmt.Errorf("shared journal %s: snapshot is unreadable: %w (restore it from a backup or move it aside)", s.path, err)
		}
		state, seq = snap.KV, snap.Seq
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("shared journal %s: %w", s.path, err)
	}
	s.kv, s.seq, s.logOff, s.lines, s.reload = memory.Import(state), seq, 0, 0, false
	return nil
}

// tail applies the log's lines past logOff.
func (s *SharedStore) tail() error {
	logPath := s.path + ".log"
	f, err := journalfile.OpenPrivate(logPath, os.O_RDONLY)
	if os.IsNotExist(err) {
		s.logOff, s.lines = 0, 0
		s.log.Lines, s.log.Bytes = 0, 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("shared journal %s: %w", logPath, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shared journal %s: %w", logPath, err)
	}
	from := s.logOff
	if st.Size() < from {
		from = 0 // emptied since (folded into a snapshot)
		s.logOff, s.lines = 0, 0
	}
	b := make([]byte, st.Size()-from)
	if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
		return fmt.Errorf("shared journal %s: %w", logPath, err)
	}
	entries, keep, err := DecodeLog(logPath, b)
	if err != nil {
		if from > 0 {
			return errLogMoved // we may have started mid-line
		}
		s.reload = true
		return fmt.Errorf("shared journal: %w", err)
	}
	for _, e := range entries {
		if e.Seq <= s.seq {
			continue // in the snapshot already
		}
		if e.Seq != s.seq+1 {
			if from > 0 {
				return errLogMoved
			}
			s.reload = true
			return fmt.Errorf("shared journal %s: entry %d follows %d: entries are missing (restore the journal from a backup or move it aside)", logPath, e.Seq, s.seq)
		}
		if err := s.kv.Commit(context.Background(), e.writes()); err != nil {
			s.reload = true
			return fmt.Errorf("shared journal %s: replaying entry %d: %w", logPath, e.Seq, err)
		}
		s.seq = e.Seq
	}
	if keep < len(b) {
		if from > 0 {
			// Read from the start before cutting anything: what looks
			// torn from here may be a whole line of a log emptied and
			// written again since.
			return errLogMoved
		}
		// A torn last line: its writer died holding the mutex, which we
		// hold now. Cut it so the next line starts clean.
		if err := s.log.Cut(int64(keep)); err != nil {
			return fmt.Errorf("shared journal %s: trimming a truncated last line: %w", logPath, err)
		}
	}
	s.logOff, s.lines = from+int64(keep), s.lines+len(entries)
	s.log.Lines, s.log.Bytes = s.lines, s.logOff
	return nil
}

// persist writes the batch's writes (already applied to kv) as the next
// entry: a log line, or a new snapshot.
func (s *SharedStore) persist(writes []durability.Write) error {
	seq := s.seq + 1
	if !s.opts.AppendLog {
		if err := s.writeSnapshot(seq); err != nil {
			return err
		}
		if s.logOff > 0 {
			// Lines other processes appended are in the snapshot now.
			if err := s.log.Reset(); err != nil {
				return err
			}
			s.logOff, s.lines = 0, 0
		}
		s.seq = seq
		return nil
	}
	body, err := json.Marshal(newEntry(0, writes).Writes)
	if err != nil {
		return err
	}
	var line bytes.Buffer
	line.WriteString(`{"seq":` + strconv.FormatInt(seq, 10) + `,"w":`)
	line.Write(body)
	line.WriteString("}\n")
	if err := s.log.Append(line.Bytes(), 1); err != nil {
		return err
	}
	s.seq, s.logOff, s.lines = seq, s.logOff+int64(line.Len()), s.lines+1
	if s.log.Full(s.opts.CompactEvery, s.opts.CompactBytes) {
		// The line is on disk: a compaction that fails does not fail the
		// commit; the log grows until one succeeds.
		if err := s.writeSnapshot(seq); err != nil {
			return nil
		}
		// A crash here is harmless: replay skips the entries the
		// snapshot holds.
		if err := s.log.Reset(); err != nil {
			return nil
		}
		s.logOff, s.lines = 0, 0
	}
	return nil
}

func (s *SharedStore) writeSnapshot(seq int64) error {
	b, err := encodeSnapshot(s.kv.Export(), seq)
	if err != nil {
		return err
	}
	// A temp file per process: a holder declared abandoned that wakes up
	// must not write into another's.
	return journalfile.WriteSnapshot(s.opts.FS, s.path, b, !s.opts.NoFsync)
}

// Get implements durability.Kv.
func (s *SharedStore) Get(ctx context.Context, key string) (value []byte, version int64, err error) {
	err = s.do(ctx, func(kv *memory.Kv) ([]durability.Write, error) {
		var err error
		value, version, err = kv.Get(ctx, key)
		return nil, err
	})
	return value, version, err
}

// Range implements durability.Kv.
func (s *SharedStore) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) (out []durability.IndexEntry, err error) {
	err = s.do(ctx, func(kv *memory.Kv) ([]durability.Write, error) {
		var err error
		out, err = kv.Range(ctx, group, ix, after, max, limit)
		return nil, err
	})
	return out, err
}

// Commit implements durability.Kv: the version checks run against the
// current file, under the mutex.
func (s *SharedStore) Commit(ctx context.Context, writes []durability.Write) error {
	writes = slices.Clone(writes)
	for i := range writes {
		if writes[i].Next <= 0 && !writes[i].Delete {
			writes[i].Next = time.Now().UnixNano()
		}
	}
	return s.do(ctx, func(kv *memory.Kv) ([]durability.Write, error) {
		if err := kv.Commit(ctx, writes); err != nil {
			return nil, err
		}
		return writes, nil
	})
}

// Close lets the operations already called finish and refuses later ones
// with durability.ErrClosed. It leaves the log as it is: other processes may
// be using the file.
func (s *SharedStore) Close() error {
	s.closeOnce.Do(func() {
		s.gc.Close()
		s.leave()
		s.closeErr = s.log.Close()
	})
	return s.closeErr
}

// Path is the snapshot file.
func (s *SharedStore) Path() string { return s.path }
