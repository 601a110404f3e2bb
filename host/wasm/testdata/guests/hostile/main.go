// Command hostile is a test guest that floods what the host must bound. The
// event text chooses: "stdout" writes 8 x 16 MiB to stdout with no newline;
// "iovec" makes one fd_write of 32 iovecs over the same 1 MiB; "log" calls the
// log host function 5,000 times with 8 KiB; "lines" writes 100,000 empty lines
// to stderr and logs 100,000 empty messages; "state <n> <size> <prefix>" sets
// n state keys <prefix><i> of size bytes each. Each replies with what it did.
package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"unsafe"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

//go:wasmimport wasi_snapshot_preview1 fd_write
func fdWrite(fd int32, iovs unsafe.Pointer, n int32, written unsafe.Pointer) int32

//go:wasmimport botrun log
func rawLog(level int32, p unsafe.Pointer, n int32)

func fill(n int, c byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		args := strings.Fields(ctx.Event.Text)
		if len(args) == 0 {
			return errors.New("no command")
		}
		var reply string
		switch args[0] {
		case "stdout":
			buf := fill(16<<20, 'x')
			total := 0
			for range 8 {
				n, _ := os.Stdout.Write(buf)
				total += n
			}
			reply = "stdout wrote " + strconv.Itoa(total)
		case "iovec":
			buf := fill(1<<20, 'y')
			var iovs [64]uint32
			for i := 0; i < 64; i += 2 {
				iovs[i] = uint32(uintptr(unsafe.Pointer(&buf[0])))
				iovs[i+1] = uint32(len(buf))
			}
			var written uint32
			errno := fdWrite(1, unsafe.Pointer(&iovs[0]), 32, unsafe.Pointer(&written))
			reply = "iovec errno " + strconv.Itoa(int(errno)) + " wrote " + strconv.Itoa(int(written))
		case "log":
			msg := fill(8<<10, 'z')
			for range 5000 {
				rawLog(1, unsafe.Pointer(&msg[0]), int32(len(msg)))
			}
			reply = "log done"
		case "lines":
			nl := fill(100000, '\n')
			os.Stderr.Write(nl)
			for range 100000 {
				rawLog(1, nil, 0)
			}
			reply = "lines done"
		case "state":
			n, _ := strconv.Atoi(args[1])
			size, _ := strconv.Atoi(args[2])
			value := fill(size, 'v')
			ok, first := 0, ""
			for i := range n {
				if err := ctx.StateSet(args[3]+strconv.Itoa(i), value); err != nil {
					if first == "" {
						first = err.Error()
					}
					continue
				}
				ok++
			}
			reply = "state set " + strconv.Itoa(ok) + " of " + strconv.Itoa(n) + "; first error: " + first
		default:
			return errors.New("unknown command " + args[0])
		}
		_, err := ctx.Reply(reply)
		return err
	})
}

func main() {}
