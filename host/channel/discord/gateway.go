package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/internal/ratelimit"
	"github.com/botrun/botrun/host/channel/discord/internal/wire"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// closeResumable is the close code botrun stops with: any but 1000 and 1001
// leaves the session resumable.
const closeResumable websocket.StatusCode = 4000

// maxFrame is the largest Gateway frame read (a READY or a GUILD_CREATE of a
// large guild is big).
const maxFrame = 16 << 20

// gateway is the Gateway client of a Channel in gateway mode (see the
// package doc). Its session (id, resume URL, sequence) lives across
// connections; only the run goroutine touches it, but seq, which the
// heartbeat reads.
type gateway struct {
	p    *Provider
	dial *http.Client
	// configured is gateway_url; nil asks GET /gateway/bot.
	configured *url.URL

	sessionID string
	resumeURL *url.URL
	// seq is the sequence number of the last dispatch handled.
	seq atomic.Int64
	// stored keeps the session across restarts of botrun.
	stored *sessionStore

	// The waits, shortened by tests: before the attempt-th reconnection,
	// after an Invalid Session, after a close that needs the operator (a
	// bad token, intents not enabled), after an admission failure (at
	// least), and for Hello.
	retry     func(attempt int) time.Duration
	invalid   func() time.Duration
	fatalWait time.Duration
	admitWait time.Duration
	helloWait time.Duration
}

func newGateway(p *Provider) (*gateway, error) {
	g := &gateway{p: p, retry: backoff, fatalWait: 5 * time.Minute, admitWait: time.Second, helloWait: 30 * time.Second,
		invalid: func() time.Duration { return time.Second + rand.N(4*time.Second) }}
	trusted := p.API
	if p.cfg.GatewayURL != "" {
		u, err := gatewayURL(p.cfg.GatewayURL)
		if err != nil {
			return nil, fmt.Errorf("gateway_url: %w", err)
		}
		g.configured = u
		// The configured Gateway may be on loopback, as the api_url may.
		trusted = &url.URL{Scheme: map[string]string{"ws": "http", "wss": "https"}[u.Scheme], Host: u.Host}
	}
	// No timeout: the connection lives for hours; dials have their own.
	g.dial = httpkit.NewClient(0, trusted, nil)
	g.stored = &sessionStore{kv: p.kv, key: p.kvPrefix + "discord/" + p.cfg.ID + "/session"}
	return g, nil
}

// backoff is the wait before the attempt-th reconnection in a row: none for
// the first (a resume), then 1, 2, 4 … 60 seconds, give or take a fifth.
func backoff(attempt int) time.Duration {
	if attempt == 0 {
		return 0
	}
	d := min(time.Second<<min(attempt-1, 6), time.Minute)
	return d - d/5 + rand.N(2*d/5+1)
}

// outcome is how a connection ended.
type outcome struct {
	// ready is true when it reached READY or RESUMED.
	ready bool
	// wait is the wait before the next connection; 0 is the backoff's.
	wait time.Duration
	err  error
}

// run connects, and connects again, until ctx ends. It starts by resuming
// the session an earlier run of botrun kept, if any.
func (g *gateway) run(ctx context.Context) {
	if st, ok := g.stored.load(ctx); ok {
		g.sessionID, g.resumeURL = st.ID, nil
		if u, err := gatewayURL(st.ResumeURL); err == nil {
			g.resumeURL = u
		}
		g.seq.Store(st.Seq)
		g.stored.publish(g.sessionID, g.resumeURL)
		g.p.Log.Info("discord: resuming the session kept from the last run", "provider", g.p.cfg.ID, "seq", st.Seq)
	}
	saver, stop := context.WithCancel(ctx)
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		// A panic ends the saving (logged, counted), not the process: the
		// session is then resumed from an older sequence, or identified
		// anew, at the next start.
		g.p.guard("keeping the gateway session", func() error { g.stored.keep(saver, &g.seq); return nil })
	}()
	defer func() { stop(); <-saved }()
	for attempt := 0; ctx.Err() == nil; {
		out := g.connect(ctx)
		if ctx.Err() != nil {
			return
		}
		if out.err != nil {
			g.p.Log.Warn("discord: gateway connection ended", "provider", g.p.cfg.ID, "err", out.err, "resume", g.sessionID != "")
		}
		if out.ready {
			attempt = 0
		}
		wait := out.wait
		if wait == 0 {
			wait = g.retry(attempt)
			attempt++
		}
		if wait > 0 {
			ratelimit.SleepCtx(ctx, wait)
		}
	}
}

// forget ends the session: the next connection identifies anew.
func (g *gateway) forget() {
	g.sessionID, g.resumeURL = "", nil
	g.seq.Store(0)
	g.stored.publish("", nil)
}

