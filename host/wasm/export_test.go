package wasm

import (
	"os"
	"path/filepath"
)

// TestCacheDir is the compilation cache of every engine the tests open (in
// package wasm and wasm_test): a Go guest compiles once for the test binary,
// not once per engine (under -race wazero takes tens of seconds a Go guest).
var TestCacheDir = filepath.Join(os.TempDir(), "botrun-test-wasm-cache")
