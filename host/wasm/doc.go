// Package wasm runs bot modules under wazero: it compiles a module once through
// a file compilation cache, validates it against ABI v1, keeps a bounded pool of
// instances, and calls botrun_on_event once per event under a deadline and a
// memory cap, with the host functions of the botrun module.
//
// Like net/http's Handler, a module is isolated per call: a trap, a deadline or
// running out of memory fails that call with a *FaultError, discards the
// instance, and leaves every other instance serving.
//
// This package is the engine (compilation, validation, instances, pools,
// deadlines, the hook budget); the host functions the guest calls, the Env
// they answer through and the guest's capped output are internal/hostfuncs,
// whose Env and errors it re-exports. The package imports abi, wazero and
// its internal packages, never the rest of host.
package wasm