// identifyURL is the URL a new session connects to: gateway_url, or the one
// GET /gateway/bot gives (with the wait its session start limit asks for).
func (g *gateway) identifyURL(ctx context.Context) (*url.URL, time.Duration, error) {
	if g.configured != nil {
		return g.configured, 0, nil
	}
	var info struct {
		URL   string `json:"url"`
		Limit struct {
			Total      int   `json:"total"`
			Remaining  int   `json:"remaining"`
			ResetAfter int64 `json:"reset_after"`
		} `json:"session_start_limit"`
	}
	if err := g.p.call(ctx, request{method: http.MethodGet, path: "/gateway/bot", route: "GET /gateway/bot", auth: true}, &info); err != nil {
		if httpkit.Permanent(err) {
			return nil, g.fatalWait, err
		}
		return nil, httpkit.RetryAfter(err), err
	}
	if info.Limit.Total > 0 && info.Limit.Remaining <= 0 {
		return nil, max(time.Second, time.Duration(info.Limit.ResetAfter)*time.Millisecond),
			fmt.Errorf("the session start limit (%d a day) is reached", info.Limit.Total)
	}
	u, err := gatewayURL(info.URL)
	if err != nil {
		return nil, 0, fmt.Errorf("GET /gateway/bot: %w", err)
	}
	return u, 0, nil
}

// query is u with the version and encoding botrun speaks.
func query(u *url.URL) string {
	v := *u
	v.RawQuery = "v=10&encoding=json"
	return v.String()
}

