// Package hostfuncs is the ABI surface a guest calls: the host modules it
// may import (botrun's host functions of abi/SPEC.md section 4, WASI, and
// env.abort), the Env through which an event's host calls reach the host,
// and the guest's output (stdout, stderr and the log function) capped per
// event.
//
// The engine (package wasm) instantiates these modules and runs each guest
// call with a Call in its context (WithCall). The package imports abi and
// wazero only, never package wasm nor anything else of host.
package hostfuncs
