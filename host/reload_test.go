package host

import (
	"context"
	"fmt"
	"github.com/botrun/botrun/internal/waitfor"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/reload"
	"github.com/botrun/botrun/host/wasm"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// replaceFile writes b next to path and renames it over path, as build tools
// and editors do.
func replaceFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestHotReloadSwapsAndRefusesBrokenModules(t *testing.T) {
	echo, _ := os.ReadFile(wasmbuild.Go(t, "../examples/echo"))
	faulty, _ := os.ReadFile(wasmbuild.Go(t, "wasm/testdata/guests/faulty"))
	dir := t.TempDir()
	module := filepath.Join(dir, "bot.wasm")
	os.WriteFile(module, echo, 0o644)
	src := fmt.Sprintf("[bot]\nmodule = \"bot.wasm\"\nhot_reload = true\ndata_dir = %q\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\n", wasmbuild.DataDir)
	cfg, err := config.Parse(filepath.Join(dir, "bot.toml"), src, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	bot, err := New(context.Background(), cfg, Options{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bot.Run(ctx, ln, 5*time.Second) }()
	defer func() { cancel(); <-done }()
	base := "http://" + ln.Addr().String()
	ask := func(id string) string {
		postMessage(t, base, id, "clock", id)
		got := replies(t, base, id, 1, time.Minute)
		if len(got) != 1 {
			t.Fatalf("no reply to %s", id)
		}
		return got[0]
	}
	if got := ask("c1"); got != "echo: clock" {
		t.Fatalf("before the reload: %q", got)
	}
	replaceFile(t, module, faulty)
	// A Go guest compiles for many seconds under -race on a loaded machine:
	// the deadline is for a hung reload, not a slow one.
	i := 0
	if !waitfor.Every(100*time.Millisecond, 3*time.Minute, func() bool {
		i++
		return strings.HasPrefix(ask(fmt.Sprint("c2-", i)), "now ")
	}) {
		t.Fatal("the new module never went live")
	}
	if m := bot.Observer().Metrics(); m.ModulesLoaded != 1 || m.ModulesRefused != 0 {
		t.Fatalf("reloads %d, refused %d", m.ModulesLoaded, m.ModulesRefused)
	}
	replaceFile(t, module, []byte("not wasm at all"))
	// The history's entry follows the counter.
	if !waitFor(3*time.Minute, func() bool {
		return bot.Observer().Metrics().ModulesRefused == 1 && len(bot.Observer().ModuleHistory()) == 3
	}) {
		t.Fatalf("the broken module was not refused (history %+v)", bot.Observer().ModuleHistory())
	}
	hist := bot.Observer().ModuleHistory()
	if len(hist) != 3 || hist[0].Event != "loaded" || hist[1].Event != "reloaded" || hist[1].Digest != bot.guest.Digest() ||
		hist[2].Event != "refused" || hist[2].Error == "" || hist[0].Digest == hist[1].Digest {
		t.Fatalf("module history: %+v", hist)
	}
	if got := ask("c3"); !strings.HasPrefix(got, "now ") {
		t.Fatalf("after a refused reload the old module must keep serving: %q", got)
	}
	// The reply goes out before the completion lands: wait for it.
	tb := &testBot{Bot: bot}
	if !waitFor(60*time.Second, func() bool { return tb.inboxState(t, "web:c3").State == durability.InboxDone }) {
		t.Fatalf("web:c3 is %s, want done", tb.inboxState(t, "web:c3").State)
	}
	if r := tb.inboxState(t, "web:c3"); r.Module != bot.guest.Digest() {
		t.Fatalf("record names module %q, want the live one", r.Module)
	}
	// c1 ran under the echo module: a replay now runs under the new one and
	// is counted.
	if err := bot.Operator().ReplayInbound(context.Background(), "web:c1"); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Minute, func() bool { return bot.Observer().Metrics().ReplaysOnNewModule == 1 }) {
		t.Fatal("the replay under a new module was not counted")
	}
}

// tinyModule is a minimal ABI v1 module (botrun_on_event returns 0) with a
// custom section that makes each version's bytes, and digest, different.
func tinyModule(version byte) []byte {
	export := func(name string, kind, idx byte) []byte {
		return append(append([]byte{byte(len(name))}, name...), kind, idx)
	}
	exports := []byte{3}
	exports = append(exports, export("botrun_abi_v1", 0, 0)...)
	exports = append(exports, export("botrun_on_event", 0, 1)...)
	exports = append(exports, export("memory", 2, 0)...)
	section := func(id byte, body []byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	m = append(m, section(1, []byte{2, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f})...)
	m = append(m, section(3, []byte{2, 0, 1})...)
	m = append(m, section(5, []byte{1, 0, 16})...) // 1 MiB: a leaked instance shows
	m = append(m, section(7, exports)...)
	m = append(m, section(10, []byte{2, 2, 0, 0x0b, 4, 0, 0x41, 0, 0x0b})...)
	return append(m, section(0, []byte{1, 'v', version})...)
}

// TestHotReload1000TimesMemoryBounded reloads 1,000 times, with events in
// between, and checks the heap stays bounded (no leaked compiled modules or
// instances).
func TestHotReload1000TimesMemoryBounded(t *testing.T) {
	engine, err := wasm.NewEngine(context.Background(), wasm.Config{Workers: 2, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close(context.Background())
	first, err := engine.LoadBytes(context.Background(), "tiny.wasm", tinyModule(0))
	if err != nil {
		t.Fatal(err)
	}
	r := reload.New(engine, first, reload.Config{Path: "tiny.wasm", Log: discard})
	// The Go heap, plus the process's resident memory: compiled code lives
	// in memory wazero maps outside the heap.
	usage := func() (heap, rss uint64) {
		debug.FreeOSMemory() // a GC, and freed pages back to the OS
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		b, _ := os.ReadFile("/proc/self/statm")
		var size, resident uint64
		fmt.Sscan(string(b), &size, &resident)
		return m.HeapInuse, resident * uint64(os.Getpagesize())
	}
	var before, rssBefore uint64
	for i := range 1000 {
		if i == 100 {
			before, rssBefore = usage() // after warm-up
		}
		swapped, err := r.Swap(context.Background(), tinyModule(byte(i%2+1)))
		if err != nil || !swapped {
			t.Fatalf("reload %d: %v %v", i, swapped, err)
		}
		if _, err := r.Handle(context.Background(), event(fmt.Sprint(i)), &recorderEnv{}); err != nil {
			t.Fatalf("event after reload %d: %v", i, err)
		}
	}
	after, rssAfter := usage()
	t.Logf("heap in use %d -> %d KiB, resident %d -> %d KiB (after 100 and after 1,000 reloads)", before>>10, after>>10, rssBefore>>10, rssAfter>>10)
	// Resident memory is the whole test process's: other tests' bots
	// winding down move it by a few hundred MiB on a loaded machine (188
	// MiB seen in CI with a flat heap), so its bound is loose; the heap's
	// is the tight one.
	if after > before+64<<20 || rssAfter > rssBefore+512<<20 {
		t.Fatalf("memory grew over 900 reloads: heap +%d MiB, resident +%d MiB", (after-before)>>20, (rssAfter-rssBefore)>>20)
	}
	if reloads, _ := r.Counts(); reloads != 1000 {
		t.Fatalf("reloads %d", reloads)
	}
}

func event(id string) abi.Event {
	return abi.Event{ID: id, Provider: "web", Chat: "c1", Text: "x", Attempt: 1, ReceivedAt: 1}
}

// recorderEnv is a wasm.Env that accepts everything; the tiny module calls
// nothing.
type recorderEnv struct{}

func (recorderEnv) Send(context.Context, abi.SendRequest) (abi.SendResult, error) {
	return abi.SendResult{Status: abi.SendSent}, nil
}
func (recorderEnv) Enqueue(context.Context, abi.SendRequest) (abi.SendResult, error) {
	return abi.SendResult{Status: abi.SendDeferred}, nil
}
func (recorderEnv) Post(context.Context, abi.SendRequest) (abi.SendResult, error) {
	return abi.SendResult{Status: abi.SendQueued}, nil
}
func (recorderEnv) StateGet(context.Context, string) ([]byte, bool, error) { return nil, false, nil }
func (recorderEnv) StateSet(context.Context, string, []byte) error         { return nil }
func (recorderEnv) StateDelete(context.Context, string) error              { return nil }
func (recorderEnv) LoadMedia(context.Context, int) ([]byte, error)         { return nil, wasm.ErrUnsupported }

// TestHotReloadUnderTrafficLosesNothing swaps the module (the C and the Rust
// echo bots, alternately) while messages flow: every message gets exactly one
// reply, from whichever module was live.
func TestHotReloadUnderTrafficLosesNothing(t *testing.T) {
	modules := [][]byte{}
	for _, p := range []string{
		wasmbuild.C(t, "../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c"),
		wasmbuild.Rust(t, "../examples/rust-echo"),
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		modules = append(modules, b)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bot.wasm")
	os.WriteFile(path, modules[0], 0o644)
	cfg := testConfig(t, "")
	cfg.Bot.Module, cfg.Bot.HotReload, cfg.Bot.Workers = path, true, 4
	ch := newChannel()
	b := newTestBot(t, cfg, memory.New(), nil, ch)
	defer b.stop(t)
	const messages = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range messages {
			b.Admit(context.Background(), "web", channel.Message{ID: fmt.Sprint("m", i), Chat: fmt.Sprint("c", i%10), Text: fmt.Sprint("t", i)})
			time.Sleep(5 * time.Millisecond) // the traffic is spread over the reloads, not a wait
		}
	}()
	// Each reload goes live while the traffic runs.
	for i := 1; i <= 4; i++ {
		replaceFile(t, path, modules[i%2])
		if !waitFor(3*time.Minute, func() bool { return b.Observer().Metrics().ModulesLoaded >= int64(i) }) {
			t.Fatalf("reload %d never went live (history %+v)", i, b.Observer().ModuleHistory())
		}
	}
	<-done
	if !b.quiet(messages, 20*time.Second) {
		t.Fatal("did not settle")
	}
	live, refused := b.Observer().Metrics().ModulesLoaded, b.Observer().Metrics().ModulesRefused
	if live != 4 || refused != 0 {
		t.Fatalf("reloads: %d live, %d refused", live, refused)
	}
	for i := range messages {
		if n := ch.count(fmt.Sprint("c", i%10), fmt.Sprint("echo: t", i)); n != 1 {
			t.Fatalf("message %d answered %d times (reloads %d)", i, n, live)
		}
	}
	t.Logf("%d messages, %d reloads under traffic, none lost or doubled", messages, live)
}

// BenchmarkReloadLatency measures, per language, the time from writing a new
// module file to the new module serving (goals: 100 ms for C, Rust and
// AssemblyScript; 1.5 s for Go, whose modules are large).
func BenchmarkReloadLatency(b *testing.B) {
	for _, lang := range []struct {
		name string
		echo func(t testing.TB) string
		flow func(t testing.TB) string
	}{
		{"go", func(t testing.TB) string { return wasmbuild.Go(t, "../examples/echo") }, func(t testing.TB) string { return wasmbuild.Go(t, "../examples/flow") }},
		{"c", func(t testing.TB) string {
			return wasmbuild.C(t, "../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
		},
			func(t testing.TB) string {
				return wasmbuild.C(t, "../examples/c-flow", "flow.c", "../../guest-sdk/c/botrun.c")
			}},
		{"rust", func(t testing.TB) string { return wasmbuild.Rust(t, "../examples/rust-echo") }, func(t testing.TB) string { return wasmbuild.Rust(t, "../examples/rust-flow") }},
		{"assemblyscript", func(t testing.TB) string { return wasmbuild.AssemblyScript(t, "../examples/as-echo") },
			func(t testing.TB) string { return wasmbuild.AssemblyScript(t, "../examples/as-flow") }},
	} {
		b.Run(lang.name, func(b *testing.B) {
			var mods [2][]byte
			for i, p := range []string{lang.echo(b), lang.flow(b)} {
				mods[i], _ = os.ReadFile(p)
			}
			dir := b.TempDir()
			path := filepath.Join(dir, "bot.wasm")
			os.WriteFile(path, mods[0], 0o644)
			engine, err := wasm.NewEngine(context.Background(), wasm.Config{Workers: 1, Logger: discard, CacheDir: testCacheDir})
			if err != nil {
				b.Fatal(err)
			}
			defer engine.Close(context.Background())
			first, err := engine.Load(context.Background(), path)
			if err != nil {
				b.Fatal(err)
			}
			r := reload.New(engine, first, reload.Config{Path: path, Log: discard})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := r.Watch(ctx); err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				before := r.Digest()
				start := time.Now()
				giveUp := start.Add(30 * time.Second) // a guard, not a speed assertion
				tmp := path + ".tmp"
				os.WriteFile(tmp, mods[(i+1)%2], 0o644)
				os.Rename(tmp, path)
				if !waitfor.Every(time.Millisecond, time.Until(giveUp), func() bool { return r.Digest() != before }) {
					b.Fatal("the new module never went live")
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/reload")
		})
	}
}
