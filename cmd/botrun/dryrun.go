package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/dryrun"
)

const dryRunUsage = `Usage: botrun replay --dry-run [-c bot.toml] --module NEW.wasm [--since 24h] [--chat C] [--provider P] [--json]

Runs the journaled inbound records (done, dead and in flight) through the
module NEW.wasm in the sandbox, each turn answered with the state and media
its original turn read, and compares what NEW would send with what the
outbox recorded. Nothing is sent and nothing is written: it reads the bot's
journal beside a live bot (SQLite read-only; PostgreSQL, Redis).

It prints a unified diff per changed conversation and a summary. Exit 0 when
nothing changed, 1 when a record changed or NEW faulted where the original
did not, 2 on a usage or I/O error: a release gate for CI.`

// cmdReplayDryRun is botrun replay --dry-run.
func cmdReplayDryRun(args []string, stdout, stderr io.Writer) int {
	fs, cfgPath := opsFlags("replay --dry-run", dryRunUsage, stderr)
	fs.Bool("dry-run", true, "replay in the sandbox, sending and writing nothing")
	module := fs.String("module", "", "the candidate module (.wasm)")
	since := fs.String("since", "", "only records admitted within this long (e.g. 24h, 7d)")
	chat := fs.String("chat", "", "only records of this chat")
	prov := fs.String("provider", "", "only records of this channel")
	asJSON := fs.Bool("json", false, "one JSON object per record, one a line")
	if code, stop := parse(fs, args, 0); stop {
		return code
	}
	if *module == "" {
		fmt.Fprintln(stderr, "botrun replay --dry-run: --module NEW.wasm is required")
		return 2
	}
	filter, err := dryrun.NewFilter(*since, *chat, *prov)
	if err != nil {
		fmt.Fprintf(stderr, "botrun replay --dry-run: --%v\n", err)
		return 2
	}
	code, err := func() (int, error) {
		if st, err := os.Stat(*module); err == nil {
			if err := dryrun.CheckSize(*module, st.Size()); err != nil {
				return 2, err
			}
		}
		wasmBytes, err := os.ReadFile(*module)
		if err != nil {
			return 2, fmt.Errorf("--module: %w", err)
		}
		cfg, j, b, err := openScope(*cfgPath, true)
		if err != nil {
			if cfg != nil && lockedBackend(cfg) {
				err = fmt.Errorf("%w\n(the %s backend's journal is one process's: stop the bot, or copy its journal files and point a copy of %s at the copy)", err, cfg.Durability.Backend, *cfgPath)
			}
			return 2, err
		}
		defer b.Close()
		p := newProgress(stderr)
		var kv durability.Kv
		if kb, ok := b.(interface{ Kv() durability.Kv }); ok {
			kv = kb.Kv()
		}
		rep, err := dryrun.Run(context.Background(), dryrun.Options{
			Journals: j, Kv: kv, Config: cfg, Module: wasmBytes, ModuleName: *module, Filter: filter, Progress: p.update,
		})
		p.finish()
		if err != nil {
			return 2, err
		}
		if *asJSON {
			if err := rep.WriteJSON(stdout); err != nil {
				return 2, err
			}
		} else {
			rep.WriteText(stdout)
		}
		if rep.Failed() {
			return 1, nil
		}
		return 0, nil
	}()
	if err != nil {
		fmt.Fprintf(stderr, "botrun replay --dry-run: %v\n", err)
	}
	return code
}

// progress reports records done / total and the rate on stderr: on a
// terminal as it goes, elsewhere once a run has taken a few seconds.
type progress struct {
	w        io.Writer
	terminal bool
	start    time.Time
	mu       sync.Mutex
	last     time.Time
	shown    bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 500*time.Millisecond && done != total {
		return
	}
	if !p.terminal && now.Sub(p.start) < 5*time.Second {
		return
	}
	p.last = now
	rate := float64(done) / max(now.Sub(p.start).Seconds(), 1e-3)
	end := "\n"
	if p.terminal {
		end = "\r"
	}
	fmt.Fprintf(p.w, "replayed %d/%d records (%.0f/s)%s", done, total, rate, end)
	p.shown = true
}

func (p *progress) finish() {
	if p.terminal && p.shown {
		fmt.Fprintln(p.w)
	}
}

// lockedBackend reports whether cfg's backend is a file one process holds
// (file, events unless shared): a dry run cannot open it beside the bot.
func lockedBackend(cfg *config.Config) bool {
	if _, ok := cfg.Durability.Options.(durability.ReadOnlyOpener); ok {
		return false
	}
	return !cfg.Durability.Shared
}
