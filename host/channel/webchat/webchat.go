// Package webchat is the development channel: a chat page a person uses in a
// browser and a small JSON API that tools drive. It has no authentication:
// anyone who reaches it may post to, and read, any chat whose id they know.
// The page makes unguessable chat ids; each client address is rate-limited
// (429 with Retry-After); errors never show internal details to the caller.
//
//	POST /webchat/{id}/messages  {"chat":"c1","from":"u1","text":"hola","id":"m-1"}
//	     202 {"id":"web:m-1"} once admitted; 200 {"id":…,"duplicate":true} for a repeated id
//	GET  /webchat/{id}/messages?chat=c1&after=N[&wait=20s]
//	     200 {"messages":[{"seq":1,"chat":"c1","text":"echo: hola"}]}
//
// The bot's sends are kept in a Transcript, in the store the host gives the
// channel (channel.Env's Kv) beside the journals; Run purges it with the
// journals' retention.
package webchat

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Entry is one message the bot sent, as the transcript keeps it.
type Entry struct {
	Seq  int64  `json:"seq"`
	Chat string `json:"chat"`
	Text string `json:"text"`
	// Buttons and List are the choices under the message; the page shows
	// them, and a press comes back as an interaction.
	Buttons []abi.Button `json:"buttons,omitempty"`
	List    *abi.List    `json:"list,omitempty"`
	// Edits, when set, is the seq of an earlier entry of the chat whose text
	// this entry replaces (the bot edited it).
	Edits int64 `json:"edits,omitempty"`
}

// Transcript stores the bot's sends per provider and chat. Seq increases by
// one per Append within a chat (chats do not share a counter, so replies to
// different chats never contend for one).
type Transcript interface {
	// Append adds e (its Seq is ignored) to its chat and returns its seq.
	Append(ctx context.Context, provider string, e Entry) (seq int64, err error)
	After(ctx context.Context, provider, chat string, after int64, limit int) ([]Entry, error)
	// Purge deletes the entries appended before before, of every provider,
	// and returns how many it deleted.
	Purge(ctx context.Context, before time.Time) (int, error)
}

// Limits on what the API accepts.
const (
	MaxBody    = 64 << 10
	MaxText    = 16 << 10
	MaxIDChars = 256
	pageLimit  = 500
	// MaxWait is the longest a GET waits for the next send (well within
	// httpkit.MaxHandlerTime).
	MaxWait = httpkit.MaxHandlerTime / 2
)

func init() {
	channel.Register(channel.Type{Name: "webchat", Config: func() channel.Config { return &Config{RateLimit: 20, Burst: 100} }})
}

// Config is a [[channels]] entry of type "webchat": the development channel
// with a chat page. It has no authentication, so it is refused on a
// non-loopback [http] listen unless AllowPublic is set.
type Config struct {
	// ID is the entry's id (the API lives under /webchat/<id>/).
	ID string `toml:"id"`
	// AllowPublic lets the webchat run on a non-loopback [http] listen.
	AllowPublic bool `toml:"allow_public"`
	// RateLimit is how many requests a second one client address may make
	// (default 20); 0 turns the limit off.
	RateLimit float64 `toml:"rate_limit"`
	// Burst is how many requests a client address may make at once
	// (default 100).
	Burst int `toml:"burst"`
	// Transcript keeps the bot's sends; nil keeps them in the Env's Kv (or
	// in memory when it has none).
	Transcript Transcript `toml:"-"`
}

// Check implements channel.Config.
func (c *Config) Check(in channel.Setting, problem channel.Problem) {
	if err := c.checkListen(in.Listen); err != nil {
		problem("allow_public", "%s", err)
	}
	if c.RateLimit < 0 {
		problem("rate_limit", "%g must not be negative (0 turns the limit off)", c.RateLimit)
	}
	if c.Burst < 1 {
		problem("burst", "%d must be at least 1", c.Burst)
	}
}

