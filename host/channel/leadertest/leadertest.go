// Package leadertest is a fake channel whose transport is a session one
// process at a time may hold, like a WhatsApp Web device, for tests of
// leader-only sessions (session = "leader") with real processes: Network is
// the far side, an HTTP server the test runs; the channel type
// "leader-test" (Register) connects to it.
//
// The channel's session is a long-lived GET /session that streams the
// inbound messages Network has for the bot, one JSON line each, until the
// session ends; each message is journaled (Admit) and then acknowledged
// (POST /ack), and the unacknowledged ones are streamed again to the next
// session, as WhatsApp redelivers. A send is POST /send with the session's
// fencing token and the process id: Network accepts it only from the
// connected session, and deduplicates it on its outbox key (the channel is
// channel.Idempotent), so a test can count every call, every delivery, and
// every call that did not come from the session's holder.
//
// The channel is not registered by importing the package: a program built
// for such tests calls Register (cmd/botrun does with -tags
// botrun_testchannels), so it never appears among the channels botrun ships.
//
// leadertest is not under host/channel/internal because cmd/botrun's
// failover tests register it. It imports the standard library and the SPI
// (host/channel).
package leadertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// Type is the channel's type name.
const Type = "leader-test"

// Register makes the channel type available as "leader-test".
func Register() {
	channel.Register(channel.Type{Name: Type, Config: func() channel.Config { return &Config{} }})
}

// Config is a [[channels]] entry of type "leader-test".
type Config struct {
	// URL is the Network's base URL.
	URL string `toml:"url"`
}

// Check implements channel.Config.
func (c *Config) Check(_ channel.Setting, problem channel.Problem) {
	if u, err := url.Parse(c.URL); err != nil || u.Host == "" {
		problem("url", "%q: want the test network's http:// URL", c.URL)
	}
}

// Open implements channel.Config.
func (c *Config) Open(env channel.Env) (channel.Channel, error) {
	return &Provider{id: env.ID, url: c.URL, admit: env.Admitter, log: env.Log().With("provider", env.ID),
		client: &http.Client{Timeout: 10 * time.Second}}, nil
}

// Message is one inbound message on the session stream.
type Message struct {
	ID   string `json:"id"`
	Chat string `json:"chat"`
	Text string `json:"text"`
}

// sendBody is a send as Network receives it.
type sendBody struct {
	PID   int    `json:"pid"`
	Token int64  `json:"token"`
	Key   string `json:"key"`
	Chat  string `json:"chat"`
	Text  string `json:"text"`
}

// Provider is one process's end of the channel.
type Provider struct {
	id, url string
	admit   channel.Admitter
	log     *slog.Logger
	client  *http.Client

	mu    sync.Mutex
	fence channel.Fence // the running session's, nil between sessions
	// connected is set while the session's stream is open.
	connected bool
}

// ID implements channel.Provider.
func (p *Provider) ID() string { return p.id }

// IdempotentSends implements channel.Idempotent: Network delivers a key once.
func (p *Provider) IdempotentSends() bool { return true }

// RunSession implements channel.SessionRunner: it connects, journals what
// the stream brings, and reconnects after a failure, until ctx ends.
func (p *Provider) RunSession(ctx context.Context, fence channel.Fence) {
	p.mu.Lock()
	p.fence = fence
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.fence = nil
		p.mu.Unlock()
	}()
	for ctx.Err() == nil {
		if err := p.session(ctx, fence); err != nil && ctx.Err() == nil {
			p.log.Warn("leader-test: session ended; reconnecting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func (p *Provider) session(ctx context.Context, fence channel.Fence) error {
	_, token := fence.Held()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/session?pid=%d&token=%d", p.url, os.Getpid(), token), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req) // no timeout: it lasts the session
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("session refused: HTTP %d", resp.StatusCode)
	}
	p.log.Info("leader-test: session connected", "token", token)
	p.setConnected(true)
	defer p.setConnected(false)
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		var m Message
		if json.Unmarshal(lines.Bytes(), &m) != nil {
			continue // a keepalive
		}
		if held, _ := fence.Held(); !held {
			return errors.New("the session is no longer this process's")
		}
		if _, err := p.admit.Admit(ctx, p.id, channel.Message{ID: m.ID, Chat: m.Chat, From: "user", Text: m.Text}); err != nil {
			p.log.Warn("leader-test: message not journaled; not acknowledged", "id", m.ID, "err", err)
			continue
		}
		p.post(ctx, "/ack?id="+url.QueryEscape(m.ID), nil)
	}
	return fmt.Errorf("session stream closed: %v", lines.Err())
}

func (p *Provider) setConnected(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = on
}