// send writes one frame.
func send(ctx context.Context, conn *websocket.Conn, op int, d any) error {
	b, err := json.Marshal(map[string]any{"op": op, "d": d})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// connect runs one connection: Hello, Identify or Resume, then heartbeats
// and dispatches until it ends.
func (g *gateway) connect(ctx context.Context) outcome {
	resume := g.sessionID != "" && g.seq.Load() > 0
	target := g.resumeURL
	if !resume {
		g.forget()
		u, wait, err := g.identifyURL(ctx)
		if err != nil || wait > 0 {
			return outcome{wait: wait, err: err}
		}
		target = u
	} else if target == nil {
		target = g.configured
	}
	if target == nil { // resuming a session whose READY gave no resume URL
		u, wait, err := g.identifyURL(ctx)
		if err != nil || wait > 0 {
			return outcome{wait: wait, err: err}
		}
		target = u
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, _, err := websocket.Dial(dctx, query(target), &websocket.DialOptions{HTTPClient: g.dial, HTTPHeader: http.Header{"User-Agent": {userAgent}}})
	cancel()
	if err != nil {
		return outcome{err: fmt.Errorf("dialing the Gateway: %w", err)}
	}
	conn.SetReadLimit(maxFrame)
	defer conn.CloseNow()
	// Stopping the bot ends the session (1000); any other end keeps it
	// resumable.
	// Stopping closes with a code other than 1000 and 1001, which would end
	// the session: the next run of botrun resumes it.
	stop := context.AfterFunc(ctx, func() { conn.Close(closeResumable, "botrun stopping") })
	defer stop()
	read := context.WithoutCancel(ctx)

	hctx, cancel := context.WithTimeout(ctx, g.helloWait)
	_, data, err := conn.Read(hctx)
	cancel()
	if err != nil {
		return outcome{err: fmt.Errorf("waiting for Hello: %w", err)}
	}
	var hello struct {
		Interval int64 `json:"heartbeat_interval"`
	}
	pl, err := wire.DecodePayload(data)
	if err == nil && pl.Op == wire.OpHello {
		err = json.Unmarshal(pl.D, &hello)
	}
	if err != nil || pl.Op != wire.OpHello || hello.Interval <= 0 || hello.Interval > 600_000 {
		return outcome{err: errors.New("the Gateway's first frame is not a Hello with a heartbeat_interval")}
	}
	if resume {
		err = send(ctx, conn, wire.OpResume, map[string]any{"token": g.p.cfg.Token, "session_id": g.sessionID, "seq": g.seq.Load()})
	} else {
		err = send(ctx, conn, wire.OpIdentify, map[string]any{"token": g.p.cfg.Token, "intents": Intents,
			"properties": map[string]string{"os": runtime.GOOS, "browser": "botrun", "device": "botrun"}})
	}
	if err != nil {
		return outcome{err: fmt.Errorf("identifying: %w", err)}
	}

	var acked atomic.Bool
	acked.Store(true)
	hbCtx, hbStop := context.WithCancel(ctx)
	var hb sync.WaitGroup
	hb.Go(func() {
		// A panic (logged, counted) ends the connection, as a missed
		// acknowledgement does: the read loop then reconnects.
		if g.p.guard("heartbeating", func() error {
			g.heartbeat(hbCtx, conn, time.Duration(hello.Interval)*time.Millisecond, &acked)
			return nil
		}) != nil {
			conn.CloseNow()
		}
	})
	defer hb.Wait()
	defer hbStop()

	ready := false
	for {
		_, data, err := conn.Read(read)
		if err != nil {
			return g.closed(err, ready)
		}
		pl, err := wire.DecodePayload(data)
		if err != nil {
			g.p.Log.Warn("discord: a bad gateway frame skipped", "provider", g.p.cfg.ID, "err", err)
			continue
		}
		switch pl.Op {
		case wire.OpDispatch:
			// A panic skips the event: replayed, it would panic again.
			if err := g.p.guard(fmt.Sprintf("taking gateway event %s seq %d", pl.T, pl.S), func() error { return g.dispatch(ctx, pl) }); err != nil && !errors.Is(err, channel.ErrPanicked) {
				// Not journaled: resume from the last dispatch handled,
				// and Discord replays this one.
				conn.CloseNow()
				return outcome{ready: ready, wait: max(g.admitWait, httpkit.RetryAfter(err)), err: fmt.Errorf("%s %d not admitted: %w", pl.T, pl.S, err)}
			}
			g.seq.Store(pl.S)
			if pl.T == "READY" || pl.T == "RESUMED" {
				ready = true
			}
		case wire.OpHeartbeat:
			if err := g.beat(ctx, conn); err != nil {
				return outcome{ready: ready, err: fmt.Errorf("heartbeat: %w", err)}
			}
		case wire.OpHeartbeatACK:
			acked.Store(true)
		case wire.OpReconnect:
			return outcome{ready: true} // resume at once
		case wire.OpInvalidSession:
			var resumable bool
			json.Unmarshal(pl.D, &resumable)
			if !resumable {
				g.forget()
			}
			return outcome{ready: ready, wait: g.invalid(), err: errors.New("the Gateway invalidated the session")}
		}
	}
}

// closed is the outcome of a connection the Gateway (or the network) ended.
func (g *gateway) closed(err error, ready bool) outcome {
	hint := map[websocket.StatusCode]string{
		4004: "authentication failed: check the token",
		4010: "invalid shard", 4011: "sharding required: botrun connects one shard",
		4012: "invalid API version",
		4013: "invalid intents",
		4014: "disallowed intents: enable the Message Content intent under Bot > Privileged Gateway Intents in the Developer Portal",
	}
	code := websocket.CloseStatus(err)
	if h, fatal := hint[code]; fatal {
		g.forget()
		g.p.Log.Error("discord: the Gateway refused the bot", "provider", g.p.cfg.ID, "code", int(code), "hint", h, "retry_in", g.fatalWait)
		return outcome{wait: g.fatalWait, err: fmt.Errorf("closed with %d: %s", code, h)}
	}
	if code == 4007 || code == 4009 { // invalid seq, session timed out
		g.forget()
	}
	return outcome{ready: ready, err: err}
}

// beat sends a heartbeat with the last sequence number handled.
func (g *gateway) beat(ctx context.Context, conn *websocket.Conn) error {
	var d any
	if s := g.seq.Load(); s > 0 {
		d = s
	}
	return send(ctx, conn, wire.OpHeartbeat, d)
}

// heartbeat beats every interval (the first after a random part of it) and
// drops the connection when the last beat was not acknowledged: a dead
// connection, resumed.
func (g *gateway) heartbeat(ctx context.Context, conn *websocket.Conn, interval time.Duration, acked *atomic.Bool) {
	t := time.NewTimer(rand.N(interval) + 1)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !acked.Swap(false) {
			g.p.Log.Warn("discord: no heartbeat acknowledgement; reconnecting", "provider", g.p.cfg.ID)
			conn.CloseNow()
			return
		}
		if g.beat(ctx, conn) != nil {
			return
		}
		t.Reset(interval)
	}
}

// dispatch handles one dispatch. An error is an admission error: the
// dispatch is not handled.
func (g *gateway) dispatch(ctx context.Context, pl wire.Payload) error {
	p := g.p
	switch pl.T {
	case "READY":
		var r struct {
			SessionID string `json:"session_id"`
			ResumeURL string `json:"resume_gateway_url"`
		}
		json.Unmarshal(pl.D, &r)
		g.sessionID, g.resumeURL = r.SessionID, nil
		if u, err := gatewayURL(r.ResumeURL); err == nil {
			g.resumeURL = u
		}
		g.stored.publish(g.sessionID, g.resumeURL)
		p.Log.Info("discord: connected to the Gateway", "provider", p.cfg.ID)
	case "RESUMED":
		p.Log.Info("discord: resumed the Gateway session", "provider", p.cfg.ID, "seq", g.seq.Load())
	case "MESSAGE_CREATE":
		m, err := wire.DecodeMessage(pl.D)
		if err != nil {
			p.Log.Warn("discord: a bad message skipped", "provider", p.cfg.ID, "err", err)
			return nil
		}
		if msg, ok := m.Inbound(); ok {
			if _, err := p.Admitter.Admit(ctx, p.cfg.ID, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
				return err
			}
		}
	case "INTERACTION_CREATE":
		ix, err := wire.DecodeInteraction(pl.D)
		if err != nil {
			p.Log.Warn("discord: a bad interaction skipped", "provider", p.cfg.ID, "err", err)
			return nil
		}
		if ix.Type != wire.InteractionCommand && ix.Type != wire.InteractionComponent {
			return nil
		}
		cb, err := p.interaction(ctx, ix)
		if err != nil {
			return err
		}
		p.acknowledge(ctx, ix, cb)
	}
	return nil
}
