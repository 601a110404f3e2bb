// Package wasmbuild builds guest modules for tests, with the commands the
// SDKs document: Go (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared), C (clang
// and wasi-libc), Rust (Debian's rustc) and AssemblyScript (asc from npm).
// Each module is built once per test binary; a missing toolchain skips the
// test, or fails it under CI=true. The builds leave no path of the checkout in
// a module, so a module's bytes, and with them its entry in the compilation
// cache the tests share, are the same in every clone.
package wasmbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// DataDir is the data_dir the tests' bots share, and CacheDir the wasm
// compile cache in it: a guest compiles once per machine, not once per bot,
// package or clone (under -race a Go guest takes seconds to compile).
var (
	DataDir  = filepath.Join(os.TempDir(), "botrun-test-data")
	CacheDir = filepath.Join(DataDir, "wasm-cache")
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// cached builds the module named key once: build writes it to out.
func cached(t testing.TB, key, name string, build func(out string) ([]byte, error)) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if out, ok := built[key]; ok {
		return out
	}
	dir, err := os.MkdirTemp("", "botrun-guest-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".wasm")
	if msg, err := build(out); err != nil {
		t.Fatalf("building guest %s: %v\n%s", key, err, msg)
	}
	built[key] = out
	return out
}

func abs(t testing.TB, dir string) string {
	a, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (CI=true: .ci/run must install it)", what)
	}
	t.Skipf("SKIPPING: %s is not installed", what)
}

// Go builds the Go guest in dir (a directory with its own go.mod, or a package
// inside one) and returns the module's path.
func Go(t testing.TB, dir string) string {
	t.Helper()
	a := abs(t, dir)
	return cached(t, a, filepath.Base(a), func(out string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-trimpath", "-buildmode=c-shared", "-o", out, ".")
		cmd.Dir = a
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "CGO_ENABLED=0")
		return cmd.CombinedOutput()
	})
}

// C builds a C guest from sources (paths relative to dir) with clang and
// wasi-libc, as the C SDK documents.
func C(t testing.TB, dir string, sources ...string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		missing(t, "clang (apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)")
	}
	a := abs(t, dir)
	return cached(t, a+":"+filepath.Join(sources...), filepath.Base(a), func(out string) ([]byte, error) {
		args := []string{"--target=wasm32-wasi", "--sysroot=/usr", "-O2", "-mexec-model=reactor", "-Wl,--strip-debug", "-Wall", "-Werror",
			"-ffile-prefix-map=" + filepath.Dir(filepath.Dir(cSDK(a))) + "=.", "-ffile-prefix-map=" + a + "=.", "-I", cSDK(a), "-o", out}
		for _, s := range sources {
			args = append(args, filepath.Join(a, s))
		}
		return exec.Command(clang, args...).CombinedOutput()
	})
}

// cSDK is the C SDK's directory (guest-sdk/c) of the repository dir is in.
func cSDK(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "guest-sdk", "c", "botrun.h")); err == nil {
			return filepath.Join(d, "guest-sdk", "c")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "../../guest-sdk/c")
		}
	}
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
	a := abs(t, dir)
	return cached(t, a, filepath.Base(a), func(out string) ([]byte, error) {
		common := []string{"--edition", "2021", "--target", "wasm32-unknown-unknown", "-C", "opt-level=s", "-C", "panic=abort",
			"--remap-path-prefix", filepath.Clean(filepath.Join(a, "../..")) + "=."}
		lib := filepath.Join(filepath.Dir(out), "libbotrun.rlib")
		for _, args := range [][]string{
			append(common, "--crate-type=rlib", "--crate-name", "botrun", "-o", lib, filepath.Join(a, "../../guest-sdk/rust/src/lib.rs")),
			append(common, "--crate-type=cdylib", "-C", "strip=debuginfo", "-D", "warnings", "--extern", "botrun="+lib, "-o", out, filepath.Join(a, "src/lib.rs")),
		} {
			if msg, err := exec.Command(rustc, args...).CombinedOutput(); err != nil {
				return msg, err
			}
		}
		return nil, nil
	})
}

// AssemblyScript builds an AssemblyScript example (dir/assembly/index.ts) with
// the asc of the repository's node_modules (npm install at the root).
func AssemblyScript(t testing.TB, dir string) string {
	t.Helper()
	a := abs(t, dir)
	asc := filepath.Join(a, "../../node_modules/.bin/asc")
	if _, err := os.Stat(asc); err != nil {
		missing(t, "the AssemblyScript compiler (npm install at the repository root)")
	}
	return cached(t, a, filepath.Base(a), func(out string) ([]byte, error) {
		cmd := exec.Command(asc, "assembly/index.ts", "-o", out, "--optimize")
		cmd.Dir = a
		return cmd.CombinedOutput()
	})
}
