package wasm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm/internal/hostfuncs"
)

// Module is one loaded bot module with its pools of instances. Handle may be
// called from many goroutines; at most Config.Workers calls run at once and no
// instance is ever used by two calls. Send hooks run on a pool of their own
// (of the same size): a hook runs while a handler's instance waits in a
// send, so it never takes, or waits for, a handler's instance.
type Module struct {
	engine   *Engine
	logger   *slog.Logger
	name     string
	digest   string
	compiled wazero.CompiledModule
	// before and after say whether the module exports the send hooks.
	before, after bool

	mu     sync.Mutex
	events pool
	hooks  pool
	closed bool
}

// pool is a set of instances and the slots that bound how many run at once.
type pool struct {
	slots chan struct{}
	idle  []*instance
	// maxIdle bounds idle (Config.MaxIdle).
	maxIdle int
}

// Digest is the hex SHA-256 of the module's bytes.
func (m *Module) Digest() string { return m.digest }

// Name is the path or name the module was loaded from.
func (m *Module) Name() string { return m.name }

// startTimeout is the least time a module's start function gets.
const startTimeout = time.Minute

// instance is one instantiated module, used by one call at a time.
type instance struct {
	mod     api.Module
	onEvent api.Function
	clock   *virtualClock
	rand    *eventRand
	out     *hostfuncs.Output
}

// Close closes the idle instances and the compiled module. Calls in flight
// finish on their instances, which are closed when they return.
func (m *Module) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	idle := append(m.events.idle, m.hooks.idle...)
	m.events.idle, m.hooks.idle = nil, nil
	m.mu.Unlock()
	for _, inst := range idle {
		inst.mod.Close(ctx)
	}
	return m.compiled.Close(ctx)
}

func (m *Module) instantiate(ctx context.Context) (*instance, error) {
	logger := m.engine.cfg.Logger.With(slog.String("module", m.name))
	inst := &instance{
		clock: &virtualClock{},
		rand:  newEventRand(m.engine.cfg.RandomSecret, ""),
		out:   hostfuncs.NewOutput(logger),
	}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(abi.ExportInitialize).
		WithStdout(inst.out.Stdout()).
		WithStderr(inst.out.Stderr()).
		WithWalltime(inst.clock.walltime, 1000).
		WithNanotime(inst.clock.nanotime, 1000).
		WithNanosleep(inst.clock.sleep).
		WithOsyield(func() {}).
		WithRandSource(inst.rand)
	// The start function (a runtime's initialisation) runs under its own
	// deadline: the handler's, but never under startTimeout, so a loaded
	// machine does not fail a module whose handlers are meant to be quick.
	ctx, cancel := context.WithTimeout(ctx, max(m.engine.cfg.HandlerTimeout, startTimeout))
	defer cancel()
	mod, err := m.engine.rt.InstantiateModule(ctx, m.compiled, cfg)
	inst.out.End(logger, "")
	if err != nil {
		return nil, fmt.Errorf("module %s does not start: %w", m.name, err)
	}
	inst.mod = mod
	inst.onEvent = mod.ExportedFunction(abi.ExportOnEvent)
	return inst, nil
}

// acquire takes an instance of p, waiting while all Workers are busy.
func (m *Module) acquire(ctx context.Context, p *pool) (*instance, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		<-p.slots
		return nil, fmt.Errorf("module %s is closed", m.name)
	}
	if n := len(p.idle); n > 0 {
		inst := p.idle[n-1]
		p.idle = p.idle[:n-1]
		m.mu.Unlock()
		return inst, nil
	}
	m.mu.Unlock()
	inst, err := m.instantiate(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return inst, nil
}

// slot is a call's place among p's running instances (hostfuncs.Call's
// Slot): an API call gives it up while it waits and takes one back after,
// so Workers bounds the instances computing, not those waiting.
type slot struct{ p *pool }

func (s slot) Pause()  { <-s.p.slots }
func (s slot) Resume() { s.p.slots <- struct{}{} }

