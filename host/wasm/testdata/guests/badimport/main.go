// Command badimport exports the ABI but imports a host function that does not
// exist.
package main

import "unsafe"

//go:wasmimport botrun sned
func sned(p unsafe.Pointer, n int32) int32

//go:wasmexport botrun_abi_v1
func abiV1() {}

//go:wasmexport botrun_on_event
func onEvent(n int32) int32 { return sned(nil, 0) }

func main() {}
