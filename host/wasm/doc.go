// Package wasm runs bot modules under wazero: it compiles a module once through
// a file compilation cache, validates it against ABI v1, keeps a bounded pool of
// instances, and calls botrun_on_event once per event under a deadline and a
// memory cap, with the host functions of the botrun module.
//
// Like net/http's Handler, a module is isolated per call: a trap, a deadline or
// running out of memory fails that call with a *FaultError, discards the
// instance, and leaves every other instance serving. The package imports abi and
// wazero, never the rest of host.
package wasm