// release returns a healthy instance to p, or closes a broken one.
func (m *Module) release(ctx context.Context, p *pool, inst *instance, broken bool) {
	m.mu.Lock()
	// More instances than slots exist while guests wait on APIs (slot):
	// the pool keeps up to maxIdle of them idle.
	if broken || m.closed || len(p.idle) >= p.maxIdle {
		m.mu.Unlock()
		inst.mod.Close(ctx)
	} else {
		p.idle = append(p.idle, inst)
		m.mu.Unlock()
	}
	<-p.slots
}

// HandlerError is returned by Handle when the guest's handler returned an
// error (status HANDLER_ERROR). Its effects happened; it is not retried.
type HandlerError struct {
	// Message is the last line the guest logged at error level, if any.
	Message string
}

func (e *HandlerError) Error() string {
	if e.Message == "" {
		return "handler returned an error"
	}
	return "handler returned an error: " + e.Message
}

// FaultKind says why a call faulted.
type FaultKind string

// Fault kinds.
const (
	FaultTrap     FaultKind = "trap"
	FaultDeadline FaultKind = "deadline"
	FaultMemory   FaultKind = "out-of-memory"
	FaultExit     FaultKind = "exit"
	FaultCanceled FaultKind = "canceled"
	FaultHost     FaultKind = "host-error"
)

// FaultError is returned by Handle when the call did not complete: a trap, the
// deadline, out-of-memory, a guest exit, or a host function that failed. The
// instance was discarded; the event may be retried safely.
type FaultError struct {
	Kind FaultKind
	Err  error
}

func (e *FaultError) Error() string { return fmt.Sprintf("guest fault (%s): %v", e.Kind, e.Err) }

// FaultKindOf reads the fault kind back from an error text that holds a
// FaultError's ("… guest fault (<kind>): …", as journaled); "" when it holds
// none.
func FaultKindOf(msg string) FaultKind {
	_, rest, ok := strings.Cut(msg, "guest fault (")
	if !ok {
		return ""
	}
	kind, _, ok := strings.Cut(rest, ")")
	if !ok {
		return ""
	}
	return FaultKind(kind)
}

// Unwrap returns the underlying error.
func (e *FaultError) Unwrap() error { return e.Err }

// Handle runs botrun_on_event for ev on a pooled instance, with env answering
// the guest's host calls. It returns nil when the handler succeeded, a
// *HandlerError when it returned an error, and a *FaultError when the call
// faulted.
func (m *Module) Handle(ctx context.Context, ev abi.Event, env Env) error {
	if ev.Media == nil {
		ev.Media = []abi.Media{} // SPEC.md: an array, never null
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("wasm: encode event %s: %w", ev.ID, err)
	}
	inst, err := m.acquire(ctx, &m.events)
	if err != nil {
		return &FaultError{Kind: FaultHost, Err: err}
	}
	c := &hostfuncs.Call{
		Logger:     m.logger,
		EventID:    ev.ID,
		Payload:    payload,
		ReceivedAt: ev.ReceivedAt,
		Env:        env,
		Output:     inst.out,
	}
	inst.clock.set(ev.ReceivedAt)
	inst.rand.reseed(ev.ID)
	inst.out.Begin(ev.ID)

	callCtx, dl := startDeadline(ctx, m.engine.cfg.HandlerTimeout)
	c.Deadline, c.Slot = dl, slot{&m.events}
	res, callErr := inst.onEvent.Call(hostfuncs.WithCall(callCtx, c), uint64(len(payload)))
	deadline := context.Cause(callCtx)
	dl.stop()
	inst.out.End(m.logger, ev.ID)

	if callErr == nil && c.Failure() == nil {
		m.release(ctx, &m.events, inst, false)
		switch abi.Status(int32(res[0])) {
		case abi.StatusOK:
			return nil
		case abi.StatusHandlerError:
			return &HandlerError{Message: c.LastError()}
		default:
			c.Log().Warn("guest returned an unknown status; treating it as a handler error", "status", int32(res[0]))
			return &HandlerError{Message: c.LastError()}
		}
	}
	fault := m.classify(inst, callErr, deadline, ctx.Err(), c.Failure())
	m.release(ctx, &m.events, inst, true)
	return fault
}

// Hooks reports whether the module exports botrun_before_send and
// botrun_after_send.
func (m *Module) Hooks() (before, after bool) { return m.before, m.after }

