package wasm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/host/wasm/internal/hostfuncs"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// countingSink is a log sink that keeps only its byte count, its longest
// write (one slog line) and the truncation lines, so a flood costs the test
// nothing.
type countingSink struct {
	mu sync.Mutex
	sinkCount
}

// sinkCount is what a countingSink saw.
type sinkCount struct {
	bytes     int
	lines     int
	longest   int
	truncated []string
}

func (s *countingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes += len(p)
	s.lines++
	s.longest = max(s.longest, len(p))
	if bytes.Contains(p, []byte("guest output truncated")) {
		s.truncated = append(s.truncated, string(p))
	}
	return len(p), nil
}

// take returns what the sink saw since the last take.
func (s *countingSink) take() sinkCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sinkCount
	s.sinkCount = sinkCount{}
	return out
}

func hostileModule(t *testing.T, sink *countingSink) *Module {
	t.Helper()
	// A handler timeout a loaded machine under -race never reaches: the
	// guests write 128 MiB, and what is tested is the cap, not the clock.
	e, err := NewEngine(context.Background(), Config{Workers: 1, CacheDir: TestCacheDir, HandlerTimeout: 5 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "testdata/guests/hostile"))
	if err != nil {
		t.Fatal(err)
	}
	sink.take()
	return m
}

// logBound is the most one event may put in the host log: its byte budget,
// plus each line's attributes (time, level, module, event, stream) and the
// truncation line.
const logBound = hostfuncs.OutputBudgetBytes + hostfuncs.OutputBudgetLines*256 + 1024

// TestGuestOutputCapped checks that guest stdout is capped per event: 8 x 16
// MiB without a newline, and one fd_write of 32 iovecs over the same 1 MiB,
// each reach the host log as lines of at most 8 KiB within the event's budget,
// then one "truncated N bytes" line with the exact count, and the guest
// carries on.
func TestGuestOutputCapped(t *testing.T) {
	sink := &countingSink{}
	m := hostileModule(t, sink)
	for _, tt := range []struct {
		cmd, reply string
		wrote      int
	}{
		{"stdout", "stdout wrote 134217728", 8 * 16 << 20},
		{"iovec", "iovec errno 0 wrote 33554432", 32 << 20},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			rec := &recorder{}
			if err := m.Handle(context.Background(), event("o-"+tt.cmd, tt.cmd), rec); err != nil {
				t.Fatal(err)
			}
			if got := rec.texts(); len(got) != 1 || got[0] != tt.reply {
				t.Fatalf("sends = %q, want [%s]", got, tt.reply)
			}
			got := sink.take()
			t.Logf("%s: %d bytes wrote %d log bytes in %d lines, longest %d", tt.cmd, tt.wrote, got.bytes, got.lines, got.longest)
			if got.bytes > logBound {
				t.Errorf("the host logged %d bytes for one event, want at most %d", got.bytes, logBound)
			}
			if got.longest > hostfuncs.MaxOutputLine+512 {
				t.Errorf("the longest log line is %d bytes, want lines cut at %d", got.longest, hostfuncs.MaxOutputLine)
			}
			want := fmt.Sprintf("guest output truncated %d bytes", tt.wrote-hostfuncs.OutputBudgetBytes)
			if len(got.truncated) != 1 || !strings.Contains(got.truncated[0], want) || !strings.Contains(got.truncated[0], "event=o-"+tt.cmd) {
				t.Errorf("truncation lines %q, want one with %q", got.truncated, want)
			}
		})
	}
	// The next event has its whole budget again.
	rec := &recorder{}
	if err := m.Handle(context.Background(), event("o-after", "log"), rec); err != nil {
		t.Fatal(err)
	}
	if got := sink.take(); got.bytes < hostfuncs.OutputBudgetBytes {
		t.Fatalf("the next event logged %d bytes, want its own budget of %d", got.bytes, hostfuncs.OutputBudgetBytes)
	}
}

// TestGuestLogFloodCapped checks that the log host function spends the same
// budget: 5,000 lines of 8 KiB, and 100,000 empty lines on stderr plus
// 100,000 empty log calls, each log within one event's bound.
func TestGuestLogFloodCapped(t *testing.T) {
	sink := &countingSink{}
	m := hostileModule(t, sink)
	for _, tt := range []struct{ cmd, want string }{
		{"log", fmt.Sprintf("guest output truncated %d bytes", 5000*8<<10-hostfuncs.OutputBudgetBytes)},
		{"lines", "guest output truncated "},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			rec := &recorder{}
			if err := m.Handle(context.Background(), event("l-"+tt.cmd, tt.cmd), rec); err != nil {
				t.Fatal(err)
			}
			if got := rec.texts(); len(got) != 1 || got[0] != tt.cmd+" done" {
				t.Fatalf("sends = %q", got)
			}
			got := sink.take()
			t.Logf("%s: %d log bytes in %d lines", tt.cmd, got.bytes, got.lines)
			if got.bytes > logBound || got.lines > hostfuncs.OutputBudgetLines+1 {
				t.Errorf("the host logged %d bytes in %d lines for one event, want at most %d bytes and %d lines", got.bytes, got.lines, logBound, hostfuncs.OutputBudgetLines+1)
			}
			if len(got.truncated) != 1 || !strings.Contains(got.truncated[0], tt.want) {
				t.Errorf("truncation lines %q, want one with %q", got.truncated, tt.want)
			}
		})
	}
}