// checkListen refuses a listen address other machines reach unless the entry
// allows it.
func (c *Config) checkListen(listen string) error {
	if host, _, err := net.SplitHostPort(listen); err == nil && !httpkit.LoopbackHost(host) && !c.AllowPublic {
		return fmt.Errorf("webchat %q has no authentication and the listen address %q is not loopback: listen on 127.0.0.1, or set allow_public = true in its [[channels]] entry to expose it on purpose", c.ID, listen)
	}
	return nil
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return httpkit.Opened(Open(*c, env))
}

// Provider is a webchat channel.
type Provider struct {
	id  string
	cfg Config
	// retention is how long the transcript keeps entries (0: forever),
	// judged by horizon.
	retention time.Duration
	horizon   func() time.Time
	admit     channel.Admitter
	store     Transcript
	log       *slog.Logger
	limit     *limiter
	// draining is closed when the bot stops: long polls answer at once.
	draining <-chan struct{}

	mu sync.Mutex
	// waiting holds, per chat with a long poll waiting, the channel closed
	// by the next send to that chat.
	waiting map[string]*waiters
	// typing holds, per chat, when its typing indicator ends; typingFor is
	// how long one shows (TypingFor).
	typing    map[string]time.Time
	typingFor time.Duration
}

type waiters struct {
	ch chan struct{}
	n  int
}

// Open returns the webchat channel cfg describes. Its transcript lives in
// env.Kv under env.KeyPrefix + "tr/" unless cfg.Transcript is set.
func Open(cfg Config, env channel.Env) (*Provider, error) {
	if cfg.ID == "" {
		cfg.ID = env.ID
	}
	log := env.Log()
	store := cfg.Transcript
	switch {
	case store != nil:
	case env.Kv != nil:
		store = &kvTranscript{kv: env.Kv, prefix: env.KeyPrefix + "tr/"}
	default:
		store = NewMemoryTranscript()
	}
	return &Provider{id: cfg.ID, cfg: cfg, retention: env.Retention, horizon: env.PurgeClock(), admit: env.Admitter, store: store, log: log, draining: env.Draining,
		limit: newLimiter(cfg.RateLimit, cfg.Burst), waiting: map[string]*waiters{}, typingFor: TypingFor}, nil
}

// CheckListen implements channel.ListenChecker: without allow_public, the
// webchat is served on loopback only.
func (p *Provider) CheckListen(addr string) error { return p.cfg.checkListen(addr) }

// Run implements channel.Runner: it purges transcript entries older than
// the retention, once a minute (or once a retention when it is shorter).
func (p *Provider) Run(ctx context.Context) {
	if p.retention <= 0 {
		return
	}
	httpkit.Every(ctx, min(p.retention, time.Minute), func() {
		n, err := p.store.Purge(ctx, p.horizon().Add(-p.retention))
		switch {
		case err != nil && ctx.Err() == nil:
			p.log.Error("webchat: transcript retention purge failed", "provider", p.id, "err", err)
		case n > 0:
			p.log.Info("webchat: transcript retention purge", "provider", p.id, "entries", n)
		}
	})
}

// ID implements channel.Provider.
func (p *Provider) ID() string { return p.id }

// wait returns the channel the next send to chat closes, and the release a
// waiter calls when it stops waiting.
func (p *Provider) wait(chat string) (<-chan struct{}, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.waiting[chat]
	if w == nil {
		w = &waiters{ch: make(chan struct{})}
		p.waiting[chat] = w
	}
	w.n++
	return w.ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.waiting[chat] == w {
			if w.n--; w.n == 0 {
				delete(p.waiting, chat)
			}
		}
	}
}

// notify wakes the long polls of chat, and only those.
func (p *Provider) notify(chat string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.waiting[chat]; w != nil {
		close(w.ch)
		delete(p.waiting, chat)
	}
}

