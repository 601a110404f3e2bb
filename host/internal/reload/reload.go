// Package reload is the bot's module: it builds the WebAssembly engine and
// loads the configured module, and, with bot.hot_reload, swaps in a new
// module when the module file changes (the Reloader). What it tells the
// host (a refused module's alert, the module's history) goes through
// callbacks in its Config.
//
// reload imports abi, host/wasm, host/internal/clock and fsnotify; it
// never imports host. It reads time only through its Config's clock.
package reload

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/wasm"
)

// Guest runs the bot's logic for one event (host.Guest): a Module, or a
// Reloader.
type Guest interface {
	// Handle runs ev against env and returns the digest of the code that
	// ran it.
	Handle(ctx context.Context, ev abi.Event, env wasm.Env) (ran string, err error)
	// Digest identifies the code that runs the next event.
	Digest() string
}

// Config is how a module is loaded and reloaded.
type Config struct {
	// Path is the module file (bot.module).
	Path string
	// Engine configures the engine Load builds.
	Engine wasm.Config
	// Hot turns on hot reload (bot.hot_reload): Load returns a Reloader.
	Hot bool
	// History, when set, keeps the module's changes: "loaded" and
	// "reloaded" with the new digest, "refused" with the module's bytes
	// (nil when unread) and why (observe.ModuleHistory.Add).
	History func(change string, module []byte, digest string, err error)
	// Refused, when set, alerts the operator of a refused module.
	Refused func(err error)
	Clock   clock.Clock
	Log     *slog.Logger
}

// Load builds the engine and loads the module c names. The guest is the
// module, or with c.Hot the Reloader over it (also returned; nil without
// c.Hot). Closing the engine is the caller's.
func Load(ctx context.Context, c Config) (*wasm.Engine, Guest, *Reloader, error) {
	engine, err := wasm.NewEngine(ctx, c.Engine)
	if err != nil {
		return nil, nil, nil, err
	}
	mod, err := engine.Load(ctx, c.Path)
	if err != nil {
		engine.Close(ctx)
		return nil, nil, nil, err
	}
	var guest Guest = Module{mod}
	var r *Reloader
	if c.Hot {
		r = New(engine, mod, c)
		guest = r
	}
	if c.History != nil {
		c.History("loaded", nil, mod.Digest(), nil)
	}
	c.Log.Info("module loaded", "module", c.Path, "sha256", mod.Digest()[:12], "hot_reload", c.Hot)
	return engine, guest, r, nil
}

// Module is a Guest of one loaded module.
type Module struct{ *wasm.Module }

// Handle implements Guest.
func (m Module) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	return m.Digest(), m.Module.Handle(ctx, ev, env)
}

// Reloader is the Guest of a bot with bot.hot_reload: it runs events on the
// current module and swaps in a new one when the module file changes. New
// events run the new module; events in flight finish on the old one, which is
// closed once they drain. A module that does not compile, fails validation or
// traps while starting is refused: the old one keeps serving.
type Reloader struct {
	engine *wasm.Engine
	c      Config

	mu  sync.Mutex
	cur *loaded

	reloads, failures atomic.Int64
}

// loaded is one module with the events running on it.
type loaded struct {
	mod     *wasm.Module
	refs    int
	retired bool
}

// New returns a Reloader of c.Path on engine, serving mod until the file
// changes (c.Engine is not used).
func New(engine *wasm.Engine, mod *wasm.Module, c Config) *Reloader {
	c.Clock = clock.Or(c.Clock)
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return &Reloader{engine: engine, c: c, cur: &loaded{mod: mod}}
}

// Counts reports the modules swapped in and the reloads refused.
func (r *Reloader) Counts() (reloads, failures int64) {
	return r.reloads.Load(), r.failures.Load()
}

// refuse reports a refused module (its bytes, nil when unread) to the
// operator's alerts and the module history.
func (r *Reloader) refuse(module []byte, err error) {
	if r.c.History != nil {
		r.c.History("refused", module, "", err)
	}
	if r.c.Refused != nil {
		r.c.Refused(err)
	}
}

func (r *Reloader) acquire() *loaded {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.refs++
	return r.cur
}

func (r *Reloader) release(l *loaded) {
	r.mu.Lock()
	l.refs--
	done := l.retired && l.refs == 0
	r.mu.Unlock()
	if done {
		l.mod.Close(context.Background())
	}
}

// Handle implements Guest on the current module, and reports its digest so
// the completion names the module that ran.
func (r *Reloader) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.Digest(), l.mod.Handle(ctx, ev, env)
}

// Instances reports the current module's handler instances (see
// wasm.Module.Instances).
func (r *Reloader) Instances() (busy, idle int) {
	r.mu.Lock()
	mod := r.cur.mod
	r.mu.Unlock()
	return mod.Instances()
}

// Digest implements Guest.
func (r *Reloader) Digest() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.mod.Digest()
}

// Swap loads b as the new module unless it is the current one. It reports
// whether a new module went live.
func (r *Reloader) Swap(ctx context.Context, b []byte) (bool, error) {
	cur := r.Digest()
	mod, err := r.engine.LoadBytes(ctx, r.c.Path, b)
	if err != nil {
		r.failures.Add(1)
		return false, err
	}
	if mod.Digest() == cur {
		mod.Close(ctx)
		return false, nil
	}
	r.mu.Lock()
	old := r.cur
	r.cur = &loaded{mod: mod}
	old.retired = true
	drained := old.refs == 0
	r.mu.Unlock()
	if drained {
		old.mod.Close(ctx)
	}
	r.reloads.Add(1)
	return true, nil
}

// Watch reloads the module when its file changes, until ctx ends. It watches
// the directory (editors and build tools replace files by rename) and waits
// for the writes to settle before loading.
func (r *Reloader) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("hot reload: %w", err)
	}
	dir, name := filepath.Split(r.c.Path)
	if dir == "" {
		dir = "."
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("hot reload: watching %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		const settle = 50 * time.Millisecond
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) == name && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					timer = r.c.Clock.NewTimer(settle).C()
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.c.Log.Error("hot reload: watch error", "err", err)
			case <-timer:
				timer = nil
				b, err := os.ReadFile(r.c.Path)
				if err != nil {
					r.failures.Add(1)
					r.c.Log.Error("hot reload: module refused; the old one keeps serving", "module", r.c.Path, "err", err)
					r.refuse(nil, err)
					continue
				}
				swapped, err := r.Swap(ctx, b)
				switch {
				case err != nil:
					r.c.Log.Error("hot reload: module refused; the old one keeps serving", "module", r.c.Path, "err", err)
					r.refuse(b, err)
				case swapped:
					if r.c.History != nil {
						r.c.History("reloaded", nil, r.Digest(), nil)
					}
					r.c.Log.Info("hot reload: new module live", "module", r.c.Path, "sha256", r.Digest()[:12])
				}
			}
		}
	}()
	return nil
}

// Hooks implements send.Hooks on the current module.
func (r *Reloader) Hooks() (before, after bool) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.Hooks()
}

// BeforeSend implements send.Hooks on the current module.
func (r *Reloader) BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.BeforeSend(ctx, h)
}

// AfterSend implements send.Hooks on the current module.
func (r *Reloader) AfterSend(ctx context.Context, h abi.SendHook) error {
	l := r.acquire()
	defer r.release(l)
	return l.mod.AfterSend(ctx, h)
}
