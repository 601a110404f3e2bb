// Command badimport exports the ABI but imports a host function that does not
// exist, and exports a send hook with the wrong signature.
package main

import "unsafe"

//go:wasmimport botrun sned
func sned(p unsafe.Pointer, n int32) int32

//go:wasmexport botrun_abi_v1
func abiV1() {}

//go:wasmexport botrun_on_event
func onEvent(n int32) int32 { return sned(nil, 0) }

func main() {}

// botrunBeforeSend has the wrong signature: a send hook is (i32) -> (i32).
//
//go:wasmexport botrun_before_send
func botrunBeforeSend(n int32) {}
