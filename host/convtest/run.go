package convtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/crashpoint"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/channel"
	_ "github.com/botrun/botrun/host/channel/webchat" // the type of the entry the test channel stands in for
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/reload"
	"github.com/botrun/botrun/host/internal/turn"
	"github.com/botrun/botrun/host/wasm"
)

// Options configure a Runner.
type Options struct {
	// Module is the bot's .wasm file.
	Module string
	// CacheDir keeps the module's compiled code between runs ("": none).
	CacheDir string
	// Crash also runs each conversation with a crash at every journal
	// write (before it, and after it), restarting the bot on the same
	// journal each time: the replies must be those of the run without a
	// crash.
	Crash bool
	// Settle bounds the wait for the bot to finish one step (default one
	// minute: the bot's work is on a loaded machine's clock).
	Settle time.Duration
	// Log receives the bot's logs (nil: its warnings and errors go to
	// each file's Result.Log).
	Log *slog.Logger
}

// Start is the test clock's time at the start of every conversation:
// 2026-01-05 09:00:00 UTC, a Monday.
var Start = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Runner runs conversation tests against one module, compiled once.
type Runner struct {
	opts   Options
	engine *wasm.Engine
	// module is the module's bytes: each run loads it afresh (its own
	// instances, as after a restart), from the engine's compile cache.
	module []byte
	log    *slog.Logger
	logs   *logBuffer   // the bot's warnings and errors in the file's run
	mute   *atomic.Bool // set during the crash runs
	apis   *stubServer
}

// New compiles the module.
func New(ctx context.Context, opts Options) (*Runner, error) {
	if opts.Settle <= 0 {
		opts.Settle = time.Minute
	}
	logs := new(logBuffer)
	var h slog.Handler = slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})
	if opts.Log != nil {
		h = opts.Log.Handler()
	}
	mute := new(atomic.Bool)
	log := slog.New(muted{Handler: h, mute: mute})
	if _, err := os.Stat(opts.Module); err != nil {
		return nil, fmt.Errorf("the module: %w (build the bot first, e.g. make build)", err)
	}
	engine, _, _, err := reload.Load(ctx, reload.Config{Path: opts.Module, Log: log, Clock: clock.Real,
		Engine: wasm.Config{
			// A fixed secret: a conversation reads the same random bytes on
			// every run.
			RandomSecret:   []byte("botrun test: the same random bytes on every run"),
			Workers:        2,
			MaxIdle:        2,
			HandlerTimeout: 10 * time.Second,
			MaxMemory:      64 << 20,
			CacheDir:       opts.CacheDir,
			Logger:         log,
		}})
	if err != nil {
		return nil, err
	}
	apis, err := newStubServer()
	if err != nil {
		engine.Close(ctx)
		return nil, err
	}
	module, err := os.ReadFile(opts.Module)
	if err != nil {
		engine.Close(ctx)
		apis.close()
		return nil, err
	}
	return &Runner{opts: opts, engine: engine, module: module, log: log, logs: logs, mute: mute, apis: apis}, nil
}

// Close releases the module and the stub server.
func (r *Runner) Close() error {
	r.apis.close()
	return r.engine.Close(context.Background())
}

// Failure is one way a conversation test failed.
type Failure struct {
	// Line is the step's line in File.
	File string `json:"file"`
	Line int    `json:"line"`
	// Message says what went wrong; Diff shows the expected and actual
	// replies ("-" expected, "+" actual).
	Message string `json:"message"`
	Diff    string `json:"diff,omitempty"`
}

func (f Failure) Error() string {
	s := fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Message)
	if f.Diff != "" {
		s += "\n" + f.Diff
	}
	return s
}

// Result is the outcome of one file.
type Result struct {
	File     string    `json:"file"`
	Passed   bool      `json:"passed"`
	Steps    int       `json:"steps"`
	Failures []Failure `json:"failures,omitempty"`
	// CrashRuns is how many runs with a crash it took (with Crash).
	CrashRuns int `json:"crash_runs,omitempty"`
	// Updated is set when Update rewrote the file's expected replies.
	Updated bool          `json:"updated,omitempty"`
	Took    time.Duration `json:"took_ns"`
	// Log holds the warnings and errors the bot and its module logged in
	// the run without a crash.
	Log string `json:"log,omitempty"`
}

