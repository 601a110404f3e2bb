// Package admin is the operator's HTTP surface of a running bot, under /admin/
// on [http] listen, or on its own [admin] listen: the console (a page at
// /admin/), Prometheus metrics (public
// with [admin] metrics_public), the inbox and outbox with their dead-letter
// queues, replay, retry and discard, dry runs of a candidate module against
// the journal, a live tail of alerts, the replicas' status, and Go's
// profiles. Every request but the console's static files
// needs "Authorization: Bearer <[admin] token>" (the live tail also takes a
// short-lived ticket, as a browser's EventSource cannot set a header, never
// the token in its URL); without a configured token the surface is off.
// Wrong tokens are logged (without the token) and throttled per client.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/ops"
	"github.com/botrun/botrun/unit"
)

// Bot is what the admin surface operates; *host.Bot implements it.
type Bot interface {
	// Observer is the bot's observability: its counters, its Prometheus
	// registry (served at /admin/metrics), the queue depths, the last hour
	// and the module's history and digest (the console's charts), and the
	// alerts (the live tail).
	Observer() *observe.Observer
	// Operator reads and acts on the bot's journals: lists, records, the
	// message log, the status, replays, retries, discards, purges, sends.
	Operator() *ops.Operator
	Logger() *slog.Logger
	Draining() <-chan struct{}
}

// Options are the admin surface's settings ([admin] in bot.toml).
type Options struct {
	// Token is the bearer token every request needs; empty turns the
	// surface off.
	Token string
	// MetricsPublic serves GET /admin/metrics without the token (with or
	// without one configured).
	MetricsPublic bool
}

// Attach puts the admin surface on bot. With ln nil it is mounted under
// /admin/ on the bot's public listener. Otherwise it is served alone on ln
// ([admin] listen), with /healthz, by the bot's Run, and the public listener
// answers /admin/ with a plain 404 that does not point at it. Call it before
// Run.
func Attach(bot *host.Bot, token string, ln net.Listener) {
	AttachWith(bot, Options{Token: token}, ln)
}

// AttachWith is Attach with all of the surface's options.
func AttachWith(bot *host.Bot, opts Options, ln net.Listener) {
	if ln == nil {
		bot.Mount(func(mux *http.ServeMux) { RoutesWith(mux, bot, opts) })
		return
	}
	bot.Mount(func(mux *http.ServeMux) { mux.Handle("/admin/", http.NotFoundHandler()) })
	mux := http.NewServeMux()
	RoutesWith(mux, bot, opts)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	bot.AddListener(ln, mux)
}

// Routes mounts the admin surface on mux. An empty token turns it off: every
// /admin/ request then answers 404 saying how to turn it on.
func Routes(mux *http.ServeMux, bot Bot, token string) {
	RoutesWith(mux, bot, Options{Token: token})
}

