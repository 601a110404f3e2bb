package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/alertsink"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/fetch"
	"github.com/botrun/botrun/host/internal/guard"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/reload"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/internal/sweep"
	"github.com/botrun/botrun/host/internal/turn"
	"github.com/botrun/botrun/host/internal/worker"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/host/wasm"
)

// Guest runs the bot's logic for one event: the loaded WebAssembly module
// (swapped between events when hot reload is on); tests may pass a native
// one.
type Guest interface {
	// Handle runs ev against env and returns the digest of the code that
	// ran it, which the completion records.
	Handle(ctx context.Context, ev abi.Event, env wasm.Env) (ran string, err error)
	// Digest identifies the code that runs the next event.
	Digest() string
}

// Options change how New builds a bot. The zero value builds everything from
// the config.
type Options struct {
	// Logger receives the bot's logs (default slog.Default()).
	Logger *slog.Logger
	// Backend replaces the backend named by the config (the bot does not close
	// an injected backend).
	Backend durability.Backend
	// Guest replaces the config's module.
	Guest Guest
	// Channels replace the config's channels.
	Channels []channel.Channel
	// TracerProvider, when set, receives the bot's traces; unset, the bot
	// traces nothing. botrun builds the OTLP exporter [tracing]
	// otlp_endpoint configures and passes it here (tests pass one with an
	// in-memory exporter); shutting it down is the caller's.
	TracerProvider trace.TracerProvider
	// Clock is the time the message path reads: leases, retries, sweeps
	// (nil: the wall clock; tests pass a clock.Fake).
	Clock clock.Clock
	// LookupIP resolves the host names of the [[apis]] URLs (nil: the
	// system's resolver). Tests pass their own to prove that a name which
	// resolves to a private address is refused, with nothing sent to it.
	LookupIP func(ctx context.Context, host string) ([]net.IP, error)
}

// Bot is one running bot: its guest, providers, journals, dispatcher,
// sender, sweeper and HTTP surface.
type Bot struct {
	cfg       *config.Config
	log       *slog.Logger
	policy    policy
	engine    *wasm.Engine
	guest     Guest
	reload    *reload.Reloader
	providers map[string]channel.Channel
	// ordered are the providers in config order (the first webchat serves
	// the chat page at /).
	ordered []channel.Channel
	// mounts add routes to the HTTP surface (the admin API).
	mounts []func(*http.ServeMux)
	// servedAlso are served by Run besides its own listener (the admin API
	// on [admin] listen).
	servedAlso []served
	// timeouts bound every HTTP server Run starts.
	timeouts serverTimeouts

	backend    durability.Backend
	ownBackend bool
	// kv is the backend's Kv, which channels keep their own data in (nil
	// when the backend has none).
	kv durability.Kv
	// answers journals the API calls' answers (nil without a Kv); apis
	// are the [[apis]] entries' callers, closed with the bot.
	answers *answers.Journal
	apis    map[string]turn.API
	inbox   durability.InboxJournal
	// coord serializes chats' turns across replicas (nil without
	// [durability] coordination).
	coord  *worker.Coordination
	outbox durability.OutboxJournal
	state  durability.StateStore

	dispatch *dispatch.Dispatcher
	sender   *send.Sender
	// worker runs the dispatcher's jobs: sends and turns.
	worker *worker.Worker
	// op is the bot's operator (Operator).
	op *ops.Operator
	// leaders are this replica's elections of the providers whose session
	// is "leader".
	leaders lease.Elections
	// metrics are the durability counters.
	metrics observe.Counters
	// obs is the bot's observability (Observer): Prometheus metrics, queue
	// depths, last hour.
	obs *observe.Observer
	// modules is the module's history: its load and hot reloads.
	modules observe.ModuleHistory
	// tr traces each inbound message ([tracing]); off by default.
	tr observe.Tracer
	// admissionFailed rate-limits the alerts of fail-closed admissions.
	admissionFailed observe.AdmissionFailures
	mediaRefs       bool
	boot            time.Time
	// clock is Options.Clock, or the wall clock.
	clock clock.Clock
	// wake asks the sweeper for a sweep now.
	wake    sweep.Wake
	sweeper *sweep.Sweeper
	leases  *lease.Leases
	alerts  *observe.Alerts
	// forward journals the alerts for [alerts] url (nil without one).
	forward *alertsink.Forwarder
	// guard recovers and counts the channels' panics.
	guard *guard.Guard
	// runners are the channels' Run goroutines (channel.Runner).
	runners sync.WaitGroup

	mu       sync.Mutex
	started  bool
	stopping bool
	stopped  chan struct{}
	// draining is closed when the bot begins to stop (Draining).
	draining  chan struct{}
	drainOnce sync.Once
	abandon   context.CancelFunc
	baseCtx   context.Context
}