// Send implements channel.Provider: the message joins the transcript.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	seq, err := p.store.Append(ctx, p.id, entryOf(msg))
	if err != nil {
		return "", fmt.Errorf("webchat %s: transcript: %w", p.id, err)
	}
	p.stopTyping(msg.Chat)
	p.notify(msg.Chat)
	return strconv.FormatInt(seq, 10), nil
}

// Edit implements channel.Editor: the new text joins the transcript as an
// entry that edits the message ref (its seq); the page replaces that
// message's text.
func (p *Provider) Edit(ctx context.Context, chat, ref, text string) error {
	seq, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || seq < 1 {
		return fmt.Errorf("%w: webchat message refs are seqs, not %q", channel.ErrUnsupportedContent, ref)
	}
	if _, err := p.store.Append(ctx, p.id, Entry{Chat: chat, Text: text, Edits: seq}); err != nil {
		return fmt.Errorf("webchat %s: transcript: %w", p.id, err)
	}
	p.notify(chat)
	return nil
}

// TypingFor is how long a typing indicator shows.
const TypingFor = 5 * time.Second

// Typing implements channel.Typist: the chat's long polls answer
// "typing": true for TypingFor (or until the next message).
func (p *Provider) Typing(_ context.Context, chat, _ string) error {
	p.mu.Lock()
	if p.typing == nil {
		p.typing = map[string]time.Time{}
	}
	now := time.Now()
	for c, t := range p.typing {
		if now.After(t) {
			delete(p.typing, c) // bounded by the chats typing now
		}
	}
	p.typing[chat] = now.Add(p.typingFor)
	p.mu.Unlock()
	p.notify(chat)
	return nil
}

// stopTyping ends chat's typing indicator: the message came.
func (p *Provider) stopTyping(chat string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.typing, chat)
}

// typingUntil is when chat's typing indicator ends (zero: none).
func (p *Provider) typingUntil(chat string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.typing[chat]
}

// PrepareSend implements channel.Transactional: with the transcript in the
// backend's Kv, a reply is delivered by the writes that append it, which
// the host commits with the send's outbox record: a crash cannot leave a
// webchat reply ambiguous.
func (p *Provider) PrepareSend(ctx context.Context, msg channel.Outbound, retry bool) (string, []durability.Write, error) {
	kt, ok := p.store.(*kvTranscript)
	if !ok {
		return "", nil, channel.ErrNotTransactional
	}
	seq, writes, err := kt.prepare(ctx, p.id, entryOf(msg), retry)
	if err != nil {
		return "", nil, fmt.Errorf("webchat %s: transcript: %w", p.id, err)
	}
	return strconv.FormatInt(seq, 10), writes, nil
}

// Delivered implements channel.Transactional: the entry is in the
// transcript; the chat's long polls wake.
func (p *Provider) Delivered(msg channel.Outbound, ref string) {
	if kt, ok := p.store.(*kvTranscript); ok {
		seq, _ := strconv.ParseInt(ref, 10, 64)
		e := entryOf(msg)
		e.Seq = seq
		kt.appended(p.id, e)
	}
	p.stopTyping(msg.Chat)
	p.notify(msg.Chat)
}

// entryOf is how a send reads in the transcript.
func entryOf(msg channel.Outbound) Entry {
	text := msg.Text
	if msg.Media != nil {
		text = strings.TrimSpace(text + " [" + msg.Media.Type + ": " + msg.Media.URL + msg.Media.Ref + "]")
	}
	return Entry{Chat: msg.Chat, Text: text, Buttons: msg.Buttons, List: msg.List}
}

//go:embed page.html
var page embed.FS

// Routes implements channel.Router: the API, the chat page under
// /webchat/<id>/, and at / unless another route (an earlier webchat) serves
// it already.
func (p *Provider) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /webchat/"+p.id+"/messages", p.limited(p.post))
	mux.HandleFunc("GET /webchat/"+p.id+"/messages", p.limited(p.get))
	mux.HandleFunc("GET /webchat/"+p.id+"/{$}", p.page)
	if _, pattern := mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}}); pattern == "" {
		mux.HandleFunc("GET /{$}", p.page)
	}
}