// RoutesWith is Routes with all of the surface's options.
func RoutesWith(mux *http.ServeMux, bot Bot, opts Options) {
	token := opts.Token
	obs := bot.Observer()
	metrics := promhttp.HandlerFor(obs.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	// GET /metrics is where Prometheus looks: the same metrics, behind the
	// same protection as /admin/metrics.
	if opts.MetricsPublic {
		mux.Handle("GET /admin/metrics", metrics)
		mux.Handle("GET /metrics", metrics)
	}
	if token == "" {
		mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "botrun: the admin API is off; set [admin] token in bot.toml (use ${ENV})", http.StatusNotFound)
		})
		if !opts.MetricsPublic {
			mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "botrun: the metrics are off: set [admin] token in bot.toml (then scrape /metrics with it as a bearer token), or [admin] metrics_public = true", http.StatusNotFound)
			})
		}
		return
	}
	op := bot.Operator()
	a := &api{bot: bot, obs: obs, operator: op, token: []byte(token), tail: newTail()}
	obs.OnAlert(a.tail.publish)
	consoleRoutes(mux, a)
	if !opts.MetricsPublic {
		mux.HandleFunc("GET /admin/metrics", a.auth(metrics.ServeHTTP))
		mux.HandleFunc("GET /metrics", a.auth(metrics.ServeHTTP))
	}
	mux.HandleFunc("GET /admin/inbox", a.auth(a.listInbox))
	mux.HandleFunc("GET /admin/outbox", a.auth(a.listOutbox))
	mux.HandleFunc("GET /admin/status", a.auth(a.status))
	mux.HandleFunc("GET /admin/inbox/{id}", a.auth(record(op.InboxRecord)))
	mux.HandleFunc("GET /admin/outbox/{id}", a.auth(record(op.OutboxRecord)))
	mux.HandleFunc("GET /admin/inbox/{id}/calls", a.auth(record(op.Calls)))
	mux.HandleFunc("POST /admin/inbox/{id}/replay", a.auth(a.op("replay", op.ReplayInbound)))
	mux.HandleFunc("POST /admin/outbox/{id}/retry", a.auth(a.op("retry", op.RetrySend)))
	mux.HandleFunc("POST /admin/outbox/{id}/discard", a.auth(a.op("discard", op.Discard)))
	mux.HandleFunc("POST /admin/inbox/{id}/discard", a.auth(a.op("discard-inbound", op.DiscardInbound)))
	mux.HandleFunc("POST /admin/purge-dead", a.auth(a.purgeDead))
	mux.HandleFunc("POST /admin/send", a.auth(a.send))
	mux.HandleFunc("GET /admin/log", a.auth(a.messageLog))
	mux.HandleFunc("POST /admin/broadcast", a.auth(a.broadcast))
	mux.HandleFunc("POST /admin/replay/dry-run", a.auth(a.dryRun))
	// Go's profiles (CPU, heap, goroutines, blocking), for finding where a
	// slow bot spends its time: curl -H "Authorization: Bearer $TOKEN"
	// -o cpu.pprof http://…/admin/debug/pprof/profile?seconds=30, then
	// go tool pprof -http=: cpu.pprof
	mux.HandleFunc("GET /admin/debug/pprof/", a.auth(http.StripPrefix("/admin", http.HandlerFunc(pprof.Index)).ServeHTTP))
	mux.HandleFunc("GET /admin/debug/pprof/profile", a.auth(pprof.Profile))
	mux.HandleFunc("GET /admin/debug/pprof/trace", a.auth(pprof.Trace))
	mux.HandleFunc("GET /admin/debug/pprof/symbol", a.auth(pprof.Symbol))
	mux.HandleFunc("/admin/", a.auth(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "botrun admin: no such endpoint; see docs/operations.md", http.StatusNotFound)
	}))
}

type api struct {
	bot Bot
	// obs and operator are bot's Observer and Operator.
	obs      *observe.Observer
	operator *ops.Operator
	token    []byte
	tail     *tail
	logins   logins
	tickets  tickets
}

// auth refuses a request without the bearer token (see authorized).
func (a *api) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.authorized(w, r) {
			next(w, r)
		}
	}
}

// filter reads ?state=&chat=&limit=&offset= (limit defaults to 100; limit
// plus offset at most 10,000). The journals list from the start, so a page at
// offset reads offset+limit records and answers the last limit.
func filter(r *http.Request) (f durability.ListFilter, offset int, err error) {
	q := r.URL.Query()
	f = durability.ListFilter{State: q.Get("state"), Chat: q.Get("chat"), Limit: 100}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			return f, 0, fmt.Errorf("limit %q: want 1..10000", s)
		}
		f.Limit = n
	}
	if s := q.Get("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n+f.Limit > 10000 {
			return f, 0, fmt.Errorf("offset %q: want 0..%d (offset+limit at most 10000)", s, 10000-f.Limit)
		}
		offset = n
	}
	f.Limit += offset
	return f, offset, nil
}

// record answers GET /admin/inbox/{id} and /admin/outbox/{key}: one record.
func record[T any](get func(context.Context, string) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := get(r.Context(), r.PathValue("id"))
		switch {
		case errors.Is(err, durability.ErrNotFound):
			http.Error(w, "botrun admin: no record "+strconv.Quote(r.PathValue("id"))+" (discarded, or purged by the retention)", http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rec)
	}
}

func list[T any](w http.ResponseWriter, r *http.Request, fn func(context.Context, durability.ListFilter) ([]T, error)) {
	f, offset, err := filter(r)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusBadRequest)
		return
	}
	recs, err := fn(r.Context(), f)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	recs = recs[min(offset, len(recs)):]
	if len(recs) == 0 {
		recs = []T{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(recs)
}

// status answers GET /admin/status: the leader of each session and the
// leases each replica holds (ops.Operator.Status).
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st, err := a.operator.Status(r.Context())
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// listInbox answers GET /admin/inbox without the records' inputs (GET
// /admin/inbox/{id} has them).
func (a *api) listInbox(w http.ResponseWriter, r *http.Request) {
	list(w, r, func(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
		recs, err := a.operator.ListInbox(ctx, f)
		return durability.WithoutInputs(recs), err
	})
}

func (a *api) listOutbox(w http.ResponseWriter, r *http.Request) { list(w, r, a.operator.ListOutbox) }

// messageLog answers GET /admin/log?chat=C[&limit=N]: the chat's delivered
// messages, inbound and outbound, oldest first.
func (a *api) messageLog(w http.ResponseWriter, r *http.Request) {
	limit := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			http.Error(w, "botrun admin: limit must be a number of entries", http.StatusBadRequest)
			return
		}
		limit = n
	}
	chat := r.URL.Query().Get("chat")
	if chat == "" {
		http.Error(w, "botrun admin: chat is required (GET /admin/log?chat=<chat id>)", http.StatusBadRequest)
		return
	}
	log, err := a.operator.MessageLog(r.Context(), chat, limit)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if log == nil {
		log = []ops.LogEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(log)
}

