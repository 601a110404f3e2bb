// Command riverecho is a benchmark peer of botrun: an echo bot built on River
// (riverqueue) that serves exactly botrun's webchat JSON API for the provider
// id "web", so one load driver can measure both.
//
//	riverecho -listen 127.0.0.1:PORT (-sqlite /path/to/file.db | -postgres URL) -workers N
//
//	POST /webchat/web/messages  {"chat":"c1","from":"u1","text":"hola","id":"m-1"}
//	     202 {"id":"web:m-1"} once durable; 200 {"id":…,"duplicate":true} for a repeated id
//	GET  /webchat/web/messages?chat=c1&after=N[&wait=20s]
//	     200 {"messages":[{"seq":1,"chat":"c1","text":"echo: hola"}]}
//
// A POST inserts the message id into the dedupe table and the River job in one
// transaction and answers after the commit. A River worker appends the reply
// to the transcript and completes its job (river.JobCompleteTx) in one
// transaction, so each message gets exactly one reply, then wakes the long
// polls of that chat. It lives in its own module so that River never becomes a
// dependency of botrun.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/riverqueue/river"
)

// Limits on what the API accepts, the same as botrun's webchat.
const (
	MaxBody    = 64 << 10
	MaxText    = 16 << 10
	MaxIDChars = 256
	// MaxWait is the longest a GET waits for the next reply.
	MaxWait   = 30 * time.Second
	pageLimit = 500
	provider  = "web"
)

// EchoArgs are the arguments of the River job that answers one message.
type EchoArgs struct {
	Chat string `json:"chat"`
	Text string `json:"text"`
	ID   string `json:"id"`
}

// Kind implements river.JobArgs.
func (EchoArgs) Kind() string { return "echo" }

// Entry is one reply, as the transcript keeps it and the GET returns it.
type Entry struct {
	Seq  int64  `json:"seq"`
	Chat string `json:"chat"`
	Text string `json:"text"`
}

// Store is the database the bot keeps its state in: the dedupe table, River's
// jobs and the transcript.
type Store interface {
	// Admit records id in the dedupe table and inserts the job for args in
	// the same transaction; it reports a duplicate (and inserts nothing) if
	// id was already recorded. The job is committed when it returns nil.
	Admit(ctx context.Context, id string, args EchoArgs) (duplicate bool, err error)
	// Reply appends the reply to job's chat and completes job in the same
	// transaction.
	Reply(ctx context.Context, job *river.Job[EchoArgs], text string) error
	// After returns up to limit entries of chat with seq > after, in seq order.
	After(ctx context.Context, chat string, after int64, limit int) ([]Entry, error)
	// Start starts River's client; Stop stops it (waiting for running jobs).
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	// Close closes the database.
	Close()
}

// Worker is the River worker that answers a message with "echo: <text>".
type Worker struct {
	river.WorkerDefaults[EchoArgs]
	store func() Store
	hub   *Hub
}

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[EchoArgs]) error {
	if err := w.store().Reply(ctx, job, "echo: "+job.Args.Text); err != nil {
		return fmt.Errorf("echo job %d: %w", job.ID, err)
	}
	w.hub.Notify(job.Args.Chat)
	return nil
}

// Hub wakes the long polls of a chat when a reply to it lands.
type Hub struct {
	mu sync.Mutex
	// waiting holds, per chat with a long poll waiting, the channel the next
	// reply to that chat closes.
	waiting map[string]*waiters
}

type waiters struct {
	ch chan struct{}
	n  int
}

// NewHub returns a hub with nobody waiting.
func NewHub() *Hub { return &Hub{waiting: map[string]*waiters{}} }

// Wait returns the channel the next reply to chat closes, and the release a
// waiter calls when it stops waiting.
func (h *Hub) Wait(chat string) (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.waiting[chat]
	if w == nil {
		w = &waiters{ch: make(chan struct{})}
		h.waiting[chat] = w
	}
	w.n++
	return w.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiting[chat] == w {
			if w.n--; w.n == 0 {
				delete(h.waiting, chat)
			}
		}
	}
}

// Notify wakes the long polls of chat, and only those.
func (h *Hub) Notify(chat string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.waiting[chat]; w != nil {
		close(w.ch)
		delete(h.waiting, chat)
	}
}