// channelKeep is the least a channel's purge horizon waits before it takes a
// wall clock stepped forward as right: longer than anything a channel keeps
// regardless of durability.retention (GoHighLevel's webhookIds, 2 h).
const channelKeep = 24 * time.Hour

// New builds a bot from cfg: it opens the journals, loads the module and builds
// the providers. Run starts it.
func New(ctx context.Context, cfg *config.Config, opts Options) (*Bot, error) {
	b := &Bot{
		cfg:       cfg,
		log:       opts.Logger,
		policy:    newPolicy(cfg),
		clock:     clock.Or(opts.Clock),
		mediaRefs: *cfg.Durability.Inbox.MediaRefs,
		providers: map[string]channel.Channel{},
		boot:      clock.Or(opts.Clock).Now(),
		timeouts:  defaultTimeouts,
		wake:      sweep.NewWake(),
		stopped:   make(chan struct{}),
		draining:  make(chan struct{}),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.tr = observe.NewTracer(opts.TracerProvider)
	if b.tr.On() {
		b.log = slog.New(observe.TraceHandler{Handler: b.log.Handler()})
	}
	b.baseCtx, b.abandon = context.WithCancel(context.Background())
	b.leases = &lease.Leases{Owner: b.policy.instanceID, Base: b.baseCtx, Stale: &b.metrics.StaleLeases, Log: b.log, Clock: b.clock}
	b.alerts = observe.NewAlerts(b.log, rules.AlertsChannel)
	b.guard = &guard.Guard{Log: b.log, Clock: b.clock, Observer: func() *observe.Observer { return b.obs }}
	if err := b.openBackend(ctx, opts.Backend); err != nil {
		return nil, err
	}
	b.guest = opts.Guest
	if b.guest == nil {
		if err := b.loadModule(ctx); err != nil {
			b.close()
			return nil, err
		}
	}
	if err := b.buildProviders(opts.Channels); err != nil {
		b.close()
		return nil, err
	}
	if err := b.buildLeaders(); err != nil {
		b.close()
		return nil, err
	}
	if a := cfg.Alerts; a.URL != "" {
		sink, err := alertsink.NewSink(a.URL, a.Secret, b.clock)
		if err != nil {
			b.close()
			return nil, err
		}
		b.providers[rules.AlertsChannel] = sink
		b.alerts.Out = make(chan observe.Alert, 1024)
		b.forward = &alertsink.Forwarder{Bot: Scope(cfg).ID(), Sink: sink, NewKey: send.RandomID, Wake: b.wake.Notify, Clock: b.clock, Log: b.log,
			Journal: func(ctx context.Context, key, body string) error {
				_, err := send.Enqueue(ctx, b.outbox, rules.AlertsChannel, "alerts", body, key, 0, clock.UnixMilli(b.clock))
				return err
			}}
	}
	b.obs = newObserver(b)
	ids := make([]string, 0, len(b.providers))
	for id := range b.providers {
		ids = append(ids, id)
	}
	b.dispatch = dispatch.New(cfg.Bot.Workers, cfg.Bot.MaxQueue, func(ctx context.Context, j dispatch.Job) { b.worker.Handle(ctx, j) })
	b.sweeper = sweep.New(sweep.Config{Inbox: b.inbox, Outbox: b.outbox, Queue: b.dispatch, Leases: b.leases,
		Instance: b.policy.instanceID, Boot: b.boot, Poll: b.policy.poll, Retention: b.policy.retention,
		InboxLease: b.policy.inboxLease, OutboxLease: b.policy.outboxLease, Workers: cfg.Bot.Workers,
		Wake: b.wake, Log: b.log, Clock: b.clock})
	if b.answers != nil {
		b.sweeper.PurgeToo(b.answers)
	}
	sc := send.Config{Outbox: b.outbox, Channels: b.providers, Policy: b.policy.send(), Counters: &b.metrics,
		Tracer: b.tr.Tracer(), SendTime: b.obs.SendObservers(ids), Log: b.log, Leases: b.leases,
		Alerts: alertsink.SendAlerts{A: b.alerts}, Wake: b.wake, Sweeper: b.sweeper,
		HookTimeout: time.Duration(cfg.Bot.HandlerTimeout), Boot: b.boot, Leaders: b.leaders,
		Guard: b.guard.Env, Clock: b.clock, Draining: b.draining}
	if h, ok := b.guest.(send.Hooks); ok {
		sc.Hooks = h
	}
	sc.Queued, sc.SettleInFlight = b.dispatch, b.coord != nil
	b.sender = send.New(sc)
	apis, err := buildAPIs(cfg.APIs, fetch.Options{LookupIP: opts.LookupIP})
	if err != nil {
		b.close()
		return nil, err
	}
	b.apis = apis
	turnCfg := turn.Config{Sender: b.sender, Outbox: b.outbox, State: b.state, Channels: b.providers,
		Counters: &b.metrics, APIs: apis, Answers: b.answers, FetchTime: b.obs.FetchTime, Tracer: b.tr.Tracer(),
		Caps: turn.Caps{MaxSends: cfg.Bot.MaxSends, MaxBroadcast: cfg.Bot.MaxBroadcast, MaxChatState: int64(cfg.Bot.MaxChatState),
			MaxEventBytes: int64(cfg.Bot.MaxEventBytes), HandlerTimeout: time.Duration(cfg.Bot.HandlerTimeout),
			MaxFetches: cfg.Bot.MaxFetches, MaxFetchWait: time.Duration(cfg.Bot.MaxFetchWait)},
		Wake: b.wake, Log: b.log}
	b.worker = worker.New(worker.Config{Inbox: b.inbox, Coord: b.coord, Leases: b.leases, Sender: b.sender, Turn: turnCfg,
		Guest: b.guest, Channels: b.providers, Tracer: b.tr, Observer: b.obs, Counters: &b.metrics, Alerts: b.alerts,
		Policy: worker.Policy{Instance: b.policy.instanceID, Lease: b.policy.inboxLease, Poll: b.policy.poll,
			MaxAttempts: b.policy.maxAttempts, Backoff: b.policy.inboxBackoff},
		Wake: b.wake, Stopping: b.isStopping, Base: b.baseCtx, Boot: b.boot, Clock: b.clock, Log: b.log})
	b.op = newOperator(b)
	return b, nil
}

func (b *Bot) openBackend(ctx context.Context, injected durability.Backend) error {
	b.backend = injected
	if b.backend == nil {
		backend, err := OpenBackend(ctx, b.cfg)
		if err != nil {
			return err
		}
		b.backend, b.ownBackend = backend, true
	}
	scope := Scope(b.cfg)
	open := b.backend.Open
	coordinated := b.cfg.Durability.Coordination
	if coordinated {
		c, ok := b.backend.(durability.Coordinator)
		if !ok {
			return fmt.Errorf("durability.coordination: the %s backend cannot coordinate replicas (postgres and redis can)", b.cfg.Durability.Backend)
		}
		open = c.OpenCoordinated
	}
	j, err := open(ctx, scope)
	if err != nil {
		return fmt.Errorf("durability: open %s backend: %w", b.cfg.Durability.Backend, err)
	}
	b.inbox, b.outbox, b.state = j.Inbox, j.Outbox, j.State
	if kvb, ok := b.backend.(interface{ Kv() durability.Kv }); ok && kvb.Kv() != nil {
		b.kv = kvb.Kv()
		b.answers = answers.New(b.kv, scope.ID()+"/", b.inbox)
	}
	if coordinated {
		order, ok := j.Inbox.(durability.ChatOrder)
		if !ok || b.kv == nil {
			return fmt.Errorf("durability.coordination: the %s backend opened journals without a chat order or a Kv", b.cfg.Durability.Backend)
		}
		b.coord = &worker.Coordination{Order: order, Turns: lease.NewChatTurns(b.kv, scope.ID(), b.policy.instanceID, b.boot, b.policy.inboxLease, b.clock)}
	}
	return nil
}

// Scope is the journal scope of the bot cfg describes.
func Scope(cfg *config.Config) durability.Scope {
	return durability.Scope{Tenant: cfg.Bot.Tenant, Environment: cfg.Bot.Environment, Bot: cfg.Bot.ID, Connection: cfg.Bot.Connection}
}

// OpenBackend opens the durability backend cfg names, through its
// registered driver (connecting within 30 s).
func OpenBackend(ctx context.Context, cfg *config.Config) (durability.Backend, error) {
	d := cfg.Durability
	if d.Options == nil {
		return nil, fmt.Errorf("%s: durability.backend %q has no backend options: load the config with config.Load or config.Parse, which decode them for a backend registered in this program (%v)", cfg.File, d.Backend, durability.Drivers())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	backend, err := d.Options.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("durability: open %s backend: %w", d.Backend, err)
	}
	return backend, nil
}

func (b *Bot) loadModule(ctx context.Context) error {
	secret, err := b.randomSecret(ctx)
	if err != nil {
		return err
	}
	c := reload.Config{Path: b.cfg.Bot.Module, Hot: b.cfg.Bot.HotReload, History: b.modules.Add, Clock: b.clock, Log: b.log,
		Refused: func(err error) {
			b.alerts.Emit(observe.Alert{Name: observe.AlertModuleRefused, ID: b.cfg.Bot.Module, Error: err.Error()})
		},
		Engine: wasm.Config{
			RandomSecret:   secret,
			Workers:        b.cfg.Bot.Instances,
			MaxIdle:        b.cfg.Bot.Workers,
			HandlerTimeout: b.cfg.Bot.HandlerTimeout.D(),
			MaxMemory:      int64(b.cfg.Bot.MaxMemory),
			CacheDir:       filepath.Join(b.cfg.Bot.DataDir, "wasm-cache"),
			Logger:         b.log,
		}}
	b.engine, b.guest, b.reload, err = reload.Load(ctx, c)
	return err
}

func (b *Bot) buildProviders(injected []channel.Channel) error {
	for _, p := range injected {
		b.providers[p.ID()] = p
		b.ordered = append(b.ordered, p)
	}
	if injected != nil {
		return nil
	}
	for _, pc := range b.cfg.Channels {
		if pc.Settings == nil {
			return fmt.Errorf("%s: provider %q has no settings (load the config with config.Load or config.Parse, which decode them for its type %q)", b.cfg.File, pc.ID, pc.Type)
		}
		id := pc.ID
		counted := b.guard.Env(id)
		p, err := pc.Settings.Open(channel.Env{ID: id, Admitter: b, Logger: b.log, Now: b.clock.Now, Horizon: clock.NewHorizon(b.clock, max(b.policy.retention, channelKeep)).Now,
			Kv: b.kv, KeyPrefix: Scope(b.cfg).ID() + "/", Retention: b.policy.retention,
			Alert:    func(name, detail string) { b.alerts.Emit(observe.Alert{Provider: id, Name: name, Error: detail}) },
			Draining: b.draining,
			Panicked: counted.Panicked, Skipped: counted.Skipped})
		if err != nil {
			return fmt.Errorf("%s: provider %q (%s): %w", b.cfg.File, pc.ID, pc.Type, err)
		}
		b.providers[pc.ID] = p
		b.ordered = append(b.ordered, p)
	}
	return nil
}

// Handler returns the bot's HTTP surface: provider routes (a webchat's page
// at /), mounted routes and /healthz.
func (b *Bot) Handler() http.Handler {
	mux := http.NewServeMux()
	var owners []guard.Route
	for _, p := range b.ordered {
		if r, ok := p.(channel.Router); ok {
			r.Routes(mux)
			own := http.NewServeMux()
			r.Routes(own)
			owners = append(owners, guard.Route{ID: p.ID(), Mux: own})
		}
	}
	for _, m := range b.mounts {
		m(mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	// /readyz is a readiness probe: 503 once the bot begins to stop, so a
	// load balancer sends no new traffic to a replica that drains.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-b.draining:
			http.Error(w, "stopping", http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ready\n"))
		}
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "botrun: no chat page here: add [[providers]] id = \"web\", type = \"webchat\" to serve one", http.StatusNotFound)
	})
	return b.guard.Recovering(mux, owners)
}

