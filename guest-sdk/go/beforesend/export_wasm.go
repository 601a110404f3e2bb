//go:build wasip1

package beforesend

//go:wasmexport botrun_before_send
func botrunBeforeSend(n int32) int32 { return run(n) }