// riverConfig is the River configuration, tuned for throughput and latency
// the way a user of River would, without giving up any durability:
//
//   - Queues: the default queue with MaxWorkers = -workers, the only
//     concurrency knob for working jobs.
//   - FetchCooldown (default 100ms, minimum 1ms) is the debounce between two
//     fetches of available jobs; River's docs say throughput is limited by
//     it. It also limits how often an insert sends a "new job" notification.
//     At the default a quiet queue adds up to 100ms before a job starts; 5ms
//     lets a job start almost at once while a fetch still locks every job
//     that piled up during the cooldown, up to the free worker slots.
//   - FetchPollInterval (default 1s, minimum 1ms, at least FetchCooldown) is
//     the fallback poll for jobs when no notification arrives. PostgreSQL
//     wakes the producer by LISTEN/NOTIFY; the SQLite driver emulates that
//     by polling a river_notification table every 50ms (fixed in the
//     driver), so a 20ms poll is what bounds the pickup delay there. An idle
//     poll locks no rows and so writes nothing.
//   - The completed jobs are kept (CompletedJobRetentionPeriod's default,
//     24h), as a River user would; JobTimeout and retries are the defaults.
func riverConfig(workers int, w *Worker, cooldown, poll time.Duration) *river.Config {
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	return &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
		SoftStopTimeout:   10 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "riverecho:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve the webchat API on")
	sqlitePath := flag.String("sqlite", "", "SQLite database file (riversqlite driver)")
	pgURL := flag.String("postgres", "", "PostgreSQL URL (riverpgxv5 driver)")
	workers := flag.Int("workers", 100, "River MaxWorkers of the queue")
	cooldown := flag.Duration("fetch-cooldown", 5*time.Millisecond, "River FetchCooldown")
	poll := flag.Duration("fetch-poll-interval", 20*time.Millisecond, "River FetchPollInterval")
	flag.Parse()
	if (*sqlitePath == "") == (*pgURL == "") {
		return errors.New("give exactly one of -sqlite and -postgres")
	}
	if *workers < 1 {
		return errors.New("-workers must be at least 1")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	hub := NewHub()
	var store Store
	w := &Worker{hub: hub, store: func() Store { return store }}
	cfg := riverConfig(*workers, w, *cooldown, *poll)
	var err error
	if *sqlitePath != "" {
		store, err = OpenSQLite(ctx, *sqlitePath, cfg)
	} else {
		store, err = OpenPostgres(ctx, *pgURL, *workers, cfg)
	}
	if err != nil {
		return err
	}
	defer store.Close()

	mux := http.NewServeMux()
	api := &API{store: store, hub: hub, log: cfg.Logger}
	mux.HandleFunc("POST /webchat/"+provider+"/messages", api.post)
	mux.HandleFunc("GET /webchat/"+provider+"/messages", api.get)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := store.Start(context.WithoutCancel(ctx)); err != nil {
		ln.Close()
		return fmt.Errorf("river start: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintln(os.Stderr, "listening on", ln.Addr().String())

	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("serve: %w", err)
	}
	// Stop taking messages (long polls get a second to end), then let the
	// running jobs finish, then close the database (deferred).
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	if srv.Shutdown(sctx) != nil {
		srv.Close()
	}
	cancel()
	sctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if serr := store.Stop(sctx); serr != nil && err == nil {
		err = fmt.Errorf("river stop: %w", serr)
	}
	return err
}

// API serves the webchat JSON API.
type API struct {
	store Store
	hub   *Hub
	log   *slog.Logger
}

// PostBody is the body of POST /webchat/web/messages.
type PostBody struct {
	Chat string `json:"chat"`
	From string `json:"from"`
	Text string `json:"text"`
	ID   string `json:"id"`
}

// decodePost parses and validates a POST body as botrun's webchat does.
func decodePost(b []byte) (PostBody, error) {
	var m PostBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return PostBody{}, fmt.Errorf("body must be a JSON object {\"chat\",\"from\",\"text\",\"id\"}: %w", err)
	}
	if dec.More() {
		return PostBody{}, errors.New("trailing data after the JSON object")
	}
	switch {
	case m.Chat == "":
		return PostBody{}, errors.New("\"chat\" is required")
	case m.Text == "":
		return PostBody{}, errors.New("\"text\" is required")
	case len(m.Chat) > MaxIDChars || len(m.From) > MaxIDChars || len(m.ID) > MaxIDChars:
		return PostBody{}, fmt.Errorf("\"chat\", \"from\" and \"id\" are limited to %d bytes", MaxIDChars)
	case len(m.Text) > MaxText:
		return PostBody{}, fmt.Errorf("\"text\" is limited to %d bytes", MaxText)
	case !utf8.ValidString(m.Chat + m.From + m.Text + m.ID):
		return PostBody{}, errors.New("strings must be UTF-8")
	}
	for _, s := range []string{m.Chat, m.From, m.ID} {
		for _, r := range s {
			if unicode.IsControl(r) {
				return PostBody{}, errors.New("ids and chats must be printable")
			}
		}
	}
	return m, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (a *API) post(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxBody))
			return
		}
		writeError(w, http.StatusBadRequest, "the body could not be read")
		return
	}
	m, err := decodePost(buf.Bytes())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if m.ID == "" {
		var b [12]byte
		rand.Read(b[:])
		m.ID = hex.EncodeToString(b[:])
	}
	dup, err := a.store.Admit(r.Context(), m.ID, EchoArgs{Chat: m.Chat, Text: m.Text, ID: m.ID})
	if err != nil {
		a.log.Error("message not admitted", "chat", m.Chat, "err", err)
		writeError(w, http.StatusServiceUnavailable, "not admitted, send it again")
		return
	}
	id := provider + ":" + m.ID
	if dup {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "duplicate": true})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"id": id})
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	chat := q.Get("chat")
	if chat == "" {
		writeError(w, http.StatusBadRequest, "query parameter \"chat\" is required")
		return
	}
	var after int64
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "\"after\" must be a non-negative integer")
			return
		}
		after = n
	}
	var wait time.Duration
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "\"wait\" must be a duration such as \"20s\"")
			return
		}
		wait = min(d, MaxWait)
	}
	deadline := time.Now().Add(wait)
	for {
		// Register before reading, so a reply that lands between the read
		// and the wait still wakes this poll.
		changed, release := a.hub.Wait(chat)
		msgs, err := a.store.After(r.Context(), chat, after, pageLimit)
		if err != nil {
			release()
			if r.Context().Err() != nil {
				return // the client left, or the server is shutting down
			}
			a.log.Error("reading the transcript failed", "chat", chat, "err", err)
			writeError(w, http.StatusInternalServerError, "the transcript is unavailable, try again")
			return
		}
		left := time.Until(deadline)
		if len(msgs) > 0 || left <= 0 {
			release()
			if msgs == nil {
				msgs = []Entry{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"messages": msgs})
			return
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		release()
		if r.Context().Err() != nil {
			return
		}
	}
}