// Mount adds routes to the bot's HTTP surface; call it before Run.
func (b *Bot) Mount(routes func(*http.ServeMux)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mounts = append(b.mounts, routes)
}

// Start starts the sweeper without serving HTTP (Run does both).
func (b *Bot) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started && !b.stopping {
		b.started = true
		go b.sweeper.Run(b.baseCtx)
		if b.forward != nil {
			b.runners.Go(func() { b.forward.Run(b.baseCtx, b.alerts.Out) })
		}
		for _, p := range b.ordered {
			if r, ok := p.(channel.Runner); ok {
				b.runners.Go(func() { b.guard.KeepRunning(b.baseCtx, p.ID(), "running", r.Run) })
			}
		}
		b.startSessions()
		if b.reload != nil {
			if err := b.reload.Watch(b.baseCtx); err != nil {
				b.log.Error("hot reload is off", "err", err)
			}
		}
	}
}

// Run starts the sweeper and serves HTTP on ln (and on the listeners added
// with AddListener) until ctx ends, then shuts down gracefully: it stops
// admitting, lets handlers in flight finish within grace, and closes the
// module and the backend. It refuses to serve a webchat without allow_public
// on a listener that is not loopback.
func (b *Bot) Run(ctx context.Context, ln net.Listener, grace time.Duration) error {
	if err := b.checkExposure(ln.Addr()); err != nil {
		b.mu.Lock()
		for _, l := range b.servedAlso {
			l.ln.Close()
		}
		b.mu.Unlock()
		b.Stop(ctx)
		return err
	}
	b.Start()
	b.mu.Lock()
	all := append([]served{{ln, b.Handler()}}, b.servedAlso...)
	b.mu.Unlock()
	servers := make([]*http.Server, len(all))
	errc := make(chan error, len(all))
	for i, l := range all {
		servers[i] = b.timeouts.server(l.handler)
		go func() { errc <- servers[i].Serve(l.ln) }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	b.log.Info("stopping: finishing events in flight", "grace", grace)
	b.drainOnce.Do(func() { close(b.draining) })
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var httpErr error
	for _, srv := range servers {
		httpErr = errors.Join(httpErr, srv.Shutdown(sctx))
	}
	stopErr := b.Stop(sctx)
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, httpErr, stopErr)
}

