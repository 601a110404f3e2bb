package dryrun

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// TestMain lets this test binary serve as a dry run's compile child, as
// botrun's main does.
func TestMain(m *testing.M) {
	ServeCompileChild()
	os.Exit(m.Run())
}

// TestCandidateCompilesInABoundedChild: the candidate compiles in a child
// process whose memory is bounded, not in the process that runs the dry run
// (issue 29, item 6: a 64 MiB module took a live bot to 3.9 GB); a module
// that needs more than the bound is the candidate's error, and the dry run's
// own process never compiles it. Within the bound, the run loads the
// child's machine code. The Go echo takes some 50 MiB to compile, the C
// echo little.
func TestCandidateCompilesInABoundedChild(t *testing.T) {
	ctx := context.Background()
	goEcho, err := os.ReadFile(wasmbuild.Go(t, "../../examples/echo"))
	if err != nil {
		t.Fatal(err)
	}
	cEcho, err := os.ReadFile(wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(module []byte) *Report {
		t.Helper()
		rep, err := Run(ctx, Options{Journals: j, Config: dryRunConfig(t), Module: module, ModuleName: "echo.wasm"})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := run(goEcho); rep.ModuleError != "" || rep.Digest == "" {
		t.Fatalf("the Go echo within the default bound: module error %q", rep.ModuleError)
	}
	defer func(n int64) { compileMemory = n }(compileMemory)
	compileMemory = 32 << 20
	if rep := run(cEcho); rep.ModuleError != "" || rep.Digest == "" {
		t.Fatalf("the C echo within 32 MiB: module error %q", rep.ModuleError)
	}
	if rep := run(goEcho); !strings.Contains(rep.ModuleError, "did not compile within the dry run's compile memory of 32 MiB") {
		t.Fatalf("the Go echo over a 32 MiB bound: module error %q, want the bound's refusal (from the child)", rep.ModuleError)
	}
}

// TestCandidateOverTheCapIsRefused: a module over MaxModuleBytes is refused
// before anything reads or compiles it (the console answers 413, botrun
// replay --dry-run exits 2 with this message).
func TestCandidateOverTheCapIsRefused(t *testing.T) {
	ctx := context.Background()
	j, err := memory.New().Open(ctx, durability.Scope{Bot: "b"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, Options{Journals: j, Config: dryRunConfig(t), Module: make([]byte, MaxModuleBytes+1), ModuleName: "big.wasm"})
	if err == nil || !strings.Contains(err.Error(), "over the dry run's cap of 16 MiB") {
		t.Fatalf("err = %v", err)
	}
}

// TestLoadRefusesACacheMiss: when the child's compilation cache does not
// hold the candidate's machine code (empty, or an entry of another module),
// the load refuses instead of compiling the candidate in this process,
// without the child's memory bound.
func TestLoadRefusesACacheMiss(t *testing.T) {
	ctx := context.Background()
	cEcho, err := os.ReadFile(wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c"))
	if err != nil {
		t.Fatal(err)
	}
	for name, fill := range map[string]func(dir string){
		"empty":        func(string) {},
		"other module": func(dir string) { os.WriteFile(filepath.Join(dir, "other"), []byte("machine code"), 0o600) },
	} {
		dir := t.TempDir()
		fill(dir)
		e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, MaxMemory: 16 << 20, CacheDir: dir, Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		mod, err := loadPrecompiled(ctx, e, dir, "echo.wasm", cEcho)
		if mod != nil {
			mod.Close(ctx)
		}
		if err != errCacheMissed {
			t.Errorf("%s cache: err = %v, want errCacheMissed", name, err)
		}
		e.Close(ctx)
	}
}

// TestInProcessCompileIsWarnedOnce: a program that did not call
// ServeCompileChild is warned, once, that its candidates compile in its own
// process.
func TestInProcessCompileIsWarnedOnce(t *testing.T) {
	defer canServeChild.Store(true)
	canServeChild.Store(false)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		if dir, _, err := precompile(context.Background(), log, "echo.wasm", nil, 16<<20); dir != "" || err != nil {
			t.Fatalf("dir %q, err %v", dir, err)
		}
	}
	if n := strings.Count(logs.String(), "did not call dryrun.ServeCompileChild"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}