// Run runs the conversation of s; with update, it rewrites s's file with
// the replies the bot made instead of checking them (the crash runs, if
// any, are then checked against those).
func (r *Runner) Run(ctx context.Context, s *Script, update bool) (res Result) {
	start := time.Now()
	res = Result{File: s.Path, Steps: len(s.Steps)}
	r.logs.take()
	defer func() { res.Passed = len(res.Failures) == 0; res.Took = time.Since(start); res.Log = r.logs.take() }()
	clean, writes, fail := r.play(ctx, s, nil)
	if fail != nil {
		res.Failures = append(res.Failures, *fail)
		return res
	}
	if update {
		if err := s.rewrite(clean); err != nil {
			res.Failures = append(res.Failures, Failure{File: s.Path, Line: 1, Message: err.Error()})
			return res
		}
		res.Updated = true
	} else {
		for i, st := range s.Steps {
			if f := compare(s.Path, st, st.Want, clean[i].replies, "after this step the bot"); f != nil {
				res.Failures = append(res.Failures, *f)
				return res // the later steps depend on this one
			}
			for _, w := range st.States {
				if got := clean[i].states[w.Line]; got.render() != w.render() {
					res.Failures = append(res.Failures, Failure{File: s.Path, Line: w.Line,
						Message: fmt.Sprintf("state %q: want %s, the bot left %s", w.Key, w.render(), got.render())})
					return res
				}
			}
		}
	}
	if !r.opts.Crash {
		return res
	}
	for n := 1; n <= len(writes); n++ {
		for _, after := range []bool{false, true} {
			plan := &crashPlan{n: n, after: after, op: writes[n-1]}
			got, _, fail := r.play(ctx, s, plan)
			res.CrashRuns++
			if fail != nil {
				fail.Message = plan.String() + ": " + fail.Message
				res.Failures = append(res.Failures, *fail)
				return res
			}
			for i, st := range s.Steps {
				f := compare(s.Path, st, clean[i].replies, got[i].replies, "after this step the bot")
				if f == nil {
					for _, w := range st.States {
						if c, g := clean[i].states[w.Line].render(), got[i].states[w.Line].render(); c != g {
							f = &Failure{File: s.Path, Line: w.Line, Message: fmt.Sprintf("state %q: %s without a crash, %s with it", w.Key, c, g)}
						}
					}
				}
				if f != nil {
					f.Message = plan.String() + ", replayed: " + f.Message + " (lost, doubled or different: is the handler deterministic? see docs/testing.md)"
					res.Failures = append(res.Failures, *f)
					return res
				}
			}
		}
	}
	return res
}

// crashPlan is where a run crashes: at its n-th journal write, before or
// after it.
type crashPlan struct {
	n     int
	after bool
	op    string
}

func (p *crashPlan) String() string {
	when := "before"
	if p.after {
		when = "after"
	}
	return fmt.Sprintf("with a crash %s journal write %d (%s)", when, p.n, p.op)
}

// stepRun is what one step of a run did: its replies and the state values
// its ":state" lines read (by line).
type stepRun struct {
	replies []Reply
	states  map[int]StateWant
}

// play runs the conversation once, with the crash plan (nil: none). It
// returns each step's replies and the journal writes the run made.
func (r *Runner) play(ctx context.Context, s *Script, plan *crashPlan) ([]stepRun, []string, *Failure) {
	store := memory.New()
	defer store.Close()
	crash := crashpoint.New(store)
	if plan != nil {
		crash.CrashAtWrite(plan.n, plan.after)
	}
	mod, err := r.engine.LoadBytes(ctx, filepath.Base(r.opts.Module), r.module)
	if err != nil {
		return nil, nil, &Failure{File: s.Path, Line: 1, Message: err.Error()}
	}
	defer mod.Close(context.Background())
	p := &player{r: r, s: s, clock: clock.NewFake(Start), ch: newTestChannel(filepath.Dir(s.Path)), guest: reload.Module{Module: mod}}
	r.mute.Store(plan != nil) // a crashed bot's complaints are the plan's doing
	defer r.mute.Store(false)
	bot, err := p.start(crash)
	if err != nil {
		return nil, nil, &Failure{File: s.Path, Line: 1, Message: err.Error()}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.bot.Stop(sctx)
	}()
	p.bot = bot
	crashed := crash.Crashed // until the restart: then nothing crashes
	logAt := 0               // what the bot logged before this step
	out := make([]stepRun, len(s.Steps))
	seen := 0
	for i := range s.Steps {
		st := &s.Steps[i]
		r.apis.set(st.Stubs, s.Path, st.Line)
		msg, fail := p.input(i, st)
		if fail != nil {
			return nil, nil, fail
		}
		for {
			if msg != nil {
				if _, err := p.bot.Admit(ctx, channelID, *msg); err != nil && !crashed() {
					return nil, nil, &Failure{File: s.Path, Line: st.Line, Message: "the bot refused the message: " + err.Error()}
				}
			}
			settled, err := p.settle(ctx, crashed)
			if err != nil {
				return nil, nil, &Failure{File: s.Path, Line: st.Line, Message: err.Error()}
			}
			if settled {
				break
			}
			// The bot crashed: a new process takes the journal over and
			// the channel delivers the step's message again.
			p.bot.Kill()
			p.clock.Advance(time.Millisecond) // its boot comes after the dead one's leases
			if p.bot, err = p.start(store); err != nil {
				return nil, nil, &Failure{File: s.Path, Line: st.Line, Message: err.Error()}
			}
			crashed = func() bool { return false }
		}
		if f := r.apis.failure(); f != nil {
			return nil, nil, f
		}
		var logged string
		logged, logAt = r.logs.since(logAt)
		if m := unnamedAPI.FindStringSubmatch(logged); m != nil && plan == nil {
			return nil, nil, &Failure{File: s.Path, Line: st.Line, Message: fmt.Sprintf("the bot called API %s, which no \":api\" line before this step names (add \":api %s METHOD PATH STATUS BODY\")", m[1], m[1])}
		}
		out[i].replies, seen = p.ch.replies(seen)
		out[i].states = map[int]StateWant{}
		for _, w := range st.States {
			v, err := p.state(ctx, w)
			if err != nil {
				return nil, nil, &Failure{File: s.Path, Line: w.Line, Message: err.Error()}
			}
			out[i].states[w.Line] = v
		}
	}
	return out, crash.Writes(), nil
}

