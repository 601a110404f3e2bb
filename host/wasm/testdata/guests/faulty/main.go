// Command faulty is a test guest whose behaviour is chosen by the event text:
// "panic" traps, "loop" never returns, "oom" allocates until memory runs out,
// "badjson" passes malformed JSON to send, "fail" returns a handler error, and
// anything else echoes.
package main

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"time"
	"unsafe"

	bot "github.com/botrun/botrun/guest-sdk/go"
)

//go:wasmimport botrun send
func rawSend(p unsafe.Pointer, n int32) int32

var sink [][]byte

func init() {
	bot.Handle(func(ctx *bot.Context) error {
		switch ctx.Event.Text {
		case "panic":
			panic("boom")
		case "loop":
			for i := 0; ; i++ {
				if i < 0 {
					return nil
				}
			}
		case "oom":
			for {
				sink = append(sink, make([]byte, 1<<20))
			}
		case "badjson":
			b := []byte(`{"chat": "c1", "text": `)
			n := rawSend(unsafe.Pointer(&b[0]), int32(len(b)))
			_, err := ctx.Reply("badjson answered " + itoa(n))
			return err
		case "badptr":
			n := rawSend(unsafe.Pointer(uintptr(0xfffffff0)), 64)
			_, err := ctx.Reply("badptr answered " + itoa(n))
			return err
		case "flood":
			for i := 0; ; i++ {
				if _, err := ctx.Send(ctx.Event.Chat, "flood "+itoa(int32(i))); err != nil {
					return err
				}
			}
		case "mixed":
			// Posted, sent, posted: the channel gets them in this order.
			for i, send := range []bool{false, true, false} {
				text := "mixed " + itoa(int32(i))
				var err error
				if send {
					_, err = ctx.Send(ctx.Event.Chat, text)
				} else {
					_, err = ctx.Reply(text)
				}
				if err != nil {
					return err
				}
			}
			return nil
		case "postflood":
			for i := 0; ; i++ {
				if _, err := ctx.Reply("postflood " + itoa(int32(i))); err != nil {
					return err
				}
			}
		case "fail":
			return errors.New("handler says no")
		case "state":
			_, _, err := ctx.StateGet("k")
			if errors.Is(err, bot.ErrUnsupported) {
				_, err = ctx.Reply("state unsupported")
			}
			return err
		case "clock":
			_, err := ctx.Reply("now " + itoa(int32(bot.NowMs()%1000000)))
			return err
		case "entropy":
			// The Go runtime's clock and WASI random: both come from the
			// journal, so a replay sees the same values.
			var b [8]byte
			crand.Read(b[:])
			_, err := ctx.Reply(time.Now().UTC().Format(time.RFC3339Nano) + " " + hex.EncodeToString(b[:]) + " " + itoa(int32(mrand.Int32N(1000000))))
			return err
		}
		_, err := ctx.Reply("echo: " + ctx.Event.Text)
		return err
	})
}

func itoa(n int32) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

func main() {}
