package wasm

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// BenchmarkABIOverhead compares one event through botrun's engine (event
// encoding, the instance pool, the host functions and their JSON) with a raw
// wazero call into the same C echo guest whose host functions do the least
// possible, under the same sandbox (close on context done, memory limit, a
// deadline per call): the goal is at most 2x. raw-unsandboxed shows what the
// sandbox itself costs.
func BenchmarkABIOverhead(b *testing.B) {
	path := wasmbuild.C(b, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
	bin, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ev := event("bench", "hi")
	var rawNs, botrunNs, bareNs float64
	raw := func(b *testing.B, sandbox bool) float64 {
		ctx := context.Background()
		rc := wazero.NewRuntimeConfig()
		if sandbox {
			rc = rc.WithCloseOnContextDone(true).WithMemoryLimitPages(1024)
		}
		rt := wazero.NewRuntimeWithConfig(ctx, rc)
		defer rt.Close(ctx)
		wasi_snapshot_preview1.MustInstantiate(ctx, rt)
		payload := []byte(`{"id":"bench","provider":"web","chat":"c1","from":"u1","text":"hi","media":[],"attempt":1,"received_at":1}`)
		result := []byte(`{"status":"sent","key":"k","ref":"1","error":""}`)
		i32 := api.ValueTypeI32
		hb := rt.NewHostModuleBuilder("botrun")
		hb.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
			m.Memory().Write(uint32(s[0]), payload)
			s[0] = uint64(len(payload))
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("event_read")
		hb.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
			s[0] = uint64(len(result))
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("send")
		hb.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, s []uint64) {
			m.Memory().Write(uint32(s[0]), result)
			s[0] = uint64(len(result))
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("result_read")
		noop := api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) {
			if len(s) > 0 {
				s[0] = 0
			}
		})
		for name, sig := range map[string][2][]api.ValueType{
			"enqueue":      {{i32, i32}, {i32}},
			"state_get":    {{i32, i32}, {i32}},
			"state_set":    {{i32, i32, i32, i32}, {i32}},
			"state_delete": {{i32, i32}, {i32}},
			"log":          {{i32, i32, i32}, nil},
			"now_ms":       {nil, {api.ValueTypeI64}},
		} {
			hb.NewFunctionBuilder().WithGoModuleFunction(noop, sig[0], sig[1]).Export(name)
		}
		if _, err := hb.Instantiate(ctx); err != nil {
			b.Fatal(err)
		}
		mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
		if err != nil {
			b.Fatal(err)
		}
		on := mod.ExportedFunction(abi.ExportOnEvent)
		b.ResetTimer()
		for range b.N {
			callCtx, cancel := ctx, context.CancelFunc(func() {})
			if sandbox {
				callCtx, cancel = context.WithTimeout(ctx, 10*time.Second)
			}
			_, err := on.Call(callCtx, uint64(len(payload)))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	}
	b.Run("raw-sandboxed", func(b *testing.B) { rawNs = raw(b, true) })
	b.Run("raw-unsandboxed", func(b *testing.B) { bareNs = raw(b, false) })
	b.Run("botrun", func(b *testing.B) {
		e, _ := newEngine(&testing.T{}, Config{Workers: 1})
		m, err := e.Load(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		rec := &recorder{}
		b.ResetTimer()
		for range b.N {
			if err := m.Handle(context.Background(), ev, rec); err != nil {
				b.Fatal(err)
			}
			if len(rec.sends) > 1000 {
				rec.sends = rec.sends[:0]
			}
		}
		botrunNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if rawNs > 0 && botrunNs > 0 {
		os.Stdout.WriteString("ABI overhead (C echo, per event): botrun " + ftoa(botrunNs/1e3) + " µs, raw wazero under the same sandbox " +
			ftoa(rawNs/1e3) + " µs (ratio " + ftoa(botrunNs/rawNs) + "), raw wazero without the sandbox " + ftoa(bareNs/1e3) + " µs\n")
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