// BeforeSend is the outcome of botrun_before_send.
type BeforeSend struct {
	// Cancel is true when the hook cancelled the send.
	Cancel bool
	// Rewrite is the send as the hook rewrote it; nil when unchanged.
	Rewrite *abi.SendRequest
}

// BeforeSend runs botrun_before_send for h on a hook instance. A module
// without the hook answers the send unchanged. The error is a *HandlerError
// (the hook returned HANDLER_ERROR) or a *FaultError.
func (m *Module) BeforeSend(ctx context.Context, h abi.SendHook) (BeforeSend, error) {
	if !m.before {
		return BeforeSend{}, nil
	}
	h.Hook = abi.HookBeforeSend
	status, c, err := m.runHook(ctx, abi.ExportBeforeSend, h)
	if err != nil {
		return BeforeSend{}, err
	}
	if status == abi.StatusCancel {
		return BeforeSend{Cancel: true}, nil
	}
	return BeforeSend{Rewrite: c.Rewrite()}, nil
}

// AfterSend runs botrun_after_send for h on a hook instance; a module without
// the hook does nothing. The error is a *HandlerError or a *FaultError.
func (m *Module) AfterSend(ctx context.Context, h abi.SendHook) error {
	if !m.after {
		return nil
	}
	h.Hook = abi.HookAfterSend
	_, _, err := m.runHook(ctx, abi.ExportAfterSend, h)
	return err
}

// The output budget of one send hook call.
const (
	hookOutputBytes = hostfuncs.OutputBudgetBytes / 16
	hookOutputLines = hostfuncs.OutputBudgetLines / 16
)

// runHook calls the hook export name with h as its payload (event_read),
// under the handler's deadline, its clock at h.Time and its random source
// seeded with the send's key. OK and CANCEL are statuses; HANDLER_ERROR (and
// any other) a *HandlerError. Called with a Budget (WithBudget), the call
// draws on it: with none left it does not run, and a call cut at its
// deadline spends the rest; both answer an error wrapping ErrHookBudget.
func (m *Module) runHook(ctx context.Context, name string, h abi.SendHook) (abi.Status, *hostfuncs.Call, error) {
	payload, err := json.Marshal(h)
	if err != nil {
		return 0, nil, fmt.Errorf("wasm: encode %s hook %s: %w", name, h.Key, err)
	}
	budget := budgetOf(ctx)
	limit, outBytes, outLines := m.engine.cfg.HandlerTimeout, hookOutputBytes, hookOutputLines
	if budget != nil {
		var ok bool
		if limit, outBytes, outLines, ok = budget.take(limit, outBytes, outLines); !ok {
			return 0, nil, fmt.Errorf("%s of %s not run: %w (the event's hooks share one bot.handler_timeout, %s, of guest time)", name, h.Key, ErrHookBudget, m.engine.cfg.HandlerTimeout)
		}
	}
	inst, err := m.acquire(ctx, &m.hooks)
	if err != nil {
		return 0, nil, &FaultError{Kind: FaultHost, Err: err}
	}
	tag := name + " " + h.Key
	c := &hostfuncs.Call{Logger: m.logger, EventID: tag, Payload: payload, ReceivedAt: h.Time, Output: inst.out, Hook: name}
	inst.clock.set(h.Time)
	inst.rand.reseed(name + "\x00" + h.Key)
	inst.out.Begin(tag)
	// A hook runs once per send, up to bot.max_broadcast times for one
	// event: its output budget is a sixteenth of an event's (and within
	// what the event's hooks have left).
	inst.out.Limit(outBytes, outLines)
	callCtx, dl := startDeadline(ctx, limit)
	c.Deadline = dl
	res, callErr := inst.mod.ExportedFunction(name).Call(hostfuncs.WithCall(callCtx, c), uint64(len(payload)))
	deadline := context.Cause(callCtx)
	used := dl.used()
	dl.stop()
	inst.out.Flush()
	report := true
	if budget != nil {
		bytesLeft, linesLeft, cut := inst.out.Left()
		// The event's one truncation line: its later hooks are cut silently.
		report = budget.spend(used, outBytes-bytesLeft, outLines-linesLeft, cut)
	}
	if report {
		inst.out.Report(m.logger, tag)
	}
	if callErr != nil || c.Failure() != nil {
		fault := m.classify(inst, callErr, deadline, ctx.Err(), c.Failure())
		m.release(ctx, &m.hooks, inst, true)
		if budget != nil && fault.Kind == FaultDeadline {
			budget.exhaust()
			return 0, c, fmt.Errorf("%s of %s cut after %s: %w (the event's hooks share one bot.handler_timeout, %s, of guest time)", name, h.Key, used.Round(time.Millisecond), ErrHookBudget, m.engine.cfg.HandlerTimeout)
		}
		return 0, c, fault
	}
	m.release(ctx, &m.hooks, inst, false)
	switch st := abi.Status(int32(res[0])); st {
	case abi.StatusOK, abi.StatusCancel:
		return st, c, nil
	case abi.StatusHandlerError:
	default:
		c.Log().Warn("send hook returned an unknown status; treating it as a handler error", "status", int32(res[0]))
	}
	return abi.StatusHandlerError, c, &HandlerError{Message: c.LastError()}
}

