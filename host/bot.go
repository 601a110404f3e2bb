package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/provider/webchat"
	"github.com/botrun/botrun/host/wasm"
)

// Bot is one running bot: its module, providers, dispatcher and HTTP surface.
type Bot struct {
	cfg       *config.Config
	log       *slog.Logger
	engine    *wasm.Engine
	module    *wasm.Module
	providers map[string]provider.Provider
	chatPage  http.HandlerFunc
	dispatch  *dispatcher

	mu       sync.Mutex
	admitted map[string]bool // inbound record ids, for deduplication
	sent     map[string]string
}

// inbound is an admitted event.
type inbound struct {
	provider string
	event    abi.Event
}

// New loads cfg's module and builds its providers. It does not serve yet.
func New(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*Bot, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.Durability.Backend != "memory" {
		return nil, fmt.Errorf("%s: durability.backend %q is not available in this build yet (use memory, or leave out [durability])", cfg.File, cfg.Durability.Backend)
	}
	engine, err := wasm.NewEngine(ctx, wasm.Config{
		Workers:        cfg.Bot.Workers,
		HandlerTimeout: cfg.Bot.HandlerTimeout.D(),
		MaxMemory:      int64(cfg.Bot.MaxMemory),
		CacheDir:       filepath.Join(cfg.Bot.DataDir, "wasm-cache"),
		Logger:         logger,
	})
	if err != nil {
		return nil, err
	}
	module, err := engine.Load(ctx, cfg.Bot.Module)
	if err != nil {
		engine.Close(ctx)
		return nil, err
	}
	b := &Bot{
		cfg:       cfg,
		log:       logger,
		engine:    engine,
		module:    module,
		providers: map[string]provider.Provider{},
		admitted:  map[string]bool{},
		sent:      map[string]string{},
	}
	transcript := webchat.NewMemoryTranscript()
	for _, pc := range cfg.Providers {
		switch pc := pc.(type) {
		case *config.Webchat:
			wc := webchat.New(pc.ID, b, transcript)
			b.providers[pc.ID] = wc
			if b.chatPage == nil {
				b.chatPage = wc.Page
			}
		default:
			engine.Close(ctx)
			return nil, fmt.Errorf("provider %q: type %q has no implementation", pc.Common().ID, pc.Common().Type)
		}
	}
	b.dispatch = newDispatcher(cfg.Bot.Workers, b.handle)
	logger.Info("module loaded", "module", cfg.Bot.Module, "sha256", module.Digest()[:12])
	return b, nil
}

// Admit implements provider.Admitter: it deduplicates on the channel's message
// id and queues the event behind its chat's earlier events.
func (b *Bot) Admit(ctx context.Context, providerID string, msg provider.Message) (provider.Admission, error) {
	if msg.ID == "" {
		msg.ID = randomID()
	}
	id := providerID + ":" + msg.ID
	b.mu.Lock()
	if b.admitted[id] {
		b.mu.Unlock()
		return provider.Admission{ID: id, Duplicate: true}, nil
	}
	b.admitted[id] = true
	b.mu.Unlock()
	at := msg.ReceivedAt
	if at.IsZero() {
		at = time.Now()
	}
	ev := abi.Event{
		ID: id, Provider: providerID, Chat: msg.Chat, From: msg.From, Text: msg.Text,
		Media: mediaToABI(msg.Media), Attempt: 1, ReceivedAt: at.UnixMilli(),
	}
	if !b.dispatch.submit(job{chatKey: providerID + "\x00" + msg.Chat, event: inbound{provider: providerID, event: ev}}) {
		b.mu.Lock()
		delete(b.admitted, id)
		b.mu.Unlock()
		return provider.Admission{}, errors.New("bot is shutting down")
	}
	return provider.Admission{ID: id}, nil
}

// handle runs one event through the module.
func (b *Bot) handle(ctx context.Context, j job) {
	ev := j.event.event
	t := &turn{bot: b, provider: b.providers[j.event.provider], event: ev}
	err := b.module.Handle(ctx, ev, t)
	var he *wasm.HandlerError
	var fault *wasm.FaultError
	switch {
	case err == nil:
	case errors.As(err, &he):
		b.log.Error("handler returned an error; not retried (its sends already happened)", "event", ev.ID, "err", he.Message)
	case errors.As(err, &fault):
		b.log.Error("event failed: guest fault; the instance was discarded", "event", ev.ID, "kind", fault.Kind, "err", fault.Err)
	default:
		b.log.Error("event failed", "event", ev.ID, "err", err)
	}
}

// Handler returns the bot's HTTP surface: provider routes, the chat page at /
// and /healthz.
func (b *Bot) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range b.providers {
		if r, ok := p.(provider.Router); ok {
			r.Routes(mux)
		}
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if b.chatPage == nil {
			http.Error(w, "botrun: no webchat provider is configured; add [[providers]] id = \"web\", type = \"webchat\"", http.StatusNotFound)
			return
		}
		b.chatPage(w, r)
	})
	return mux
}

// Run serves HTTP on ln until ctx ends, then shuts down gracefully: it stops
// admitting, lets handlers in flight finish within grace, and closes the module.
func (b *Bot) Run(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	b.log.Info("stopping: finishing events in flight", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	httpErr := srv.Shutdown(sctx)
	dropped, waitErr := b.dispatch.stop(sctx)
	if dropped > 0 {
		b.log.Warn("queued events were not started (the memory backend does not keep them)", "count", dropped)
	}
	if waitErr != nil {
		b.log.Warn("handlers still running at the end of the grace period", "grace", grace)
	}
	closeErr := b.engine.Close(context.Background())
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, httpErr, closeErr)
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func mediaToABI(ms []provider.Media) []abi.Media {
	out := make([]abi.Media, len(ms))
	for i, m := range ms {
		out[i] = abi.Media{Type: m.Type, Ref: m.Ref, URL: m.URL, MIME: m.MIME, Caption: m.Caption}
	}
	return out
}
