package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// recorder is an Env that records sends and answers them as sent.
type recorder struct {
	mu    sync.Mutex
	sends []abi.SendRequest
}

func (r *recorder) Send(_ context.Context, req abi.SendRequest) (abi.SendResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends = append(r.sends, req)
	return abi.SendResult{Status: abi.SendSent, Key: fmt.Sprintf("k%d", len(r.sends)), Ref: fmt.Sprint(len(r.sends))}, nil
}

func (r *recorder) Enqueue(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	return r.Send(ctx, req)
}

func (r *recorder) Post(ctx context.Context, req abi.SendRequest) (abi.SendResult, error) {
	res, err := r.Send(ctx, req)
	return abi.SendResult{Status: abi.SendQueued, Key: res.Key}, err
}

func (r *recorder) StateGet(context.Context, string) ([]byte, bool, error) {
	return nil, false, ErrUnsupported
}
func (r *recorder) StateSet(context.Context, string, []byte) error { return ErrUnsupported }
func (r *recorder) StateDelete(context.Context, string) error      { return ErrUnsupported }
func (r *recorder) LoadMedia(context.Context, int) ([]byte, error) { return nil, ErrUnsupported }

func (r *recorder) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.sends {
		out = append(out, s.Text)
	}
	return out
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEngine(t *testing.T, cfg Config) (*Engine, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.CacheDir == "" {
		cfg.CacheDir = TestCacheDir
	}
	e, err := NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e, logs
}

func event(id, text string) abi.Event {
	return abi.Event{ID: id, Provider: "web", Chat: "c1", From: "u1", Text: text, Attempt: 1, ReceivedAt: 1764412800123}
}

func TestEchoExample(t *testing.T) {
	e, _ := newEngine(t, Config{})
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "../../examples/echo"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := m.Handle(context.Background(), event("m1", "hola"), rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.texts(); len(got) != 1 || got[0] != "echo: hola" {
		t.Fatalf("sends = %q, want [echo: hola]", got)
	}
	if len(m.Digest()) != 64 {
		t.Fatalf("digest %q", m.Digest())
	}
}

// TestFaultsFailTheirEventOnly checks that a trap, an infinite loop and a memory
// bomb each fail their own event with the right kind, and that the next event on
// the same module works.
func TestFaultsFailTheirEventOnly(t *testing.T) {
	// The deadline is generous except for the infinite loop, whose event
	// must end by it: a slow, loaded machine still reaches the memory cap
	// before a 2-minute deadline.
	module := wasmbuild.Go(t, "testdata/guests/faulty")
	var logs *syncBuffer
	for _, tt := range []struct {
		text    string
		kind    FaultKind
		timeout time.Duration
	}{
		{"panic", FaultTrap, 2 * time.Minute},
		{"loop", FaultDeadline, 2 * time.Second},
		{"oom", FaultMemory, 2 * time.Minute},
	} {
		t.Run(tt.text, func(t *testing.T) {
			e, l := newEngine(t, Config{Workers: 2, HandlerTimeout: tt.timeout, MaxMemory: 32 << 20})
			if tt.text == "panic" {
				logs = l
			}
			m, err := e.Load(context.Background(), module)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			err = m.Handle(context.Background(), event("f-"+tt.text, tt.text), rec)
			var fault *FaultError
			if !errors.As(err, &fault) || fault.Kind != tt.kind {
				t.Fatalf("err = %v, want a %s fault", err, tt.kind)
			}
			if err := m.Handle(context.Background(), event("after-"+tt.text, "ok"), rec); err != nil {
				t.Fatalf("next event: %v", err)
			}
			if got := rec.texts(); len(got) != 1 || got[0] != "echo: ok" {
				t.Fatalf("sends = %q", got)
			}
		})
	}
	// A Go panic's message reaches the host log through stderr, tagged.
	if logs != nil && (!strings.Contains(logs.String(), "panic: boom") || !strings.Contains(logs.String(), "event=f-panic")) {
		t.Fatalf("guest stderr not in the log:\n%s", logs.String())
	}
}

func TestHandlerErrorIsNotAFault(t *testing.T) {
	e, _ := newEngine(t, Config{})
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "testdata/guests/faulty"))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Handle(context.Background(), event("e1", "fail"), &recorder{})
	var he *HandlerError
	if !errors.As(err, &he) || he.Message != "handler says no" {
		t.Fatalf("err = %#v, want HandlerError{handler says no}", err)
	}
}

// TestBadGuestPayloads checks that malformed JSON and wild pointers from a guest
// get error codes, not a host crash, and the guest carries on.
func TestBadGuestPayloads(t *testing.T) {
	e, logs := newEngine(t, Config{})
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "testdata/guests/faulty"))
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		"badjson": "badjson answered -2",
		"badptr":  "badptr answered -1",
		"state":   "state unsupported",
	} {
		rec := &recorder{}
		if err := m.Handle(context.Background(), event("b-"+text, text), rec); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := rec.texts(); len(got) != 1 || got[0] != want {
			t.Fatalf("%s: sends = %q, want [%s]", text, got, want)
		}
	}
	if !strings.Contains(logs.String(), "guest passed a bad payload") {
		t.Fatalf("bad payload not logged:\n%s", logs.String())
	}
}

// TestDeterministicClock checks that the guest's clock is the event's time.
func TestDeterministicClock(t *testing.T) {
	e, _ := newEngine(t, Config{})
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "testdata/guests/faulty"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := m.Handle(context.Background(), event("t1", "clock"), rec); err != nil {
		t.Fatal(err)
	}
	if got := rec.texts(); len(got) != 1 || got[0] != "now 800123" {
		t.Fatalf("sends = %q, want [now 800123]", got)
	}
}

func TestConcurrentEventsShareThePool(t *testing.T) {
	e, _ := newEngine(t, Config{Workers: 3})
	m, err := e.Load(context.Background(), wasmbuild.Go(t, "../../examples/echo"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			if err := m.Handle(context.Background(), event(fmt.Sprint(i), fmt.Sprint(i)), rec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(rec.texts()); n != 30 {
		t.Fatalf("%d sends, want 30", n)
	}
}

func TestLoadRefusesBadModules(t *testing.T) {
	e, _ := newEngine(t, Config{})
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "bot.wasm")
	os.WriteFile(notWasm, []byte("#!/bin/sh\necho hi\n"), 0o644)
	truncated := filepath.Join(dir, "trunc.wasm")
	echo, err := os.ReadFile(wasmbuild.Go(t, "../../examples/echo"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(truncated, echo[:len(echo)/2], 0o644)
	for _, tt := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope.wasm"), "no such file or directory (build it first, or fix bot.module)"},
		{"not wasm", notWasm, "is not a WebAssembly module"},
		{"truncated", truncated, "does not compile"},
		{"no marker", wasmbuild.Go(t, "testdata/guests/nomarker"), `is not a botrun ABI v1 module: missing export "botrun_abi_v1"`},
		{"unknown import", wasmbuild.Go(t, "testdata/guests/badimport"), `unknown import "botrun"."sned" (known in "botrun": broadcast, edit, enqueue, event_read, fetch, log, media_load, now_ms, post, result_read, rewrite, send, state_delete, state_get, state_set, typing)`},
		{"bad hook", wasmbuild.Go(t, "testdata/guests/badimport"), `export "botrun_before_send" has signature (i32) -> (), want (i32) -> (i32)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Load(context.Background(), tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
