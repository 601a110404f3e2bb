//go:build wasip1

package bot

import "unsafe"

//go:wasmexport botrun_abi_v1
func abiV1() {}

//go:wasmexport botrun_on_event
func botrunOnEvent(n int32) int32 { return onEvent(n) }

//go:wasmimport botrun event_read
func hostEventRead(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun send
func hostSend(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun enqueue
func hostEnqueue(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun post
func hostPost(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun result_read
func hostResultRead(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun state_get
func hostStateGet(k unsafe.Pointer, kn int32) int32

//go:wasmimport botrun state_set
func hostStateSet(k unsafe.Pointer, kn int32, v unsafe.Pointer, vn int32) int32

//go:wasmimport botrun state_delete
func hostStateDelete(k unsafe.Pointer, kn int32) int32

//go:wasmimport botrun log
func hostLog(level int32, p unsafe.Pointer, n int32)

//go:wasmimport botrun now_ms
func hostNowMs() int64

//go:wasmimport botrun media_load
func hostMediaLoad(index int32) int32

//go:wasmimport botrun broadcast
func hostBroadcast(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun edit
func hostEdit(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun typing
func hostTyping(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun fetch
func hostFetch(p unsafe.Pointer, n int32) int32

//go:wasmimport botrun rewrite
func hostRewrite(p unsafe.Pointer, n int32) int32