// SendBody is the body of POST /admin/send: a send for the bot's sweeper,
// held until At (Unix ms) when it is later.
type SendBody struct {
	Provider string `json:"provider"`
	Chat     string `json:"chat"`
	Text     string `json:"text"`
	Key      string `json:"key,omitempty"`
	At       int64  `json:"at,omitempty"`
}

// send journals an operator's send: 202 with its SendResult, 400 for a bad
// body.
func (a *api) send(w http.ResponseWriter, r *http.Request) {
	var body SendBody
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		http.Error(w, `botrun admin: body must be {"provider","chat","text","key"?,"at"?}: `+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := a.operator.SendLater(r.Context(), body.Provider, body.Chat, body.Text, body.Key, body.At)
	a.logAction(r, "send", err, "provider", body.Provider, "chat", body.Chat, "key", res.Key)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), sendStatus(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(res)
}

// broadcast journals an operator's broadcast: the body is a
// abi.BroadcastRequest with its "provider"; 202 with the
// abi.BroadcastResult, 400 for a bad body. Posting the same key_prefix again
// journals only the chats not journaled yet.
func (a *api) broadcast(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Provider string `json:"provider"`
		abi.BroadcastRequest
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, abi.MaxPayload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		http.Error(w, `botrun admin: body must be {"provider","chats","text","key_prefix","at"?}: `+err.Error(), http.StatusBadRequest)
		return
	}
	if err := body.Check(); err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := a.operator.BroadcastLater(r.Context(), body.Provider, body.BroadcastRequest)
	a.logAction(r, "broadcast", err, "provider", body.Provider, "chats", len(body.Chats), "key_prefix", body.KeyPrefix)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), sendStatus(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(res)
}

// sendStatus is the HTTP status of a failed operator send: 400 for a request
// that can never be journaled, 503 when the journal failed (try again).
func sendStatus(err error) int {
	if errors.Is(err, ops.ErrInvalidSend) {
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// op runs the operation name on the record named in the path, and logs it
// with the operator's address.
// PurgeDeadResult is the body of POST /admin/purge-dead's answer.
type PurgeDeadResult struct {
	// Inbox and Outbox count the dead inbound records and the dead or
	// unknown sends deleted.
	Inbox  int `json:"inbox"`
	Outbox int `json:"outbox"`
}

// purgeDead deletes the dead letters completed more than ?before ago, or
// every one with ?all=true; it needs one of the two.
func (a *api) purgeDead(w http.ResponseWriter, r *http.Request) {
	cut := time.Now().UnixMilli() + 1
	q := r.URL.Query()
	before, all := q.Get("before"), q.Get("all") == "true"
	switch {
	case all && before != "":
		http.Error(w, "botrun admin: before= and all=true exclude each other: before=7d deletes the dead letters older than 7 days, all=true every one", http.StatusBadRequest)
		return
	case !all && before == "":
		http.Error(w, "botrun admin: purge-dead needs before=DURATION (e.g. before=7d) or all=true to delete every dead letter", http.StatusBadRequest)
		return
	case before != "":
		d, err := unit.ParseDuration(before)
		if err != nil {
			http.Error(w, "botrun admin: before="+strconv.Quote(before)+" is not a duration (7d, 12h): "+err.Error(), http.StatusBadRequest)
			return
		}
		cut = time.Now().Add(-d).UnixMilli()
	}
	var res PurgeDeadResult
	var err error
	res.Inbox, res.Outbox, err = a.operator.PurgeDeadLetters(r.Context(), cut)
	a.logAction(r, "purge-dead", err, "before", before, "all", all, "inbox", res.Inbox, "outbox", res.Outbox)
	if err != nil {
		http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

func (a *api) op(name string, fn func(context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		err := fn(r.Context(), id)
		a.logAction(r, name, err, "id", id)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, durability.ErrNotFound):
			http.Error(w, "botrun admin: "+err.Error(), http.StatusNotFound)
		case errors.Is(err, durability.ErrInvalidState):
			http.Error(w, "botrun admin: "+err.Error(), http.StatusConflict)
		default:
			http.Error(w, "botrun admin: "+err.Error(), http.StatusServiceUnavailable)
		}
	}
}
