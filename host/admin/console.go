package admin

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/observe"
)

// The console: plain HTML, CSS and JavaScript, committed and built into the
// binary. It holds no data: every figure it shows comes from the token-protected
// API below.
//
//go:embed console
var consoleFiles embed.FS

// tailSize is how many recent alerts the live tail keeps for a client that
// connects or reconnects.
const tailSize = 100

// streamFor is how long one live-tail response lasts before the browser
// reconnects (with Last-Event-ID, so it misses nothing the tail still
// keeps): well within the server's write timeout.
const streamFor = 25 * time.Second

func consoleRoutes(mux *http.ServeMux, a *api) {
	files, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	static := http.StripPrefix("/admin/console/", http.FileServerFS(files))
	mux.HandleFunc("GET /admin/{$}", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /admin/console/", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		static.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /admin/overview", a.auth(a.overview))
	mux.HandleFunc("GET /admin/events", a.events)
	mux.HandleFunc("POST /admin/events/ticket", a.auth(a.ticket))
	mux.HandleFunc("POST /admin/outbox/retry-dead", a.auth(a.retryDead))
}

// consoleHeaders keep the console's page to its own files and API.
func consoleHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// Overview is the body of GET /admin/overview: what the console's first
// page shows.
type Overview struct {
	// At is when it was read (Unix ms).
	At int64 `json:"at"`
	// Module is the sha256 digest of the module running now.
	Module string `json:"module"`
	// Counters are the bot's counters since it started (observe.Metrics).
	Counters observe.Metrics `json:"counters"`
	// Inbox and Outbox are the queue depths (Bot.QueueDepths), in order,
	// each up to DepthCap (a count equal to DepthCap means at least that
	// many).
	Inbox    []Depth `json:"inbox"`
	Outbox   []Depth `json:"outbox"`
	DepthCap int     `json:"depth_cap"`
	// LastHour is the activity of each minute of the last hour, oldest
	// first: inbound journaled, turns ended, turn p50/p99.
	LastHour []observe.Minute `json:"last_hour"`
	// Modules is the module's history: its load and each hot reload that
	// went live or was refused, oldest first.
	Modules []observe.ModuleChange `json:"modules"`
}

// overview answers GET /admin/overview.
func (a *api) overview(w http.ResponseWriter, r *http.Request) {
	o := Overview{At: time.Now().UnixMilli(), Module: a.obs.ModuleDigest(), Counters: a.obs.Metrics(),
		DepthCap: observe.DepthCap,
		LastHour: a.obs.LastHour(), Modules: a.obs.ModuleHistory()}
	inbox, outbox, err := a.obs.QueueDepths(r.Context())
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	for _, q := range observe.InboxQueues {
		o.Inbox = append(o.Inbox, Depth{q, inbox[q]})
	}
	for _, q := range observe.OutboxQueues {
		o.Outbox = append(o.Outbox, Depth{q, outbox[q]})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(o)
}

// Depth is one queue's depth in the overview.
type Depth struct {
	// Queue is the queue's state: observe.InboxQueues or observe.OutboxQueues.
	Queue string `json:"queue"`
	// Records counts its records, up to the overview's DepthCap.
	Records int `json:"records"`
}

// RetryDeadResult is the body of POST /admin/outbox/retry-dead?chat=C's answer.
type RetryDeadResult struct {
	// Retried are the keys of the dead sends put back to be sent.
	Retried []string `json:"retried"`
	// Failed maps the keys that could not be retried to why.
	Failed map[string]string `json:"failed,omitempty"`
}

// retryDead retries every dead send of one chat (at most 10,000).
func (a *api) retryDead(w http.ResponseWriter, r *http.Request) {
	chat := r.URL.Query().Get("chat")
	if chat == "" {
		http.Error(w, "botrun admin: chat is required (POST /admin/outbox/retry-dead?chat=<chat id>)", http.StatusBadRequest)
		return
	}
	dead, err := a.operator.ListOutbox(r.Context(), durability.ListFilter{State: string(durability.OutboxDead), Chat: chat, Limit: 10000})
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	res := RetryDeadResult{Retried: []string{}}
	for _, rec := range dead {
		if err := a.operator.RetrySend(r.Context(), rec.Key); err != nil {
			if res.Failed == nil {
				res.Failed = map[string]string{}
			}
			res.Failed[rec.Key] = err.Error()
			continue
		}
		res.Retried = append(res.Retried, rec.Key)
	}
	var err2 error
	if len(res.Failed) > 0 {
		err2 = fmt.Errorf("%d of %d dead sends not retried", len(res.Failed), len(dead))
	}
	a.logAction(r, "retry-dead", err2, "chat", chat, "retried", len(res.Retried))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// logAction writes an operator's action to the bot's log with the address
// it came from.
func (a *api) logAction(r *http.Request, action string, err error, args ...any) {
	args = append([]any{"action", action, "remote", r.RemoteAddr}, args...)
	if err != nil {
		a.bot.Logger().Warn("admin: operator action failed", append(args, "err", err)...)
		return
	}
	a.bot.Logger().Info("admin: operator action", args...)
}

// TailEvent is one alert of the live tail, numbered in the order the bot
// raised them (the SSE event id).
type TailEvent struct {
	Seq int64 `json:"seq"`
	At  int64 `json:"at"`
	observe.Alert
}

// tail keeps the recent alerts and wakes the live-tail streams. publish runs
// on the bot's goroutines and never waits.
type tail struct {
	// boot names this process's numbering in the SSE event ids
	// ("<boot>.<seq>"): a browser reconnecting to a restarted bot, whose
	// numbers start again at 1, gets every kept alert instead of the ones
	// past its old number.
	boot string

	mu     sync.Mutex
	seq    int64
	recent []TailEvent
	subs   map[chan struct{}]struct{}
}

func newTail() *tail {
	return &tail{boot: strconv.FormatInt(time.Now().UnixNano(), 36), subs: map[chan struct{}]struct{}{}}
}

// lastSeen is the number of the last alert a reconnecting browser saw
// (its Last-Event-ID), 0 when it saw none of this process's.
func (t *tail) lastSeen(id string) int64 {
	boot, seq, ok := strings.Cut(id, ".")
	if !ok || boot != t.boot {
		return 0
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func (t *tail) publish(al observe.Alert) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	t.recent = append(t.recent, TailEvent{Seq: t.seq, At: time.Now().UnixMilli(), Alert: al})
	if len(t.recent) > tailSize {
		t.recent = t.recent[len(t.recent)-tailSize:]
	}
	for ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (t *tail) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.subs, ch)
		t.mu.Unlock()
	}
}

// since returns the kept alerts numbered after seq.
func (t *tail) since(seq int64) []TailEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []TailEvent
	for _, ev := range t.recent {
		if ev.Seq > seq {
			out = append(out, ev)
		}
	}
	return out
}

