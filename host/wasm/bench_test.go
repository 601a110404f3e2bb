package wasm

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// BenchmarkEchoHandle measures one event through the Go echo guest with a
// trivial Env: the engine's and the guest's share of a message.
func BenchmarkEchoHandle(b *testing.B) {
	e, _ := newEngine(&testing.T{}, Config{Workers: 1})
	m, err := e.Load(context.Background(), wasmbuild.Go(b, "../../examples/echo"))
	if err != nil {
		b.Fatal(err)
	}
	rec := &recorder{}
	b.ResetTimer()
	for i := range b.N {
		if err := m.Handle(context.Background(), event(fmt.Sprint(i), "hi"), rec); err != nil {
			b.Fatal(err)
		}
		if len(rec.sends) > 1000 {
			rec.sends = rec.sends[:0]
		}
	}
}

// BenchmarkSendHook measures one botrun_before_send call of
// examples/signature (a Go guest that signs the text: a rewrite): the cost
// a module's hook adds to each send, to compare with BenchmarkEchoHandle's
// whole event.
func BenchmarkSendHook(b *testing.B) {
	e, _ := newEngine(&testing.T{}, Config{Workers: 1})
	m, err := e.Load(context.Background(), wasmbuild.Go(b, "../../examples/signature"))
	if err != nil {
		b.Fatal(err)
	}
	h := abi.SendHook{Event: "web:1", Provider: "web", Chat: "c1", Key: "web:1:1", Text: "echo: hi", Time: 1764412800000}
	b.ResetTimer()
	for range b.N {
		out, err := m.BeforeSend(context.Background(), h)
		if err != nil || out.Rewrite == nil {
			b.Fatal(out, err)
		}
	}
}

// BenchmarkInstanceCost reports what one instance of each language's echo
// guest costs: its linear memory after an event, and the host's heap growth
// per instance, over 8 instances made at once.
func BenchmarkInstanceCost(b *testing.B) {
	for _, g := range []struct{ name, module string }{
		{"go", wasmbuild.Go(b, "../../examples/echo")},
		{"c", wasmbuild.C(b, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")},
		{"rust", wasmbuild.Rust(b, "../../examples/rust-echo")},
		{"assemblyscript", wasmbuild.AssemblyScript(b, "../../examples/as-echo")},
	} {
		b.Run(g.name, func(b *testing.B) {
			const n = 8
			e, _ := newEngine(&testing.T{}, Config{Workers: n})
			m, err := e.Load(context.Background(), g.module)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			insts := make([]*instance, n)
			for i := range insts {
				if insts[i], err = m.acquire(context.Background(), &m.events); err != nil {
					b.Fatal(err)
				}
			}
			for _, inst := range insts {
				m.release(context.Background(), &m.events, inst, false)
			}
			// One event on each instance: the guest's memory as it serves.
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if err := m.Handle(context.Background(), event(fmt.Sprint(i), "hi"), &recorder{}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			runtime.GC()
			runtime.ReadMemStats(&after)
			linear := uint64(0)
			for _, inst := range m.events.idle {
				linear += uint64(inst.mod.Memory().Size())
			}
			perLinear := float64(linear) / float64(len(m.events.idle)) / (1 << 20)
			perHeap := float64(after.HeapInuse-before.HeapInuse) / n / (1 << 20)
			b.ReportMetric(perLinear, "MiB-linear/instance")
			b.ReportMetric(perHeap, "MiB-heap/instance")
			fmt.Printf("instance cost, %s echo: %.2f MiB of linear memory, %.2f MiB of host heap (%d instances)\n", g.name, perLinear, perHeap, len(m.events.idle))
		})
	}
}
