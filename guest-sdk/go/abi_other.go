//go:build !wasip1

package bot

import "unsafe"

// Outside WebAssembly there is no host: these stand-ins let the package build
// and its pure parts be tested natively. Every host call reports UNSUPPORTED.

func hostEventRead(unsafe.Pointer, int32) int32                       { return -4 }
func hostSend(unsafe.Pointer, int32) int32                            { return -4 }
func hostEnqueue(unsafe.Pointer, int32) int32                         { return -4 }
func hostResultRead(unsafe.Pointer, int32) int32                      { return -4 }
func hostStateGet(unsafe.Pointer, int32) int32                        { return -4 }
func hostStateSet(unsafe.Pointer, int32, unsafe.Pointer, int32) int32 { return -4 }
func hostStateDelete(unsafe.Pointer, int32) int32                     { return -4 }
func hostLog(int32, unsafe.Pointer, int32)                            {}
func hostNowMs() int64                                                { return 0 }
func hostMediaLoad(int32) int32                                       { return -4 }
