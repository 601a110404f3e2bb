package journalfile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mutex is a mutex between the processes of one host that share a journal:
// the file <path>.mutex, created exclusively and holding the holder's pid and
// a random nonce. A holder whose process is gone is broken at once. A live
// holder refreshes the file's mtime every Heartbeat, so only a holder stuck
// for Stale (a frozen process) is declared abandoned and broken; nothing is
// ever killed. Breaking goes through <path>.mutex.break, taken exclusively,
// so two processes never break the same holder twice.
//
// A stuck holder that wakes up after it was broken still believes it holds
// the mutex: Stale must be far above the slowest write.
type Mutex struct {
	path      string
	stale     time.Duration
	heartbeat time.Duration
}

// NewMutex returns the mutex of the journal at path (the file is
// <path>.mutex). stale defaults to 30 s and heartbeat to a third of stale.
func NewMutex(path string, stale, heartbeat time.Duration) *Mutex {
	if stale <= 0 {
		stale = 30 * time.Second
	}
	if heartbeat <= 0 {
		heartbeat = stale / 3
	}
	m := &Mutex{path: path + ".mutex", stale: stale, heartbeat: heartbeat}
	m.removeStrays()
	return m
}

// Held is a taken Mutex.
type Held struct {
	m     *Mutex
	mine  []byte
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	start time.Time
}

// Lock takes the mutex, waiting (polling) while a live holder has it, until
// ctx ends.
func (m *Mutex) Lock(ctx context.Context) (*Held, error) {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	mine := []byte(fmt.Sprintf("%d %s\n", os.Getpid(), hex.EncodeToString(nonce)))
	wait := 50 * time.Microsecond
	for {
		err := m.create(mine, hex.EncodeToString(nonce))
		if err == nil {
			h := &Held{m: m, mine: mine, stop: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
			go h.beat()
			return h, nil
		}
		if !os.IsExist(err) {
			return nil, fmt.Errorf("journal mutex %s: %w", m.path, err)
		}
		if seen, ok := m.abandoned(); ok {
			m.breakHolder(seen)
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("journal mutex %s: %w", m.path, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Millisecond)
	}
}

// create makes the mutex file holding mine, failing with an os.IsExist error
// if it exists. The file appears with its content (written to a file of its
// own, then hard-linked into place), so a holder killed at any point leaves
// its pid behind and is broken at once, never a nameless file that must age
// out for Stale. Where the filesystem has no hard links it is created
// exclusively and then written.
func (m *Mutex) create(mine []byte, nonce string) error {
	tmp := fmt.Sprintf("%s.tmp-%d-%s", m.path, os.Getpid(), nonce)
	if err := os.WriteFile(tmp, mine, FileMode); err == nil {
		err = os.Link(tmp, m.path)
		os.Remove(tmp)
		if err == nil || os.IsExist(err) {
			return err
		}
	}
	f, err := os.OpenFile(m.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, FileMode)
	if err != nil {
		return err
	}
	_, werr := f.Write(mine)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(m.path)
	}
	return werr
}

// removeStrays removes the files create left behind in processes killed
// between writing one and removing it.
func (m *Mutex) removeStrays() {
	strays, _ := filepath.Glob(m.path + ".tmp-*")
	for _, f := range strays {
		var pid int
		var nonce string
		if _, err := fmt.Sscanf(strings.TrimPrefix(f, m.path+".tmp-"), "%d-%s", &pid, &nonce); err == nil && pid > 0 && !ProcessAlive(pid) {
			os.Remove(f)
		}
	}
}

// abandoned reads the holder; ok is true when its process is gone or it has
// not beaten for stale.
func (m *Mutex) abandoned() (seen []byte, ok bool) {
	return abandonedFile(m.path, m.stale)
}

func abandonedFile(path string, stale time.Duration) ([]byte, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, false // released meanwhile: try again
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	pid := 0
	if f := strings.Fields(string(b)); len(f) == 2 {
		pid, _ = strconv.Atoi(f[0])
	}
	if pid > 0 && !ProcessAlive(pid) {
		return b, true
	}
	// A holder that has not written its pid yet is young; one that never
	// will (killed between create and write) ages out like a stuck one.
	return b, time.Since(st.ModTime()) > stale
}

// breakHolder removes the mutex file if it still holds seen, under the break
// lock, so that a breaker never removes a holder that took the mutex after
// the one it judged abandoned.
func (m *Mutex) breakHolder(seen []byte) {
	brk := m.path + ".break"
	f, err := os.OpenFile(brk, os.O_CREATE|os.O_EXCL|os.O_WRONLY, FileMode)
	if err != nil {
		// Another process is breaking it; a breaker that died while
		// breaking (a moment's window) is broken the same way.
		if os.IsExist(err) {
			if _, ok := abandonedFile(brk, m.stale); ok {
				os.Remove(brk)
			}
		}
		return
	}
	fmt.Fprintf(f, "%d break\n", os.Getpid())
	f.Close()
	defer os.Remove(brk)
	if now, err := os.ReadFile(m.path); err == nil && bytes.Equal(now, seen) {
		os.Remove(m.path)
	}
}

// beat refreshes the mutex's mtime while it is held, so that other processes
// see a live holder.
func (h *Held) beat() {
	defer close(h.done)
	t := time.NewTicker(h.m.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			if h.ours() {
				now := time.Now()
				os.Chtimes(h.m.path, now, now)
			}
		}
	}
}

func (h *Held) ours() bool {
	b, err := os.ReadFile(h.m.path)
	return err == nil && bytes.Equal(b, h.mine)
}

// Unlock releases the mutex. It reports an error if another process broke
// it meanwhile (this holder was declared abandoned): what it wrote under the
// mutex may have raced that process's writes.
func (h *Held) Unlock() error {
	var err error
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		if !h.ours() {
			err = fmt.Errorf("journal mutex %s was broken while held for %s (raise stale_lock above the slowest write)", h.m.path, time.Since(h.start).Round(time.Millisecond))
			return
		}
		os.Remove(h.m.path)
	})
	return err
}
