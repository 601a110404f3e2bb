package journalfile

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMutexExcludes: many goroutines (standing for processes: each takes
// the file mutex itself) increment a counter kept in a file without any
// other lock; none is lost.
func TestMutexExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	counter := path + ".counter"
	os.WriteFile(counter, []byte("0"), FileMode)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			m := NewMutex(path, time.Minute, 0)
			for range 50 {
				h, err := m.Lock(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := os.ReadFile(counter)
				n, _ := strconv.Atoi(string(b))
				os.WriteFile(counter, []byte(strconv.Itoa(n+1)), FileMode)
				if err := h.Unlock(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if b, _ := os.ReadFile(counter); string(b) != "400" {
		t.Fatalf("counter = %s, want 400", b)
	}
}

// TestMutexBreaksADeadHolderAtOnce: a mutex file left by a process that is
// gone does not wait for stale.
func TestMutexBreaksADeadHolderAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	os.WriteFile(path+".mutex", []byte("999999999 abcd\n"), FileMode)
	m := NewMutex(path, time.Hour, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("a dead holder was not broken: %v", err)
	}
	h.Unlock()
}

// TestMutexLiveHolder: a live holder that beats keeps the mutex past stale;
// one that stops beating (stuck) is declared abandoned after stale, and its
// Unlock reports that.
func TestMutexLiveHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	const stale = 300 * time.Millisecond
	holder := NewMutex(path, stale, 20*time.Millisecond)
	h, err := holder.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Held and beating for several stale periods: another waits.
	ctx, cancel := context.WithTimeout(context.Background(), 4*stale)
	_, err = NewMutex(path, stale, 0).Lock(ctx)
	cancel()
	if err == nil {
		t.Fatal("a beating holder was broken")
	}
	if err := h.Unlock(); err != nil {
		t.Fatal(err)
	}
	// A stuck holder: a live pid (ours), a nonce that is not the waiter's,
	// and no heartbeat.
	os.WriteFile(path+".mutex", []byte(strconv.Itoa(os.Getpid())+" stuck\n"), FileMode)
	old := time.Now().Add(-2 * stale)
	os.Chtimes(path+".mutex", old, old)
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h2, err := NewMutex(path, stale, 0).Lock(ctx)
	if err != nil {
		t.Fatalf("a stuck holder was not broken after stale: %v", err)
	}
	// The stuck one "wakes up": its Unlock must not remove the new holder.
	stuck := &Held{m: holder, mine: []byte(strconv.Itoa(os.Getpid()) + " stuck\n"), stop: make(chan struct{}), done: make(chan struct{})}
	go stuck.beat()
	if err := stuck.Unlock(); err == nil || !strings.Contains(err.Error(), "was broken while held") {
		t.Fatalf("a broken holder's unlock: %v", err)
	}
	if _, err := os.Stat(path + ".mutex"); err != nil {
		t.Fatal("a broken holder's unlock removed the new holder's mutex")
	}
	if err := h2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestMutexHolderKilledAnywhereIsBrokenAtOnce: a process SIGKILLed at any
// point of taking and releasing the mutex leaves a mutex the next process
// takes at once (stale is an hour here): never a file without its holder's
// pid, which would have to age out.
func TestMutexHolderKilledAnywhereIsBrokenAtOnce(t *testing.T) {
	if path := os.Getenv("BOTRUN_MUTEX_CHILD"); path != "" {
		m := NewMutex(path, time.Hour, 0)
		for i := 0; ; i++ {
			h, err := m.Lock(context.Background())
			if err != nil {
				os.Exit(3)
			}
			if i == 100 {
				os.WriteFile(path+".ready", nil, FileMode)
			}
			h.Unlock()
		}
	}
	path := filepath.Join(t.TempDir(), "j")
	for round := range 10 {
		os.Remove(path + ".ready")
		cmd := exec.Command(os.Args[0], "-test.run=^TestMutexHolderKilledAnywhereIsBrokenAtOnce$")
		cmd.Env = append(os.Environ(), "BOTRUN_MUTEX_CHILD="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitFile(path+".ready", 2*time.Minute) {
			cmd.Process.Kill()
			t.Fatal("the child never took the mutex 100 times")
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		h, err := NewMutex(path, time.Hour, 0).Lock(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: the killed holder's mutex was not broken: %v", round, err)
		}
		h.Unlock()
	}
	NewMutex(path, time.Hour, 0) // removes what the killed holders left
	if left, _ := filepath.Glob(path + ".mutex.tmp-*"); len(left) > 0 {
		t.Fatalf("a new mutex left the killed holders' files %v", left)
	}
}

// waitFile waits until path exists or timeout passes.
func waitFile(path string, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}