// events answers GET /admin/events: the live tail as server-sent events
// ("alert", data a TailEvent, id "<boot>.<seq>"), starting with the kept
// alerts after the Last-Event-ID header or ?last= (all of them on a first
// connection or after a restart). It takes the token in the Authorization
// header or a ticket of POST /admin/events/ticket in ?ticket= (one stream
// per ticket); ?token= is refused, as proxies log URLs.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case q.Has("token"):
		a.bot.Logger().Warn("admin: refused the admin token in the live tail's URL (proxies may have logged it: consider rotating [admin] token)", "remote", r.RemoteAddr, "path", r.URL.Path)
		refuse(w, "botrun admin: the token is not taken in a URL (proxies log URLs): POST /admin/events/ticket with the token in the Authorization header, then GET /admin/events?ticket=<ticket>")
		return
	case q.Has("ticket"):
		if !a.tickets.redeem(q.Get("ticket"), time.Now()) {
			if a.throttled(w, r) {
				return
			}
			a.failedLogin(r, q.Get("ticket"), "an unknown, used or expired live-tail ticket")
			refuse(w, "botrun admin: unknown, used or expired ticket: POST /admin/events/ticket for a new one")
			return
		}
	case !a.authorized(w, r):
		return
	}
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = q.Get("last")
	}
	last := a.tail.lastSeen(lastID)
	wake, unsubscribe := a.tail.subscribe()
	defer unsubscribe()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	fmt.Fprint(w, "retry: 1000\n\n")
	end := time.NewTimer(streamFor)
	defer end.Stop()
	for {
		for _, ev := range a.tail.since(last) {
			data, _ := json.Marshal(ev)
			fmt.Fprintf(w, "id: %s.%d\nevent: alert\ndata: %s\n\n", a.tail.boot, ev.Seq, data)
			last = ev.Seq
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-wake:
		case <-end.C:
			return
		case <-r.Context().Done():
			return
		case <-a.bot.Draining():
			return
		}
	}
}

// ticket answers POST /admin/events/ticket: a Ticket that opens one live-tail
// stream within a minute.
func (a *api) ticket(w http.ResponseWriter, r *http.Request) {
	t, err := a.tickets.issue(time.Now())
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(Ticket{Ticket: t, ExpiresIn: int(ticketTTL / time.Second)})
}
