package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/wasm"
)

// module is a Guest of one loaded module.
type module struct{ *wasm.Module }

// Handle implements Guest.
func (m module) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	return m.Digest(), m.Module.Handle(ctx, ev, env)
}

// reloader is the Guest of a bot with bot.hot_reload: it runs events on the
// current module and swaps in a new one when the module file changes. New
// events run the new module; events in flight finish on the old one, which is
// closed once they drain. A module that does not compile, fails validation or
// traps while starting is refused: the old one keeps serving.
type reloader struct {
	engine *wasm.Engine
	path   string
	log    func(msg string, args ...any)
	logErr func(msg string, args ...any)
	// refused, when set, alerts the operator of a refused module.
	refused func(err error)
	// history, when set, keeps the module's changes.
	history *observe.ModuleHistory

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

func newReloader(engine *wasm.Engine, path string, mod *wasm.Module, b *Bot) *reloader {
	r := &reloader{engine: engine, path: path, cur: &loaded{mod: mod},
		log: b.log.Info, logErr: b.log.Error, history: &b.modules}
	if b.alerts != nil {
		r.refused = func(err error) { b.alerts.Emit(Alert{Name: AlertModuleRefused, ID: path, Error: err.Error()}) }
	}
	return r
}

// refuse reports a refused module (its bytes, nil when unread) to the
// operator's alerts and the module history.
func (r *reloader) refuse(module []byte, err error) {
	if r.history != nil {
		r.history.Add("refused", module, "", err)
	}
	if r.refused != nil {
		r.refused(err)
	}
}

func (r *reloader) acquire() *loaded {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.refs++
	return r.cur
}

func (r *reloader) release(l *loaded) {
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
func (r *reloader) Handle(ctx context.Context, ev abi.Event, env wasm.Env) (string, error) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.Digest(), l.mod.Handle(ctx, ev, env)
}

// Instances reports the current module's handler instances (see
// wasm.Module.Instances).
func (r *reloader) Instances() (busy, idle int) {
	r.mu.Lock()
	mod := r.cur.mod
	r.mu.Unlock()
	return mod.Instances()
}

// Digest implements Guest.
func (r *reloader) Digest() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.mod.Digest()
}

// swap loads b as the new module unless it is the current one. It reports
// whether a new module went live.
func (r *reloader) swap(ctx context.Context, b []byte) (bool, error) {
	cur := r.Digest()
	mod, err := r.engine.LoadBytes(ctx, r.path, b)
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

// watch reloads the module when its file changes, until ctx ends. It watches
// the directory (editors and build tools replace files by rename) and waits
// for the writes to settle before loading.
func (r *reloader) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("hot reload: %w", err)
	}
	dir, name := filepath.Split(r.path)
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
					timer = time.After(settle)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.logErr("hot reload: watch error", "err", err)
			case <-timer:
				timer = nil
				b, err := os.ReadFile(r.path)
				if err != nil {
					r.failures.Add(1)
					r.logErr("hot reload: module refused; the old one keeps serving", "module", r.path, "err", err)
					r.refuse(nil, err)
					continue
				}
				swapped, err := r.swap(ctx, b)
				switch {
				case err != nil:
					r.logErr("hot reload: module refused; the old one keeps serving", "module", r.path, "err", err)
					r.refuse(b, err)
				case swapped:
					if r.history != nil {
						r.history.Add("reloaded", nil, r.Digest(), nil)
					}
					r.log("hot reload: new module live", "module", r.path, "sha256", r.Digest()[:12])
				}
			}
		}
	}()
	return nil
}

// SendHooks is implemented by a Guest that runs the module's send hooks
// (botrun_before_send and botrun_after_send, abi/SPEC.md section 4.7); see
// send.Hooks.
type SendHooks = send.Hooks

// Hooks implements SendHooks on the current module.
func (r *reloader) Hooks() (before, after bool) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.Hooks()
}

// BeforeSend implements SendHooks on the current module.
func (r *reloader) BeforeSend(ctx context.Context, h abi.SendHook) (wasm.BeforeSend, error) {
	l := r.acquire()
	defer r.release(l)
	return l.mod.BeforeSend(ctx, h)
}

// AfterSend implements SendHooks on the current module.
func (r *reloader) AfterSend(ctx context.Context, h abi.SendHook) error {
	l := r.acquire()
	defer r.release(l)
	return l.mod.AfterSend(ctx, h)
}
