package wasm

import (
	"context"
	"fmt"
	"testing"

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
