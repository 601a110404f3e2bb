package dryrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/botrun/botrun/host/wasm"
)

// MaxModuleBytes caps a dry run's candidate module: the console's upload and
// botrun replay --dry-run both refuse a larger one. The Go examples' modules
// are about 3 MiB.
const MaxModuleBytes = 16 << 20

// compileMemory bounds the memory of the child process that compiles a
// candidate (a variable for tests). wazero's compiler takes some 15 times a
// real module's size; a crafted module takes far more, and would take it
// from the live bot.
var compileMemory int64 = 1 << 30

// Environment of a compile child: the cache directory it compiles into, the
// guest memory cap of the engine, and its own memory bound.
const (
	childCacheEnv  = "BOTRUN_DRYRUN_COMPILE_CACHE"
	childMemoryEnv = "BOTRUN_DRYRUN_COMPILE_GUEST_MEMORY"
	childLimitEnv  = "BOTRUN_DRYRUN_COMPILE_LIMIT"
	childNameEnv   = "BOTRUN_DRYRUN_COMPILE_NAME"
)

// childModuleError is the exit code of a child whose module does not
// compile (its reason on stdout), as opposed to one that ran out of memory.
const childModuleError = 3

// canServeChild says this binary called ServeCompileChild, so a dry run can
// compile its candidate in a child process of the same executable.
var canServeChild atomic.Bool

// warnInProcess logs, once, that candidates compile in this process.
var warnInProcess sync.Once

// ServeCompileChild lets a dry run compile its candidate module in a child
// process of this executable, its memory bounded, so that a module that is
// costly to compile cannot take the memory of the live bot that runs the
// dry run. A program calls it first thing in main: in a child it started
// (marked by its environment) it compiles the module read from stdin into
// the cache directory and exits; elsewhere it returns at once. A program
// that does not call it compiles candidates in its own process.
func ServeCompileChild() {
	dir := os.Getenv(childCacheEnv)
	if dir == "" {
		canServeChild.Store(true)
		return
	}
	// Should the machine run short of memory, the kernel's OOM killer takes
	// this child, not the live bot that started it.
	os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	limit, _ := strconv.ParseInt(os.Getenv(childLimitEnv), 10, 64)
	guest, _ := strconv.ParseInt(os.Getenv(childMemoryEnv), 10, 64)
	if limit > 0 {
		// A hard bound on what the process's writable memory (the Go heap
		// and wazero's code buffers) may grow by, and a GC that works to
		// stay below it.
		data := dataSize() + limit
		syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(data), Max: uint64(data)})
		debug.SetMemoryLimit(limit * 3 / 4)
	}
	os.Exit(compileChild(dir, guest))
}

func compileChild(dir string, guest int64) int {
	b, err := io.ReadAll(io.LimitReader(os.Stdin, MaxModuleBytes+1))
	if err == nil {
		err = CheckSize(os.Getenv(childNameEnv), int64(len(b)))
	}
	if err != nil {
		fmt.Print(err)
		return childModuleError
	}
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{Workers: 1, MaxMemory: guest, CacheDir: dir, Logger: quietLogger})
	if err != nil {
		fmt.Fprint(os.Stderr, err)
		return 1
	}
	defer e.Close(ctx)
	if err := e.Compile(ctx, os.Getenv(childNameEnv), b); err != nil {
		fmt.Print(err)
		return childModuleError
	}
	return 0
}

// dataSize is the process's data segment now (VmData: its writable private
// memory, what RLIMIT_DATA bounds), 0 where /proc does not say.
func dataSize() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmData:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// CheckSize refuses a candidate of n bytes over MaxModuleBytes.
func CheckSize(name string, n int64) error {
	if n <= MaxModuleBytes {
		return nil
	}
	return fmt.Errorf("module %s is %.1f MiB, over the dry run's cap of %d MiB (a bot module is a few MiB: is this the right file?)", name, float64(n)/(1<<20), MaxModuleBytes>>20)
}

// precompile compiles module, in a child process bounded to compileMemory,
// into a new compilation cache directory, so that the engine of the dry run
// (opened on that directory) loads the machine code instead of compiling.
// moduleErr is why the module does not compile, or does not within the
// bound; err is the run's (the child could not start). A binary that did
// not call ServeCompileChild gets dir "" (compile in this process), and a
// warning in log, once.
func precompile(ctx context.Context, log *slog.Logger, name string, module []byte, guestMemory int64) (dir, moduleErr string, err error) {
	if !canServeChild.Load() {
		warnInProcess.Do(func() {
			log.Warn("dry run: this program did not call dryrun.ServeCompileChild first thing in main: candidates compile in its own process, their memory unbounded (a costly module can take the live bot's memory)")
		})
		return "", "", nil
	}
	// /proc/self/exe runs this very binary, also after a deploy replaced
	// or removed its file.
	exe := "/proc/self/exe"
	if _, statErr := os.Stat(exe); statErr != nil {
		exe, err = os.Executable()
	}
	if err != nil {
		return "", "", fmt.Errorf("dry run: finding this executable to compile the candidate in a child process: %w", err)
	}
	dir, err = os.MkdirTemp("", "botrun-dryrun-cache-")
	if err != nil {
		return "", "", fmt.Errorf("dry run: a compilation cache directory: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2", childCacheEnv+"="+dir, childNameEnv+"="+name,
		childMemoryEnv+"="+strconv.FormatInt(guestMemory, 10),
		childLimitEnv+"="+strconv.FormatInt(compileMemory, 10))
	cmd.Stdin = bytes.NewReader(module)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedBuffer{&out, 4 << 10}, &limitedBuffer{&stderr, 4 << 10}
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return dir, "", nil
	case ctx.Err() != nil:
		err = ctx.Err()
	case errors.As(err, &exit) && exit.ExitCode() == childModuleError:
		return dir, out.String(), nil
	case errors.As(err, &exit):
		return dir, fmt.Sprintf("the module did not compile within the dry run's compile memory of %d MiB (%s): a bot module is a few MiB and compiles in far less; is this the right file? (%s)",
			compileMemory>>20, exit, firstLine(stderr.String())), nil
	}
	os.RemoveAll(dir)
	return "", "", fmt.Errorf("dry run: compiling the candidate in a child process: %w", err)
}

// errCacheMissed refuses to compile, in the process of the live bot, a
// candidate its bounded child compiled: the machine code was not in the
// child's cache.
var errCacheMissed = errors.New("dry run: the candidate compiled in the bounded child process, but its machine code was not found in the child's compilation cache; it is not compiled again in this process, where its memory is unbounded (is the temporary directory full, or was this executable replaced during the run?)")

// loadPrecompiled loads module into engine, whose compilation cache is dir,
// where a child compiled it: it refuses, with errCacheMissed, a dir without
// machine code, and a load that compiled anyway (it wrote a new entry).
func loadPrecompiled(ctx context.Context, engine *wasm.Engine, dir, name string, module []byte) (*wasm.Module, error) {
	before := cacheEntries(dir)
	if before == 0 {
		return nil, errCacheMissed
	}
	mod, err := engine.LoadBytes(ctx, name, module)
	if err == nil && cacheEntries(dir) != before {
		mod.Close(ctx)
		return nil, errCacheMissed
	}
	return mod, err
}

// cacheEntries counts the non-empty files under a compilation cache
// directory.
func cacheEntries(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil && info.Size() > 0 {
				n++
			}
		}
		return nil
	})
	return n
}

// firstLine is s's first line (a Go runtime's fatal error, without its
// goroutine dump).
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// limitedBuffer keeps the first n bytes written to it and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
