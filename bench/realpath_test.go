package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/botrun/botrun/internal/testserver"
	"github.com/botrun/botrun/internal/wasmbuild"
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m)) }

// standard is the load of the table: 3,000 messages over 200 chats
// from 64 concurrent senders.
var standard = Load{Provider: "web", Messages: 3000, Chats: 200, Senders: 64}

// row is one measured run.
type row struct {
	name      string
	res       Result
	rss, peak int64
}

func (r row) String() string {
	return fmt.Sprintf("%-28s %8.0f msg/s  p50 %7s  p99 %7s  peak RSS %4d MiB  refused %d",
		r.name, r.res.Rate(), ms(r.res.Quantile(0.5)), ms(r.res.Quantile(0.99)), r.peak>>20, r.res.Refused)
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms" }

// kit builds what the runs start: botrun, the echo guest, the River peer.
type kit struct {
	dir, botrun, module, river string
	pg                         string
	n                          int
}

func newKit(b *testing.B, peer bool) *kit {
	k := &kit{dir: b.TempDir()}
	k.botrun = filepath.Join(k.dir, "botrun")
	if out, err := exec.Command("go", "build", "-o", k.botrun, "../cmd/botrun").CombinedOutput(); err != nil {
		b.Fatalf("go build botrun: %v\n%s", err, out)
	}
	k.module = wasmbuild.Go(b, "../examples/echo")
	if peer {
		k.river = filepath.Join(k.dir, "riverecho")
		cmd := exec.Command("go", "build", "-o", k.river, ".")
		cmd.Dir, cmd.Env = "river", append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build bench/river: %v\n%s", err, out)
		}
	}
	return k
}

// postgres returns the URL of a new, empty database.
func (k *kit) postgres(b *testing.B) string {
	if k.pg == "" {
		k.pg = testserver.Postgres(b)
	}
	k.n++
	name := fmt.Sprintf("bench_%d_%d", time.Now().UnixNano(), k.n)
	conn, err := pgx.Connect(context.Background(), k.pg)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(k.pg)
	u.Path = "/" + name
	return u.String()
}

// target is a server to start: botrun on a backend, or the River peer.
type target struct {
	name    string
	backend string // memory | sqlite | postgres
	river   bool
	workers int
}