// player is one run of a conversation.
type player struct {
	r     *Runner
	s     *Script
	clock *clock.Fake
	ch    *testChannel
	bot   *host.Bot
	// guest is this run's module: no instance of another run's.
	guest reload.Module
}

// start starts a bot on backend.
func (p *player) start(backend durability.Backend) (*host.Bot, error) {
	cfg, err := p.config()
	if err != nil {
		return nil, err
	}
	b, err := host.New(context.Background(), cfg, host.Options{Logger: p.r.log, Backend: backend, Guest: p.guest,
		Channels: []channel.Channel{p.ch}, Clock: p.clock})
	if err != nil {
		return nil, err
	}
	b.Start()
	return b, nil
}

// config is the bot.toml of a test bot: one worker (the replies come in
// one order), a fast poll, the stubbed APIs.
func (p *player) config() (*config.Config, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "[bot]\nmodule = %q\nworkers = 1\ninstances = 1\n", p.r.opts.Module)
	// The [[channels]] entry the test channel stands in for.
	b.WriteString("[durability]\ninstance_id = \"test\"\npoll = \"5ms\"\n[[channels]]\nid = \"test\"\ntype = \"webchat\"\n")
	for _, name := range p.s.apiNames() {
		fmt.Fprintf(&b, "[[apis]]\nname = %q\nurl = %q\nallow_private = true\nretries = 0\n", name, p.r.apis.url+"/"+name)
	}
	cfg, err := config.Parse(filepath.Join(filepath.Dir(p.s.Path), "botrun-test.toml"), b.String(), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("the test bot's config: %w", err)
	}
	return cfg, nil
}

// input is step i's message (nil for :advance, which moves the clock).
func (p *player) input(i int, st *Step) (*channel.Message, *Failure) {
	switch st.Kind {
	case Advance:
		p.clock.Advance(st.By)
		return nil, nil
	case Press:
		in, err := p.ch.press(st.Chat, st.Text)
		if err != nil {
			return nil, &Failure{File: p.s.Path, Line: st.Line, Message: err.Error()}
		}
		return &channel.Message{ID: fmt.Sprintf("m%d", i+1), Chat: st.Chat, From: st.From, Text: st.Text, ReceivedAt: p.clock.Now(), Interaction: in}, nil
	}
	msg := &channel.Message{ID: fmt.Sprintf("m%d", i+1), Chat: st.Chat, From: st.From, Text: st.Text, ReceivedAt: p.clock.Now()}
	if st.MediaType != "" {
		msg.Media = []channel.Media{{Type: st.MediaType, Ref: st.MediaRef}}
	}
	return msg, nil
}

