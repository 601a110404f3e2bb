//go:build !wasip1

package bot

import "unsafe"

// Outside WebAssembly there is no host: these stand-ins let the package build
// and its pure parts be tested natively. Every host call reports UNSUPPORTED
// unless a test installs a nativeHost.

// nativeHost answers host calls in native tests, as a host would.
type nativeHost interface {
	send(req []byte, enqueue bool) (result []byte)
	stateGet(key string) ([]byte, bool)
	stateSet(key string, value []byte)
	stateDelete(key string)
	log(level int32, msg string)
}

var (
	native  nativeHost // nil: every call is UNSUPPORTED
	pending []byte     // the result result_read copies
)

func bytesAt(p unsafe.Pointer, n int32) []byte {
	if n == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(p), n)...)
}

func hostEventRead(unsafe.Pointer, int32) int32 { return -4 }

func hostSend(p unsafe.Pointer, n int32) int32 {
	if native == nil {
		return -4
	}
	pending = native.send(bytesAt(p, n), false)
	return int32(len(pending))
}

func hostEnqueue(p unsafe.Pointer, n int32) int32 {
	if native == nil {
		return -4
	}
	pending = native.send(bytesAt(p, n), true)
	return int32(len(pending))
}

// hostPost is send for a native host: the order of sends is what native
// tests check.
func hostPost(p unsafe.Pointer, n int32) int32 { return hostSend(p, n) }

func hostResultRead(p unsafe.Pointer, n int32) int32 {
	if native == nil {
		return -4
	}
	if pending == nil {
		return -6
	}
	n = int32(copy(unsafe.Slice((*byte)(p), n), pending))
	pending = nil
	return n
}

func hostStateGet(k unsafe.Pointer, kn int32) int32 {
	if native == nil {
		return -4
	}
	v, ok := native.stateGet(string(bytesAt(k, kn)))
	if !ok {
		return -3
	}
	pending = append([]byte{}, v...)
	return int32(len(v))
}

func hostStateSet(k unsafe.Pointer, kn int32, v unsafe.Pointer, vn int32) int32 {
	if native == nil {
		return -4
	}
	native.stateSet(string(bytesAt(k, kn)), bytesAt(v, vn))
	return 0
}

func hostStateDelete(k unsafe.Pointer, kn int32) int32 {
	if native == nil {
		return -4
	}
	native.stateDelete(string(bytesAt(k, kn)))
	return 0
}

func hostLog(level int32, p unsafe.Pointer, n int32) {
	if native != nil {
		native.log(level, string(bytesAt(p, n)))
	}
}

// nativeBroadcaster is a nativeHost that also broadcasts; without it
// broadcast is UNSUPPORTED, as on a host that lacks it.
type nativeBroadcaster interface {
	broadcast(req []byte) (result []byte, code int32)
}

func hostBroadcast(p unsafe.Pointer, n int32) int32 {
	bc, ok := native.(nativeBroadcaster)
	if !ok {
		return -4
	}
	res, code := bc.broadcast(bytesAt(p, n))
	if code < 0 {
		return code
	}
	pending = res
	return int32(len(pending))
}

// nativeEditor is a nativeHost that also edits and shows typing; without it
// edit and typing are UNSUPPORTED, as on a host that lacks them. A code of
// CHANNEL_FAILED comes with its result.
type nativeEditor interface {
	channelOp(fn string, req []byte) (result []byte, code int32)
}

func hostChannelOp(fn string, p unsafe.Pointer, n int32) int32 {
	ed, ok := native.(nativeEditor)
	if !ok {
		return -4
	}
	res, code := ed.channelOp(fn, bytesAt(p, n))
	if res != nil {
		pending = res
	}
	return code
}

func hostEdit(p unsafe.Pointer, n int32) int32   { return hostChannelOp("edit", p, n) }
func hostTyping(p unsafe.Pointer, n int32) int32 { return hostChannelOp("typing", p, n) }

// nativeFetcher is a nativeHost that also calls APIs; without it fetch is
// UNSUPPORTED. A code of FETCH_FAILED comes with its result.
type nativeFetcher interface {
	fetch(req []byte) (result []byte, code int32)
}

func hostFetch(p unsafe.Pointer, n int32) int32 {
	f, ok := native.(nativeFetcher)
	if !ok {
		return -4
	}
	res, code := f.fetch(bytesAt(p, n))
	if res != nil {
		pending = res
	}
	if code < 0 {
		return code
	}
	return int32(len(pending))
}

func hostNowMs() int64          { return 0 }
func hostMediaLoad(int32) int32 { return -4 }

func hostRewrite(unsafe.Pointer, int32) int32 { return -4 }
