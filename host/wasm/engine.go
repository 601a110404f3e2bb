package wasm

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/wasm/internal/hostfuncs"
)

// Config sets the limits of an Engine. The zero value of a field means its
// default.
type Config struct {
	// Workers is how many instances may run at once (default 4).
	Workers int
	// MaxIdle is how many idle instances the event pool keeps (default
	// Workers, and never fewer). More instances than Workers exist only
	// while guests wait on API calls (they give up their slot, not their
	// instance); keeping them idle spares each later event a new
	// instance, whose start (a Go guest's runtime) costs milliseconds. The
	// host sets it to bot.workers.
	MaxIdle int
	// HandlerTimeout is how long the guest may run for one event (default
	// 10s). Time it waits on a channel in a send or a media download is not
	// counted: outbox.inline_max bounds that.
	HandlerTimeout time.Duration
	// MaxMemory caps each instance's linear memory in bytes (default 64 MiB).
	MaxMemory int64
	// CacheDir, when set, holds wazero's file compilation cache.
	CacheDir string
	// Logger receives guest logs and output (default slog.Default()).
	Logger *slog.Logger
	// RandomSecret keys the guest's random source: WASI random of an event is
	// ChaCha8 seeded with HMAC-SHA256(RandomSecret, event id), so a replay on
	// an engine with the same secret reads the same bytes and a sender, who
	// picks event ids, cannot predict them. The host passes the bot's secret
	// kept in its backend; the default is a fresh random secret for this
	// engine only.
	RandomSecret []byte
}

const pageSize = 64 << 10

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	c.MaxIdle = max(c.MaxIdle, c.Workers)
	if c.HandlerTimeout <= 0 {
		c.HandlerTimeout = 10 * time.Second
	}
	if c.MaxMemory <= 0 {
		c.MaxMemory = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.RandomSecret) == 0 {
		c.RandomSecret = make([]byte, 32)
		crand.Read(c.RandomSecret)
	}
	return c
}

// Engine compiles and runs bot modules. One Engine serves every module loaded
// from it, including the modules of later reloads; it is safe for concurrent use.
type Engine struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache
	// known lists, per importable module, the functions a guest may import.
	known map[string]map[string]api.FunctionDefinition
}

// NewEngine starts a wazero runtime with the host modules instantiated.
func NewEngine(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	pages := uint32(cfg.MaxMemory / pageSize)
	if pages < 1 || cfg.MaxMemory > 4<<30 {
		return nil, fmt.Errorf("wasm: max memory %d bytes is outside 64 KiB..4 GiB", cfg.MaxMemory)
	}
	rc := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(pages)
	e := &Engine{cfg: cfg, known: map[string]map[string]api.FunctionDefinition{}}
	if cfg.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache %s: %w", cfg.CacheDir, err)
		}
		e.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	e.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	for name, b := range hostfuncs.Modules(e.rt) {
		cm, err := b.Compile(ctx)
		if err == nil {
			_, err = e.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig())
		}
		if err != nil {
			e.rt.Close(ctx)
			return nil, fmt.Errorf("wasm: host module %s: %w", name, err)
		}
		e.known[name] = cm.ExportedFunctions()
	}
	return e, nil
}

// Close releases the runtime, every module loaded from it and the cache handle.
func (e *Engine) Close(ctx context.Context) error {
	err := e.rt.Close(ctx)
	if e.cache != nil {
		err = errors.Join(err, e.cache.Close(ctx))
	}
	return err
}

// Load reads, compiles and validates the module at path, then instantiates it
// once to prove it starts. The error names what is wrong: a missing file, bytes
// that are not WebAssembly, a missing ABI export, an unknown import, or a start
// function that traps.
func (e *Engine) Load(ctx context.Context, path string) (*Module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w (build it first, or fix bot.module)", path, err)
	}
	return e.LoadBytes(ctx, path, b)
}

// Compile compiles the module's bytes, into the engine's compilation cache
// when it has one, and releases the compiled module: a later LoadBytes of
// the same bytes by an engine of the same cache directory reads the machine
// code from the cache instead of compiling. A dry run compiles its candidate
// this way in a child process whose memory is bounded (host/dryrun).
func (e *Engine) Compile(ctx context.Context, name string, b []byte) error {
	if err := checkMagic(name, b); err != nil {
		return err
	}
	cm, err := e.rt.CompileModule(ctx, b)
	if err != nil {
		return fmt.Errorf("module %s does not compile: %w", name, err)
	}
	return cm.Close(ctx)
}

// checkMagic refuses bytes that are not WebAssembly.
func checkMagic(name string, b []byte) error {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return fmt.Errorf("module %s is not a WebAssembly module (no \\0asm header)", name)
	}
	return nil
}

// LoadBytes is Load for a module already in memory; name is used in errors.
func (e *Engine) LoadBytes(ctx context.Context, name string, b []byte) (*Module, error) {
	if err := checkMagic(name, b); err != nil {
		return nil, err
	}
	cm, err := e.rt.CompileModule(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("module %s does not compile: %w", name, err)
	}
	if err := e.validate(name, cm); err != nil {
		cm.Close(ctx)
		return nil, err
	}
	sum := sha256.Sum256(b)
	m := &Module{
		engine:   e,
		logger:   e.cfg.Logger.With(slog.String("module", name)),
		name:     name,
		digest:   hex.EncodeToString(sum[:]),
		compiled: cm,
		events:   pool{slots: make(chan struct{}, e.cfg.Workers), maxIdle: e.cfg.MaxIdle},
		hooks:    pool{slots: make(chan struct{}, e.cfg.Workers), maxIdle: e.cfg.Workers},
	}
	exports := cm.ExportedFunctions()
	_, m.before = exports[abi.ExportBeforeSend]
	_, m.after = exports[abi.ExportAfterSend]
	inst, err := m.instantiate(ctx)
	if err != nil {
		cm.Close(ctx)
		return nil, err
	}
	m.events.idle = append(m.events.idle, inst)
	return m, nil
}
