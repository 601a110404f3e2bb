package wasm

import "github.com/botrun/botrun/internal/wasmbuild"

// TestCacheDir is the compilation cache of every engine the tests open (in
// package wasm and wasm_test), the one host's and cmd/botrun's tests share
// (their data_dir's wasm-cache): a guest compiles once per machine, not once
// per engine or package (under -race wazero takes tens of seconds a Go
// guest).
var TestCacheDir = wasmbuild.CacheDir