func (m *Module) classify(inst *instance, callErr, deadline, parent, hostErr error) *FaultError {
	var exit *sys.ExitError
	switch {
	case hostErr != nil:
		return &FaultError{Kind: FaultHost, Err: hostErr}
	case parent != nil:
		return &FaultError{Kind: FaultCanceled, Err: parent}
	case errors.Is(deadline, errGuestDeadline):
		return &FaultError{Kind: FaultDeadline, Err: fmt.Errorf("handler ran past bot.handler_timeout (%s)", m.engine.cfg.HandlerTimeout)}
	case m.nearMemoryLimit(inst):
		return &FaultError{Kind: FaultMemory, Err: fmt.Errorf("guest reached bot.max_memory (%d bytes): %w", m.engine.cfg.MaxMemory, callErr)}
	case errors.As(callErr, &exit):
		return &FaultError{Kind: FaultExit, Err: fmt.Errorf("guest exited with code %d", exit.ExitCode())}
	}
	return &FaultError{Kind: FaultTrap, Err: callErr}
}

// nearMemoryLimit reports whether the instance's memory is within 1 MiB of the
// cap: a fault there is an allocation that could not grow.
func (m *Module) nearMemoryLimit(inst *instance) bool {
	mem := inst.mod.Memory()
	if mem == nil {
		return false
	}
	return int64(mem.Size())+(1<<20) >= m.engine.cfg.MaxMemory
}

// virtualClock is the guest's only clock: it starts at the event's journaled
// time and advances one microsecond per read (and by any sleep), so a replay
// reads the same times in the same order.
type virtualClock struct{ ns atomic.Int64 }

func (c *virtualClock) set(ms int64) { c.ns.Store(ms * 1e6) }

func (c *virtualClock) walltime() (int64, int32) {
	ns := c.ns.Add(1000)
	return ns / 1e9, int32(ns % 1e9)
}

func (c *virtualClock) nanotime() int64 { return c.ns.Add(1000) }

func (c *virtualClock) sleep(ns int64) {
	if ns > 0 {
		c.ns.Add(ns)
	}
}

// eventRand is WASI's random source, seeded with HMAC-SHA256(secret, event
// id): a replay under the same secret reads the same bytes, and whoever picks
// the event id cannot predict them without the secret.
type eventRand struct {
	secret []byte
	src    *rand.ChaCha8
}

func newEventRand(secret []byte, id string) *eventRand {
	r := &eventRand{secret: secret}
	r.reseed(id)
	return r
}

func (r *eventRand) reseed(id string) {
	mac := hmac.New(sha256.New, r.secret)
	mac.Write([]byte(id))
	r.src = rand.NewChaCha8([32]byte(mac.Sum(nil)))
}

func (r *eventRand) Read(p []byte) (int, error) {
	return r.src.Read(p)
}

// Instances reports the module's handler instances: busy running an event,
// and idle (instantiated, waiting in the pool).
func (m *Module) Instances() (busy, idle int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events.slots), len(m.events.idle)
}