func (p *Provider) page(w http.ResponseWriter, r *http.Request) {
	b, _ := page.ReadFile("page.html")
	b = bytes.ReplaceAll(b, []byte("{{PROVIDER}}"), []byte(p.id))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// PostBody is the body of POST /webchat/{id}/messages.
type PostBody struct {
	Chat string `json:"chat"`
	From string `json:"from"`
	Text string `json:"text"`
	ID   string `json:"id"`
	// Interaction is the press of a button or a list row the bot sent
	// (its id, title, and the seq of the message it was on); text may then
	// be empty.
	Interaction *abi.Interaction `json:"interaction,omitempty"`
}

// ErrBadRequest is wrapped by every error of DecodePost.
var ErrBadRequest = errors.New("bad request")

// DecodePost parses and validates a POST body from untrusted bytes.
func DecodePost(b []byte) (PostBody, error) {
	var m PostBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return PostBody{}, fmt.Errorf("%w: body must be a JSON object {\"chat\",\"from\",\"text\",\"id\"}: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return PostBody{}, fmt.Errorf("%w: trailing data after the JSON object", ErrBadRequest)
	}
	switch {
	case m.Chat == "":
		return PostBody{}, fmt.Errorf("%w: \"chat\" is required", ErrBadRequest)
	case m.Text == "" && m.Interaction == nil:
		return PostBody{}, fmt.Errorf("%w: \"text\" (or an \"interaction\") is required", ErrBadRequest)
	case m.Interaction != nil && m.Interaction.ID == "":
		return PostBody{}, fmt.Errorf("%w: \"interaction\" needs the \"id\" of the pressed button", ErrBadRequest)
	case len(m.Chat) > MaxIDChars || len(m.From) > MaxIDChars || len(m.ID) > MaxIDChars:
		return PostBody{}, fmt.Errorf("%w: \"chat\", \"from\" and \"id\" are limited to %d bytes", ErrBadRequest, MaxIDChars)
	case len(m.Text) > MaxText:
		return PostBody{}, fmt.Errorf("%w: \"text\" is limited to %d bytes", ErrBadRequest, MaxText)
	case m.Interaction != nil && (len(m.Interaction.ID) > abi.MaxChoiceID || len(m.Interaction.Title) > MaxText || len(m.Interaction.Message) > MaxIDChars):
		return PostBody{}, fmt.Errorf("%w: \"interaction\" id is limited to %d bytes", ErrBadRequest, abi.MaxChoiceID)
	case !utf8.ValidString(m.Chat + m.From + m.Text + m.ID):
		return PostBody{}, fmt.Errorf("%w: strings must be UTF-8", ErrBadRequest)
	}
	names := []struct{ what, v string }{{"\"chat\"", m.Chat}, {"\"from\"", m.From}, {"\"id\"", m.ID}}
	if in := m.Interaction; in != nil {
		if !utf8.ValidString(in.ID + in.Title + in.Message) {
			return PostBody{}, fmt.Errorf("%w: strings must be UTF-8", ErrBadRequest)
		}
		names = append(names, struct{ what, v string }{"\"interaction\" id", in.ID}, struct{ what, v string }{"\"interaction\" message", in.Message})
	}
	for _, f := range names {
		if err := abi.CheckName(f.what, f.v); err != nil {
			return PostBody{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	if m.From == "" {
		m.From = m.Chat
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

func (p *Provider) post(w http.ResponseWriter, r *http.Request) {
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
	m, err := DecodePost(buf.Bytes())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if m.ID == "" {
		var b [12]byte
		rand.Read(b[:])
		m.ID = hex.EncodeToString(b[:])
	}
	adm, err := p.admit.Admit(r.Context(), p.id, channel.Message{ID: m.ID, Chat: m.Chat, From: m.From, Text: m.Text, Interaction: m.Interaction})
	if err != nil {
		// The caller is not authenticated: the details go to the log only.
		p.log.Error("webchat: message not admitted", "provider", p.id, "chat", m.Chat, "err", err)
		httpkit.NotAdmitted(w.Header(), err)
		writeError(w, http.StatusServiceUnavailable, "not admitted, send it again")
		return
	}
	if adm.Duplicate {
		writeJSON(w, http.StatusOK, map[string]any{"id": adm.ID, "duplicate": true})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"id": adm.ID})
}

func (p *Provider) get(w http.ResponseWriter, r *http.Request) {
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
	// typing is what the client shows now ("1": "typing…"): a long poll
	// also ends when that changes.
	shown := q.Get("typing") == "1"
	deadline := time.Now().Add(wait)
	for {
		changed, release := p.wait(chat)
		until := p.typingUntil(chat)
		typing := time.Now().Before(until)
		msgs, err := p.store.After(r.Context(), p.id, chat, after, pageLimit)
		if err != nil {
			release()
			p.log.Error("webchat: reading the transcript failed", "provider", p.id, "chat", chat, "err", err)
			writeError(w, http.StatusInternalServerError, "the transcript is unavailable, try again")
			return
		}
		left := time.Until(deadline)
		if typing {
			left = min(left, time.Until(until)) // wake when it ends
		}
		if len(msgs) > 0 || left <= 0 || typing != shown {
			release()
			if msgs == nil {
				msgs = []Entry{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"messages": msgs, "typing": typing})
			return
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-p.draining:
			deadline = time.Now() // the bot stops: answer with what there is
		case <-r.Context().Done():
		}
		t.Stop()
		release()
		if r.Context().Err() != nil {
			return
		}
	}
}

// MemoryTranscript is a Transcript in memory: it is lost on restart.
type MemoryTranscript struct {
	mu    sync.Mutex
	chats map[string]*chatLog // by provider + "\x00" + chat
}

// chatLog is one chat's entries in seq order, and the last seq given (kept
// when the entries are purged, so no seq a reader saw is given again).
type chatLog struct {
	last    int64
	entries []timedEntry
}

type timedEntry struct {
	Entry
	at time.Time
}

// NewMemoryTranscript returns an empty transcript.
func NewMemoryTranscript() *MemoryTranscript {
	return &MemoryTranscript{chats: map[string]*chatLog{}}
}

// Append implements Transcript.
func (t *MemoryTranscript) Append(_ context.Context, provider string, e Entry) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.chats[provider+"\x00"+e.Chat]
	if c == nil {
		c = &chatLog{}
		t.chats[provider+"\x00"+e.Chat] = c
	}
	c.last++
	e.Seq = c.last
	c.entries = append(c.entries, timedEntry{e, time.Now()})
	return c.last, nil
}

// After implements Transcript.
func (t *MemoryTranscript) After(_ context.Context, provider, chat string, after int64, limit int) ([]Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.chats[provider+"\x00"+chat]
	if c == nil {
		return nil, nil
	}
	i, _ := slices.BinarySearchFunc(c.entries, after+1, func(e timedEntry, seq int64) int { return cmp.Compare(e.Seq, seq) })
	var out []Entry
	for _, e := range c.entries[i:min(len(c.entries), i+limit)] {
		out = append(out, e.Entry)
	}
	return out, nil
}

// Purge implements Transcript.
func (t *MemoryTranscript) Purge(_ context.Context, before time.Time) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.chats {
		i := 0
		for i < len(c.entries) && c.entries[i].at.Before(before) {
			i++
		}
		if i > 0 {
			n += i
			c.entries = slices.Clone(c.entries[i:])
		}
	}
	return n, nil
}
