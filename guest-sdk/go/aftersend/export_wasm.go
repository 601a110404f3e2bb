//go:build wasip1

package aftersend

//go:wasmexport botrun_after_send
func botrunAfterSend(n int32) int32 { return run(n) }
