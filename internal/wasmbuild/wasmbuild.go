// Package wasmbuild builds Go guest modules for tests: GOOS=wasip1
// GOARCH=wasm, -buildmode=c-shared, exactly as the README tells bot authors.
// Builds share the Go build cache, so a rebuild of an unchanged guest is fast.
package wasmbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// Go builds the Go guest in dir (a directory with its own go.mod, or a package
// inside one) into a temporary file and returns its path. Each dir is built once
// per test binary.
func Go(t testing.TB, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out, ok := built[abs]; ok {
		return out
	}
	outDir, err := os.MkdirTemp("", "botrun-guest-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(outDir, filepath.Base(abs)+".wasm")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building guest %s: %v\n%s", dir, err, b)
	}
	built[abs] = out
	return out
}

// C builds a C guest from sources (paths relative to dir) with clang and
// wasi-libc, as the C SDK documents, and returns the module's path. Without
// clang the test is skipped, or fails under CI=true.
func C(t testing.TB, dir string, sources ...string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		missing(t, "clang (apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)")
	}
	abs, _ := filepath.Abs(dir)
	key := abs + ":" + filepath.Join(sources...)
	mu.Lock()
	defer mu.Unlock()
	if out, ok := built[key]; ok {
		return out
	}
	outDir, err := os.MkdirTemp("", "botrun-guest-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(outDir, filepath.Base(abs)+".wasm")
	args := []string{"--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-mexec-model=reactor", "-Wl,--strip-debug", "-Wall", "-Werror",
		"-I", filepath.Join(abs, "../../guest-sdk/c"), "-o", out}
	for _, s := range sources {
		args = append(args, filepath.Join(abs, s))
	}
	if b, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("building C guest %s: %v\n%s", dir, err, b)
	}
	built[key] = out
	return out
}

func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (CI=true: .ci/run must install it)", what)
	}
	t.Skipf("SKIPPING: %s is not installed", what)
}

// Rust builds a Rust example (a cdylib at dir/src/lib.rs) against the SDK
// crate with Debian's rustc (/usr/bin/rustc: a rustup rustc first on PATH has
// no wasm32 target here), as the Rust SDK documents.
func Rust(t testing.TB, dir string) string {
	t.Helper()
	const rustc = "/usr/bin/rustc"
	if _, err := os.Stat(rustc); err != nil {
		missing(t, "Debian's rustc (apt-get install rustc libstd-rust-dev-wasm32)")
	}
	abs, _ := filepath.Abs(dir)
	mu.Lock()
	defer mu.Unlock()
	if out, ok := built[abs]; ok {
		return out
	}
	outDir, err := os.MkdirTemp("", "botrun-guest-")
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"--edition", "2021", "--target", "wasm32-unknown-unknown", "-C", "opt-level=s", "-C", "panic=abort"}
	lib := filepath.Join(outDir, "libbotrun.rlib")
	out := filepath.Join(outDir, filepath.Base(abs)+".wasm")
	for _, args := range [][]string{
		append(common, "--crate-type=rlib", "--crate-name", "botrun", "-o", lib, filepath.Join(abs, "../../guest-sdk/rust/src/lib.rs")),
		append(common, "--crate-type=cdylib", "-C", "strip=debuginfo", "-D", "warnings", "--extern", "botrun="+lib, "-o", out, filepath.Join(abs, "src/lib.rs")),
	} {
		if b, err := exec.Command(rustc, args...).CombinedOutput(); err != nil {
			t.Fatalf("building Rust guest %s: %v\n%s", dir, err, b)
		}
	}
	built[abs] = out
	return out
}

// AssemblyScript builds an AssemblyScript example (dir/assembly/index.ts) with
// the asc of the repository's node_modules (npm install at the root).
func AssemblyScript(t testing.TB, dir string) string {
	t.Helper()
	abs, _ := filepath.Abs(dir)
	asc := filepath.Join(abs, "../../node_modules/.bin/asc")
	if _, err := os.Stat(asc); err != nil {
		missing(t, "the AssemblyScript compiler (npm install at the repository root)")
	}
	mu.Lock()
	defer mu.Unlock()
	if out, ok := built[abs]; ok {
		return out
	}
	outDir, err := os.MkdirTemp("", "botrun-guest-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(outDir, filepath.Base(abs)+".wasm")
	cmd := exec.Command(asc, "assembly/index.ts", "-o", out, "--optimize")
	cmd.Dir = abs
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building AssemblyScript guest %s: %v\n%s", dir, err, b)
	}
	built[abs] = out
	return out
}