// Stop stops admitting and sweeping, waits for handlers in flight until ctx
// ends, and closes what the bot owns. Queued events that did not start stay
// journaled (pending) for the next start.
func (b *Bot) Stop(ctx context.Context) error {
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		<-b.stopped
		return nil
	}
	b.stopping = true
	started := b.started
	b.mu.Unlock()
	b.drainOnce.Do(func() { close(b.draining) })
	defer close(b.stopped)
	b.sweeper.Stop()
	b.wake.Notify()
	dropped, err := b.dispatch.Stop(ctx)
	if started {
		<-b.sweeper.Done()
	}
	if len(dropped) > 0 {
		b.log.Info("queued events left journaled for the next start", "count", len(dropped))
	}
	b.worker.ParkDropped(ctx, dropped)
	if err != nil {
		b.log.Warn("handlers still running at the end of the grace period; their records will be reclaimed")
	}
	b.abandon()
	// The channels' own work (polling, purging) ends with baseCtx; it may
	// use the backend, so the backend closes after it.
	if !waitGroup(ctx, &b.runners) {
		b.log.Warn("a channel's background work did not stop within the grace period")
	}
	b.close()
	m := b.obs.Metrics()
	b.log.Info("durability metrics", "inbound_journaled", m.InboundJournaled, "inbound_duplicates", m.InboundDuplicates, "inbound_refused", m.InboundRefused,
		"inbound_replayed", m.InboundReplayed, "inbound_dead", m.InboundDead, "outbox_journaled", m.OutboxJournaled,
		"outbox_deduped", m.OutboxDeduped, "outbox_retried", m.OutboxRetried, "outbox_deferred", m.OutboxDeferred,
		"outbox_dead", m.OutboxDead, "outbox_ambiguous", m.OutboxAmbiguous, "outbox_bypassed", m.OutboxBypassed,
		"stale_leases", m.StaleLeases, "outbox_diverged", m.OutboxDiverged, "outbox_ambiguous_resolved", m.OutboxAmbiguousResolved,
		"provider_not_leader", m.ProviderNotLeader)
	return nil
}