// settle waits until the bot finished what it was given: every inbound
// record done or dead, every send sent, dead or held until later. It
// reports false when the bot crashed first.
func (p *player) settle(ctx context.Context, crashed func() bool) (bool, error) {
	deadline := time.Now().Add(p.r.opts.Settle)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		if crashed() {
			return false, nil
		}
		if done, err := p.settled(ctx); err == nil && done {
			return !crashed(), nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("the bot did not finish this step within %s (a handler that never returns? a send that keeps failing?)", p.r.opts.Settle)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (p *player) settled(ctx context.Context) (bool, error) {
	op := p.bot.Operator()
	in, err := op.ListInbox(ctx, durability.ListFilter{})
	if err != nil {
		return false, err
	}
	now := p.clock.Now().UnixMilli()
	for _, rec := range in {
		// A message whose handler failed waits for its retry on the
		// test's clock (an :advance runs it): the step is over.
		if !rec.State.Terminal() && !(rec.State == durability.InboxFailed && rec.RetryAt > now) {
			return false, nil
		}
	}
	out, err := op.ListOutbox(ctx, durability.ListFilter{})
	if err != nil {
		return false, err
	}
	for _, rec := range out {
		if !rec.State.Terminal() && rec.RetryAt <= now {
			return false, nil
		}
	}
	return true, nil
}

// state reads the value a ":state" line checks: w with the value the bot
// left.
func (p *player) state(ctx context.Context, w StateWant) (StateWant, error) {
	j, _, _ := p.bot.DryRunSource()
	owner, rest := turn.StateScope(channelID, w.Chat, w.From, w.Key)
	v, ok, err := j.State.Get(ctx, owner+rest)
	if err != nil {
		return w, fmt.Errorf("reading state %q: %w", w.Key, err)
	}
	w.Value, w.Absent = string(v), !ok
	return w, nil
}

func (w StateWant) render() string {
	if w.Absent {
		return "nothing"
	}
	return fmt.Sprintf("%q", w.Value)
}

// apiNames are the APIs the script stubs.
func (s *Script) apiNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, st := range s.Steps {
		for _, stub := range st.Stubs {
			if !seen[stub.API] {
				seen[stub.API] = true
				names = append(names, stub.API)
			}
		}
	}
	return names
}

// stubServer answers the bot's API calls from the current step's stubs, on
// loopback.
type stubServer struct {
	srv *http.Server
	url string

	mu    sync.Mutex
	stubs []Stub
	file  string
	line  int
	fail  *Failure
}

func newStubServer() (*stubServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("the API stubs' listener: %w", err)
	}
	s := &stubServer{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *stubServer) close() { s.srv.Close() }

// set makes stubs answer from now on, for the step at file:line.
func (s *stubServer) set(stubs []Stub, file string, line int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stubs, s.file, s.line, s.fail = stubs, file, line, nil
}

// failure is the call no stub answered in this step, if any.
func (s *stubServer) failure() *Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail
}

func (s *stubServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	api, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	path = "/" + path
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.stubs {
		if st.API == api && st.Method == r.Method && st.Path == path {
			w.WriteHeader(st.Status)
			w.Write([]byte(st.Body))
			return
		}
	}
	if s.fail == nil {
		s.fail = &Failure{File: s.file, Line: s.line, Message: fmt.Sprintf("the bot called API %s: %s %s, which no \":api\" line before this step answers (add \":api %s %s %s 200 BODY\")", api, r.Method, path, api, r.Method, path)}
	}
	http.Error(w, "botrun test: no :api line answers this call", http.StatusNotImplemented)
}

// muted is a log handler that drops every record while mute is set: the
// crash runs' bots and guest fail on purpose, and say so.
type muted struct {
	slog.Handler
	mute *atomic.Bool
}

func (m muted) Enabled(ctx context.Context, l slog.Level) bool {
	return !m.mute.Load() && m.Handler.Enabled(ctx, l)
}

func (m muted) WithAttrs(a []slog.Attr) slog.Handler {
	return muted{Handler: m.Handler.WithAttrs(a), mute: m.mute}
}

func (m muted) WithGroup(name string) slog.Handler {
	return muted{Handler: m.Handler.WithGroup(name), mute: m.mute}
}

// logBuffer keeps what the bot logs until a file's run takes it.
type logBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b) < 1<<20 { // a bot that logs without end does not fill the memory
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

// unnamedAPI finds, in the bot's log, a call to an API the test's config
// does not name (no :api line names it).
var unnamedAPI = regexp.MustCompile(`msg="guest called an API the config does not name".* api=("[^"]*"|\S+)`)

// since returns what was logged after the first at bytes (since the last
// take), and where that ends.
func (l *logBuffer) since(at int) (string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at = min(at, len(l.b))
	return string(l.b[at:]), len(l.b)
}

// take returns what was logged since the last take.
func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := string(l.b)
	l.b = nil
	return s
}