func (k *kit) argv(b *testing.B, t target, addr string) []string {
	dir, err := os.MkdirTemp(k.dir, "run-")
	if err != nil {
		b.Fatal(err)
	}
	if t.river {
		argv := []string{k.river, "-listen", addr, "-workers", strconv.Itoa(t.workers)}
		if t.backend == "postgres" {
			return append(argv, "-postgres", k.postgres(b))
		}
		return append(argv, "-sqlite", filepath.Join(dir, "river.db"))
	}
	durable := ""
	switch t.backend {
	case "sqlite":
		durable = fmt.Sprintf("[durability]\nbackend = \"sqlite\"\npath = %q\nsynchronous = %q\n", filepath.Join(dir, "bot.db"), cmp.Or(os.Getenv("BOTRUN_BENCH_SYNC"), "full"))
	case "postgres":
		durable = fmt.Sprintf("[durability]\nbackend = \"postgres\"\nurl = %q\n", k.postgres(b))
	}
	cfg := fmt.Sprintf("[bot]\nmodule = %q\nworkers = %d\nmax_queue = 10000\ndata_dir = %q\n[http]\nlisten = %q\n%s[admin]\ntoken = %q\n[[providers]]\nid = \"web\"\ntype = \"webchat\"\nrate_limit = 0\n",
		k.module, t.workers, filepath.Join(dir, "data"), addr, durable, adminToken)
	path := filepath.Join(dir, "bot.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	return []string{k.botrun, path}
}

// run starts t, warms it up (every worker's instance made, connections
// open), drives load through it and stops it.
func (k *kit) run(b *testing.B, t target, load Load) row {
	if only := os.Getenv("BOTRUN_BENCH_ONLY"); only != "" && !strings.Contains(t.name, only) {
		return row{name: t.name}
	}
	addr, err := FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Start(k.argv(b, t, addr), addr, "web", filepath.Join(k.dir, strings.ReplaceAll(t.name, " ", "_")+".log"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			b.Error(err)
		}
	}()
	warm := Load{URL: srv.URL, Provider: "web", Messages: 400, Chats: 100, Senders: 64, Prefix: "warm"}
	if _, err := warm.Run(context.Background()); err != nil {
		b.Fatalf("%s: warm-up: %v", t.name, err)
	}
	load.URL, load.Prefix = srv.URL, "run"
	if dir := os.Getenv("BOTRUN_BENCH_PROFILE"); dir != "" && !t.river {
		go profile(srv.URL, filepath.Join(dir, strings.ReplaceAll(t.name, " ", "_")+".pprof"))
	}
	res, err := load.Run(context.Background())
	if err != nil {
		b.Fatalf("%s: %v", t.name, err)
	}
	rss, peak, err := srv.Memory()
	if err != nil {
		b.Fatal(err)
	}
	r := row{name: t.name, res: res, rss: rss, peak: peak}
	fmt.Println(r)
	return r
}

const adminToken = "bench-admin-token-0123456789"

// profile saves a 5-second CPU profile of a botrun under load, and where its
// goroutines wait a second in (BOTRUN_BENCH_PROFILE=<dir>).
func profile(base, path string) {
	go func() {
		time.Sleep(time.Second)
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/debug/pprof/goroutine?debug=1", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			os.WriteFile(strings.TrimSuffix(path, ".pprof")+".goroutines", b, 0o600)
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/debug/pprof/profile?seconds=5", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("profile:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	os.WriteFile(path, b, 0o600)
}

// BenchmarkRealPath measures botrun through HTTP: the webchat API in, the
// webchat transcript out, the Go echo guest, per backend and worker count;
// then the latency at half of the peak rate, and the memory of 10,000 idle
// chats. Run it with make bench (-benchtime=1x: each figure is one run).
// BOTRUN_BENCH_PROFILE=<dir> saves a CPU profile of each botrun run there;
// BOTRUN_BENCH_SYNC=normal runs SQLite with synchronous = "normal".
func BenchmarkRealPath(b *testing.B) {
	k := newKit(b, false)
	rates := map[string]float64{}
	for _, t := range []target{
		{name: "botrun memory workers=64", backend: "memory", workers: 64},
		{name: "botrun sqlite workers=4", backend: "sqlite", workers: 4},
		{name: "botrun sqlite workers=16", backend: "sqlite", workers: 16},
		{name: "botrun sqlite workers=64", backend: "sqlite", workers: 64},
		{name: "botrun postgres workers=4", backend: "postgres", workers: 4},
		{name: "botrun postgres workers=16", backend: "postgres", workers: 16},
		{name: "botrun postgres workers=64", backend: "postgres", workers: 64},
	} {
		rates[t.name] = k.run(b, t, standard).res.Rate()
	}
	peak := rates["botrun sqlite workers=64"]
	half := standard
	half.Rate = peak / 2
	half.Messages = int(max(1000, 10*half.Rate)) // ten seconds
	lat := k.run(b, target{name: "botrun sqlite half load", backend: "sqlite", workers: 64}, half)
	idle := standard
	idle.Messages, idle.Chats = 10000, 10000
	mem := k.run(b, target{name: "botrun sqlite 10,000 chats", backend: "sqlite", workers: 64}, idle)
	fmt.Printf("\ngoals (issue 12), default instances = 8:\n")
	fmt.Printf("  sqlite FULL / memory, workers=64: %.2f (goal >= 0.5)\n", rates["botrun sqlite workers=64"]/rates["botrun memory workers=64"])
	fmt.Printf("  sqlite workers=64 / workers=4: %.2f (goal >= 0.9)\n", rates["botrun sqlite workers=64"]/rates["botrun sqlite workers=4"])
	fmt.Printf("  postgres workers=64 / workers=4: %.2f\n", rates["botrun postgres workers=64"]/rates["botrun postgres workers=4"])
	fmt.Printf("  p99 admission-to-reply at %.0f msg/s (half of sqlite's peak): %s (goal <= 50ms), p50 %s\n", half.Rate, ms(lat.res.Quantile(0.99)), ms(lat.res.Quantile(0.5)))
	fmt.Printf("  10,000 idle chats + 8 Go instances: RSS %d MiB after the run, peak %d MiB (goal <= 150 MiB)\n", mem.rss>>20, mem.peak>>20)
}

// BenchmarkPeers runs botrun and the River peer (bench/river) alternately,
// on SQLite FULL and on PostgreSQL, with the same load and worker count
// (BOTRUN_BENCH_WORKERS, default 64: botrun's default),
// BOTRUN_BENCH_ROUNDS times (default 2),
// and prints the ratios of their best rounds. Run it with make bench-peers.
// BOTRUN_BENCH_ONLY=<text> runs only the targets whose name holds it.
func BenchmarkPeers(b *testing.B) {
	k := newKit(b, true)
	workers := envInt("BOTRUN_BENCH_WORKERS", 64)
	best := map[string]float64{}
	for round := range envInt("BOTRUN_BENCH_ROUNDS", 2) {
		fmt.Printf("round %d\n", round+1)
		for _, t := range []target{
			{name: "botrun sqlite", backend: "sqlite"},
			{name: "river sqlite", backend: "sqlite", river: true},
			{name: "botrun postgres", backend: "postgres"},
			{name: "river postgres", backend: "postgres", river: true},
		} {
			t.workers = workers
			best[t.name] = max(best[t.name], k.run(b, t, standard).res.Rate())
		}
	}
	names := make([]string, 0, len(best))
	for n := range best {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("\nbest of the rounds, workers=%d:\n", workers)
	for _, n := range names {
		fmt.Printf("  %-16s %6.0f msg/s\n", n, best[n])
	}
	fmt.Printf("botrun / River: sqlite %.2fx (goal >= 5), postgres %.2fx (goal >= 2)\n",
		best["botrun sqlite"]/best["river sqlite"], best["botrun postgres"]/best["river postgres"])
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