// Kill stops the bot without waiting for anything, as a SIGKILL would: its
// goroutines are abandoned, to fail against a backend that crashed
// (durability/crashpoint). For crash tests: the host's own and botrun
// test --crash. A bot started again on the same store recovers its work.
func (b *Bot) Kill() {
	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	b.sweeper.Stop()
	b.abandon()
	b.dispatch.Stop(canceled())
}

// waitGroup waits for wg until ctx ends; it reports whether wg finished.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func (b *Bot) close() {
	if b.obs != nil {
		b.obs.Close()
	}
	if b.engine != nil {
		b.engine.Close(context.Background())
	}
	for _, a := range b.apis {
		a.Caller.Close()
	}
	if b.ownBackend {
		b.backend.Close()
	}
}

func (b *Bot) isStopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopping
}

// Send sends text to chat on a provider outside any handler (rule 3: without
// a key, a random one). It retries inline like a handler's send.
func (b *Bot) Send(ctx context.Context, providerID, chat, text, key string) (abi.SendResult, error) {
	if key == "" {
		key = "rnd:" + send.RandomID()
	}
	if err := errors.Join(abi.CheckName("chat", chat), abi.CheckName("idempotency key", key)); err != nil {
		return abi.SendResult{}, fmt.Errorf("send: %w", err)
	}
	res, _, err := b.sender.SendNow(ctx, send.Spec{Provider: providerID, Chat: chat, Msg: rules.OutboxMessage{Text: text}, Key: key}, false)
	return res, err
}
