// Command nomarker exports a handler but not the botrun_abi_v1 marker.
package main

//go:wasmexport botrun_on_event
func onEvent(n int32) int32 { return 0 }

func main() {}
