package discordtest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// IntentMessageContent is the privileged intent without which Discord
// blanks a message's content and attachments.
const IntentMessageContent = 1 << 15

// Gateway is the fake Gateway: Hello, Identify (token checked, intents
// recorded), heartbeats and their acknowledgements, dispatches numbered by
// the session, Resume (on /resume) with the replay of every dispatch after
// the client's seq, Reconnect (op 7) and Invalid Session (op 9). DropAfter
// cuts the connection in the middle of a stream. One session at a time: a
// new Identify replaces it.
type Gateway struct {
	api *API

	mu sync.Mutex
	// HeartbeatInterval is Hello's heartbeat_interval (default 45 s).
	HeartbeatInterval time.Duration
	// NoACK leaves heartbeats unacknowledged (a zombie connection).
	NoACK bool
	// DisallowContent closes an Identify asking for MESSAGE_CONTENT with
	// 4014, as Discord does when the intent is not enabled for the app.
	DisallowContent bool

	session     *session
	conn        *websocket.Conn // the session's live connection
	dropAfter   int
	identifies  int
	resumes     int
	resumedFrom []int64
	heartbeats  int
	intents     []int64
}

type session struct {
	id      string
	seq     int64
	intents int64
	log     []frame
}

type frame struct {
	seq int64
	t   string
	d   json.RawMessage
}

// Lock and Unlock guard the exported fields while the fake serves.
func (g *Gateway) Lock() { g.mu.Lock() }

// Unlock releases Lock.
func (g *Gateway) Unlock() { g.mu.Unlock() }

func newGateway(api *API) *Gateway {
	return &Gateway{api: api, HeartbeatInterval: 45 * time.Second}
}

// writeTimeout bounds one frame's write.
const writeTimeout = 5 * time.Second

func write(conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return conn.Write(ctx, websocket.MessageText, b)
}

// Dispatch adds a dispatch (t, d) to the session, numbered, and writes it to
// the live connection if there is one; a session without one gets it on its
// resume. It returns the dispatch's seq, or 0 when no client ever identified.
func (g *Gateway) Dispatch(t string, d any) int64 {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.session
	if s == nil {
		return 0
	}
	s.seq++
	f := frame{seq: s.seq, t: t, d: b}
	s.log = append(s.log, f)
	g.send(f)
	return f.seq
}

// send writes f to the live connection; with mu held. The MESSAGE_CONTENT
// intent missing, a message's content and attachments are blanked.
func (g *Gateway) send(f frame) {
	if g.conn == nil {
		return
	}
	d := f.d
	if f.t == "MESSAGE_CREATE" && g.session.intents&IntentMessageContent == 0 {
		var m map[string]any
		json.Unmarshal(d, &m)
		m["content"], m["attachments"] = "", []any{}
		d, _ = json.Marshal(m)
	}
	if write(g.conn, map[string]any{"op": 0, "s": f.seq, "t": f.t, "d": d}) != nil {
		g.conn.CloseNow()
		g.conn = nil
		return
	}
	if g.dropAfter > 0 {
		g.dropAfter--
		if g.dropAfter == 0 {
			g.conn.CloseNow() // no close frame: a dropped connection
			g.conn = nil
		}
	}
}

// DropAfter cuts the live connection, without a close frame, right after it
// has been written n more dispatches (n > 0).
func (g *Gateway) DropAfter(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropAfter = n
}

// Drop cuts the live connection now.
func (g *Gateway) Drop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		g.conn.CloseNow()
		g.conn = nil
	}
}

// Reconnect asks the client to reconnect (op 7).
func (g *Gateway) Reconnect() { g.op(7, nil) }

// InvalidSession tells the client its session is invalid (op 9).
func (g *Gateway) InvalidSession(resumable bool) { g.op(9, resumable) }

func (g *Gateway) op(op int, d any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		write(g.conn, map[string]any{"op": op, "d": d})
	}
}

// Connected reports whether a session has a live connection.
func (g *Gateway) Connected() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.session != nil && g.conn != nil
}

// Stats are what the fake Gateway counted.
type Stats struct {
	Identifies, Resumes, Heartbeats int
	// ResumedFrom are the seqs the resumes asked to replay after.
	ResumedFrom []int64
	// Intents are the intents of each Identify.
	Intents []int64
	// Seq is the session's last seq.
	Seq int64
}

// Stats returns the counts so far.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Stats{Identifies: g.identifies, Resumes: g.resumes, Heartbeats: g.heartbeats,
		ResumedFrom: append([]int64(nil), g.resumedFrom...), Intents: append([]int64(nil), g.intents...)}
	if g.session != nil {
		s.Seq = g.session.seq
	}
	return s
}

