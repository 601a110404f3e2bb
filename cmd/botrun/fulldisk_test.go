package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/soak"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// tmpfs mounts a tmpfs of size bytes on a new directory for the test and
// returns it. Mounting needs root (CAP_SYS_ADMIN): without it the test is
// skipped, and under CI=true it fails.
func tmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("a full disk needs a small tmpfs, and mounting one failed (run as root): %v: %s", err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file into dir until the disk refuses (ENOSPC) and returns
// it; removing it frees the disk.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				// The last few bytes too: a write of one page must fail.
				for errors.Is(err, syscall.ENOSPC) && len(chunk) > 1 {
					chunk = chunk[:len(chunk)/2]
					_, err = f.Write(chunk)
				}
				return path
			}
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
}

// alertSink is an [alerts] url: it records the alerts' bodies.
type alertSink struct {
	mu     sync.Mutex
	bodies []string
}

func (s *alertSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
}

func (s *alertSink) has(substr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bodies {
		if strings.Contains(b, substr) {
			return true
		}
	}
	return false
}

// TestFullDisk runs botrun with its journal on a small tmpfs, fills the
// disk in the middle of traffic, holds it full while messages keep coming,
// then frees it. While full, admission answers 503 with Retry-After within
// the client's timeout and an admission:failed alert reaches the [alerts]
// url; once freed, the same process (no restart) admits everything, and
// every message accepted before, during or after is answered exactly once.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the full-disk test takes a while")
	}
	bin := buildBotrun(t)
	module := wasmbuild.Go(t, "../../examples/echo")
	for _, backend := range []string{"sqlite", "file", "file-log", "events"} {
		t.Run(backend, func(t *testing.T) { fullDisk(t, bin, module, backend) })
	}
}

func fullDisk(t *testing.T, bin, module, backend string) {
	disk := tmpfs(t, 32<<20)
	sink := &alertSink{}
	sinkSrv := httptest.NewServer(sink)
	defer sinkSrv.Close()
	keys := backendKeys(t, strings.TrimSuffix(backend, "-log"), disk)
	if backend == "file-log" {
		keys += "\nappend_log = true\ncompact_every = 50"
	}
	f := startFleet(t, bin, module, []string{keys}, fmt.Sprintf("[alerts]\nurl = %q\nsecret = \"alerts-secret-0123456789\"", sinkSrv.URL))
	// make soak fills and frees the disk 5 times, after a random number
	// of messages and held full for a random number of refusals (seed
	// printed); make test once, after 60, for 20.
	cycles, before, refusals := 1, func() int64 { return 60 }, func() int64 { return 20 }
	if soak.On() {
		rng := soak.Rand(t, "./cmd/botrun")
		cycles = 5
		before = func() int64 { return 1 + rng.Int64N(120) }
		refusals = func() int64 { return 1 + rng.Int64N(40) }
	}
	f.drive(200 + 140*cycles)
	var atFull int64
	var heldFor, resumed time.Duration
	for cycle := range cycles {
		if n := before(); !f.admittedMore(f.count.Load(), n, time.Minute) {
			t.Fatalf("cycle %d: %d messages were not admitted before the disk filled\n%s", cycle, n, f.logs())
		}
		refused := f.ref.withRetryAfter.Load()
		filler := fill(t, disk)
		full := time.Now()
		atFull = f.count.Load()
		// Held full until admission refused some deliveries and the
		// alert came.
		hold := refusals()
		if !waitfor.True(2*time.Minute, func() bool {
			return f.ref.withRetryAfter.Load() >= refused+hold && sink.has("admission:failed")
		}) {
			t.Fatalf("cycle %d, with the disk full: %d refusals with Retry-After, alert seen %v; want %d and true\n%s", cycle, f.ref.withRetryAfter.Load()-refused, sink.has("admission:failed"), hold, f.logs())
		}
		heldFor = time.Since(full)
		os.Remove(filler)
		freed := time.Now()
		if !f.admittedMore(f.count.Load(), 1, 2*time.Minute) {
			ls, _ := exec.Command("ls", "-la", disk).CombinedOutput()
			df, _ := exec.Command("df", disk).CombinedOutput()
			t.Fatalf("cycle %d: nothing admitted 2 minutes after the disk was freed\n%s%s\n%s", cycle, ls, df, f.logs())
		}
		resumed = time.Since(freed)
	}
	o := f.finish()
	fmt.Printf("full disk %s: %d messages, %d fill(s) (the last at %d admitted, held full %s): %d refusals with Retry-After (slowest %s), alert sent; admitting again %s after freeing; lost %d, duplicated %d, ambiguous %d\n",
		backend, f.messages, cycles, atFull, heldFor.Round(time.Millisecond), f.ref.withRetryAfter.Load(), time.Duration(f.ref.slowest.Load()).Round(time.Millisecond), resumed.Round(time.Millisecond), o.lost, o.duplicated, o.ambiguous)
}