// Send implements channel.Provider: only the session's holder sends. A
// send on the holder while its session connects waits for it (10 s at
// most), as a transport that queues until connected.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	token := int64(-1) // no session here: Network counts the call a stray
	for deadline := time.Now().Add(10 * time.Second); ; {
		p.mu.Lock()
		f, connected := p.fence, p.connected
		p.mu.Unlock()
		held, t := false, int64(0)
		if f != nil {
			held, t = f.Held()
		}
		if !held {
			break
		}
		if connected {
			token = t
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("leader-test %s: the session did not connect", p.id)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	b, _ := json.Marshal(sendBody{PID: os.Getpid(), Token: token, Key: msg.Key, Chat: msg.Chat, Text: msg.Text})
	resp, err := p.post(ctx, "/send", b)
	if err != nil {
		return "", err
	}
	return string(resp), nil
}

func (p *Provider) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", p.url+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("leader-test %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// Session is one connection Network saw.
type Session struct {
	PID   int
	Token int64
	// Start and End are when it connected and ended (End zero while it
	// lasts).
	Start, End time.Time
}

// Network is the far side of the channel: an http.Handler.
type Network struct {
	mu       sync.Mutex
	sessions []Session
	current  *session
	overlaps int
	inbound  []Message           // not acknowledged yet, in order
	calls    map[string]int      // send calls by key, from the holder
	sent     map[string]sendBody // first delivery by key
	strays   []string            // calls from a process without the session
}

type session struct {
	i    int // index in sessions
	pid  int
	tok  int64
	wake chan struct{}
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{calls: map[string]int{}, sent: map[string]sendBody{}}
}

// ServeHTTP implements http.Handler.
func (n *Network) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/session":
		n.serveSession(w, r)
	case "/send":
		var b sendBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ref, err := n.send(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		io.WriteString(w, ref)
	case "/ack":
		n.ack(r.URL.Query().Get("id"))
	default:
		http.NotFound(w, r)
	}
}

func (n *Network) serveSession(w http.ResponseWriter, r *http.Request) {
	pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
	tok, _ := strconv.ParseInt(r.URL.Query().Get("token"), 10, 64)
	s := &session{pid: pid, tok: tok, wake: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.current != nil {
		n.overlaps++
	}
	s.i = len(n.sessions)
	n.sessions = append(n.sessions, Session{PID: pid, Token: tok, Start: time.Now()})
	n.current = s
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.sessions[s.i].End = time.Now()
		if n.current == s {
			n.current = nil
		}
		n.mu.Unlock()
	}()
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	streamed := map[string]bool{}
	keepalive := time.NewTicker(time.Second)
	defer keepalive.Stop()
	for {
		n.mu.Lock()
		var out []Message
		for _, m := range n.inbound {
			if !streamed[m.ID] {
				out = append(out, m)
				streamed[m.ID] = true
			}
		}
		n.mu.Unlock()
		for _, m := range out {
			b, _ := json.Marshal(m)
			if _, err := w.Write(append(b, '\n')); err != nil {
				return
			}
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-s.wake:
		case <-keepalive.C:
			if _, err := io.WriteString(w, "\n"); err != nil {
				return
			}
		}
	}
}

func (n *Network) send(b sendBody) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.current == nil || n.current.pid != b.PID || n.current.tok != b.Token {
		n.strays = append(n.strays, fmt.Sprintf("pid %d token %d key %s", b.PID, b.Token, b.Key))
		return "", errors.New("this process does not hold the session")
	}
	n.calls[b.Key]++
	if _, ok := n.sent[b.Key]; !ok {
		n.sent[b.Key] = b
	}
	return "lt-" + b.Key, nil
}

func (n *Network) ack(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, m := range n.inbound {
		if m.ID == id {
			n.inbound = append(n.inbound[:i], n.inbound[i+1:]...)
			return
		}
	}
}

// Push queues an inbound message for the session: streamed now to the
// connected one, and again to the next until it is acknowledged.
func (n *Network) Push(m Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inbound = append(n.inbound, m)
	if n.current != nil {
		select {
		case n.current.wake <- struct{}{}:
		default:
		}
	}
}

// Holder is the pid of the connected session's process, 0 when none is.
func (n *Network) Holder() (pid int, token int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.current == nil {
		return 0, 0
	}
	return n.current.pid, n.current.tok
}

// Sessions are the connections seen, in order.
func (n *Network) Sessions() []Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Session(nil), n.sessions...)
}

// Overlaps counts the sessions that connected while another was connected.
func (n *Network) Overlaps() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.overlaps
}

// Strays are the send calls from a process that did not hold the session.
func (n *Network) Strays() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.strays...)
}

// Calls counts the send calls made for key by the session's holders.
func (n *Network) Calls(key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[key]
}

// Delivered reports whether key was delivered, and by which process.
func (n *Network) Delivered(key string) (pid int, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b, ok := n.sent[key]
	return b.PID, ok
}

// Texts are the delivered sends' texts, by key.
func (n *Network) Texts() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]string, len(n.sent))
	for k, b := range n.sent {
		out[k] = b.Text
	}
	return out
}

// Pending counts the inbound messages not acknowledged yet.
func (n *Network) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.inbound)
}