// serve is one Gateway connection.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	if q := r.URL.Query(); q.Get("v") != "10" || q.Get("encoding") != "json" {
		conn.Close(4012, "Invalid API version")
		return
	}
	g.mu.Lock()
	interval := g.HeartbeatInterval
	g.mu.Unlock()
	if write(conn, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": interval.Milliseconds()}}) != nil {
		return
	}
	defer func() {
		g.mu.Lock()
		if g.conn == conn {
			g.conn = nil
		}
		g.mu.Unlock()
	}()
	for {
		_, data, err := conn.Read(context.Background())
		if err != nil {
			// As Discord: a client that closes with 1000 or 1001 ends its
			// session (it cannot be resumed); any other end keeps it.
			if c := websocket.CloseStatus(err); c == websocket.StatusNormalClosure || c == websocket.StatusGoingAway {
				g.mu.Lock()
				if g.conn == conn {
					g.session = nil
				}
				g.mu.Unlock()
			}
			return
		}
		var p struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(data, &p) != nil {
			conn.Close(4002, "Decode error")
			return
		}
		switch p.Op {
		case 1:
			g.mu.Lock()
			g.heartbeats++
			ack := !g.NoACK
			g.mu.Unlock()
			if ack {
				write(conn, map[string]any{"op": 11})
			}
		case 2:
			if !g.identify(conn, r.Host, p.D) {
				return
			}
		case 6:
			if !g.resume(conn, r.URL.Path, p.D) {
				return
			}
		default:
			conn.Close(4001, "Unknown opcode")
			return
		}
	}
}

// identify starts a new session on conn; false when it closed conn.
func (g *Gateway) identify(conn *websocket.Conn, host string, raw json.RawMessage) bool {
	var d struct {
		Token   string `json:"token"`
		Intents int64  `json:"intents"`
	}
	json.Unmarshal(raw, &d)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.intents = append(g.intents, d.Intents)
	switch {
	case d.Token != g.api.token:
		conn.Close(4004, "Authentication failed.")
		return false
	case g.DisallowContent && d.Intents&IntentMessageContent != 0:
		conn.Close(4014, "Disallowed intent(s).")
		return false
	}
	g.identifies++
	g.session = &session{id: randomHex(16), intents: d.Intents}
	g.conn = conn
	g.session.seq++
	ready := frame{seq: g.session.seq, t: "READY"}
	ready.d, _ = json.Marshal(map[string]any{"v": 10, "session_id": g.session.id, "resume_gateway_url": "ws://" + host + "/resume",
		"user":        map[string]any{"id": g.api.BotUser, "username": "botrun", "bot": true},
		"application": map[string]any{"id": g.api.appID}, "guilds": []any{}})
	g.session.log = append(g.session.log, ready)
	g.send(ready)
	return true
}

// resume attaches conn to the session and replays what it missed; false
// when it closed conn.
func (g *Gateway) resume(conn *websocket.Conn, path string, raw json.RawMessage) bool {
	var d struct {
		Token     string `json:"token"`
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	json.Unmarshal(raw, &d)
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.Token != g.api.token {
		conn.Close(4004, "Authentication failed.")
		return false
	}
	s := g.session
	if path != "/resume" || s == nil || s.id != d.SessionID || d.Seq > s.seq || d.Seq < 0 {
		write(conn, map[string]any{"op": 9, "d": false})
		return true
	}
	g.resumes++
	g.resumedFrom = append(g.resumedFrom, d.Seq)
	if g.conn != nil && g.conn != conn {
		g.conn.CloseNow()
	}
	g.conn = conn
	for _, f := range s.log {
		if f.seq > d.Seq {
			g.send(f)
		}
	}
	s.seq++
	resumed := frame{seq: s.seq, t: "RESUMED", d: json.RawMessage(`{}`)}
	s.log = append(s.log, resumed)
	g.send(resumed)
	return true
}

// MessageCreate returns a MESSAGE_CREATE's d: a message in channel by user
// (a bot when bot), with text and attachments.
func (f *API) MessageCreate(id, channel, user string, bot bool, text string, files ...Attachment) map[string]any {
	if files == nil {
		files = []Attachment{}
	}
	return map[string]any{"id": id, "channel_id": channel, "guild_id": "800000000000000001", "type": 0,
		"author": map[string]any{"id": user, "username": "user", "bot": bot}, "content": text,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "attachments": files, "embeds": []any{}, "mentions": []any{}}
}
