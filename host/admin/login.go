package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Failed logins: each client (an IPv4 address, an IPv6 /64) may present
// loginBurst distinct wrong tokens or tickets, and one more every
// loginRefill; past that a wrong one is answered 429. A right token is always
// let in: the throttle slows guessing, it never locks the operator out. The
// same wrong token presented again (a scraper left with a rotated-out token)
// counts once while it is among the client's last recentWrong distinct ones.
// The table keeps at most maxLoginClients clients: a new one past that
// evicts the one that failed least recently.
const (
	loginBurst      = 10
	loginRefill     = time.Minute
	maxLoginClients = 4096
	recentWrong     = 8
)

// logins counts each client's failed logins (a token bucket per client).
type logins struct {
	mu      sync.Mutex
	clients map[string]*allowance
}

// allowance is a client's wrong tokens left, as of at, and the sha256
// prefixes of the last distinct wrong tokens it presented.
type allowance struct {
	left   float64
	at     time.Time
	recent [recentWrong]uint64
	next   int
}

// refill brings al's allowance to now.
func (al *allowance) refill(now time.Time) {
	al.left = min(loginBurst, al.left+now.Sub(al.at).Seconds()/loginRefill.Seconds())
	al.at = now
}

// seen reports whether the wrong token of prefix h is among al's recent
// ones, and records it if it is not.
func (al *allowance) seen(h uint64) bool {
	if slices.Contains(al.recent[:], h) {
		return true
	}
	al.recent[al.next] = h
	al.next = (al.next + 1) % recentWrong
	return false
}

// wait is how long client must wait before a wrong token of its is checked
// again: 0 while it has wrong tokens left.
func (l *logins) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	al := l.clients[client]
	if al == nil {
		return 0
	}
	al.refill(now)
	if al.left >= 1 {
		return 0
	}
	return time.Duration((1 - al.left) * float64(loginRefill))
}

// fail takes one wrong token, wrong, from client's allowance, unless the
// client presented it recently, and returns what is left.
func (l *logins) fail(client, wrong string, now time.Time) int {
	sum := sha256.Sum256([]byte(wrong))
	l.mu.Lock()
	defer l.mu.Unlock()
	al := l.entry(client, now)
	al.refill(now)
	if !al.seen(binary.BigEndian.Uint64(sum[:8])) {
		al.left = max(al.left-1, 0)
	}
	return int(al.left)
}

// entry is client's allowance, created if need be; a new client past
// maxLoginClients evicts the client that failed least recently (after the
// ones whose allowance refilled): no client shares another's allowance.
func (l *logins) entry(client string, now time.Time) *allowance {
	if al := l.clients[client]; al != nil {
		return al
	}
	if l.clients == nil {
		l.clients = map[string]*allowance{}
	}
	if len(l.clients) >= maxLoginClients {
		l.sweep(now)
	}
	if len(l.clients) >= maxLoginClients {
		oldest := ""
		for c, al := range l.clients {
			if oldest == "" || al.at.Before(l.clients[oldest].at) {
				oldest = c
			}
		}
		delete(l.clients, oldest)
	}
	al := &allowance{left: loginBurst, at: now}
	l.clients[client] = al
	return al
}

// sweep forgets the clients whose allowance has refilled.
func (l *logins) sweep(now time.Time) {
	for c, al := range l.clients {
		if al.refill(now); al.left >= loginBurst {
			delete(l.clients, c)
		}
	}
}

// clientOf is the client a request's failed logins count against: its
// address, an IPv6 one cut to its /64. Behind a reverse proxy every client
// is the proxy.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// authorized checks the request's bearer token, in constant time; the right
// token is always let in. A wrong token from a client out of wrong tokens is
// answered 429; any other wrong token is logged (the client's address and
// the path, never the token) and counted against its client. A request
// without a token is refused without being counted: it guessed nothing.
func (a *api) authorized(w http.ResponseWriter, r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(got), a.token) == 1 {
		return true
	}
	if ok && got != "" {
		if a.throttled(w, r) {
			return false
		}
		a.failedLogin(r, got, "a wrong bearer token")
	}
	refuse(w, "botrun admin: missing or wrong bearer token")
	return false
}

// throttled answers 429 to a client out of wrong tokens.
func (a *api) throttled(w http.ResponseWriter, r *http.Request) bool {
	wait := a.logins.wait(clientOf(r), time.Now())
	if wait <= 0 {
		return false
	}
	secs := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, fmt.Sprintf("botrun admin: too many wrong tokens from this address; try again in %d s", secs), http.StatusTooManyRequests)
	return true
}

// failedLogin counts the wrong token or ticket wrong against the request's
// client and logs it (without wrong).
func (a *api) failedLogin(r *http.Request, wrong, what string) {
	left := a.logins.fail(clientOf(r), wrong, time.Now())
	a.bot.Logger().Warn("admin: refused "+what, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "wrong_tokens_left", left)
}

// refuse answers 401 with msg.
func refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="botrun admin"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// Live-tail tickets: a browser's EventSource cannot set a header, and a
// token in a URL ends up in proxies' logs, so the console trades its token
// (in the header) for a ticket that opens one live-tail stream within
// ticketTTL. At most maxTickets are outstanding.
const (
	ticketTTL  = time.Minute
	maxTickets = 1024
)

// tickets are the outstanding live-tail tickets, by their sha256.
type tickets struct {
	mu      sync.Mutex
	expires map[[sha256.Size]byte]time.Time
}

// errTooManyTickets refuses a ticket past maxTickets.
var errTooManyTickets = errors.New("too many live-tail tickets outstanding; try again in a minute")

// issue returns a new ticket, valid until now+ticketTTL.
func (t *tickets) issue(now time.Time) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expires == nil {
		t.expires = map[[sha256.Size]byte]time.Time{}
	}
	for k, exp := range t.expires {
		if !now.Before(exp) {
			delete(t.expires, k)
		}
	}
	if len(t.expires) >= maxTickets {
		return "", errTooManyTickets
	}
	b := make([]byte, 32)
	rand.Read(b)
	s := hex.EncodeToString(b)
	t.expires[sha256.Sum256([]byte(s))] = now.Add(ticketTTL)
	return s, nil
}

// redeem uses up ticket s: it reports whether s was outstanding and
// unexpired.
func (t *tickets) redeem(s string, now time.Time) bool {
	k := sha256.Sum256([]byte(s))
	t.mu.Lock()
	defer t.mu.Unlock()
	exp, ok := t.expires[k]
	delete(t.expires, k)
	return ok && now.Before(exp)
}

// Ticket is the body of POST /admin/events/ticket.
type Ticket struct {
	// Ticket opens one live-tail stream: GET /admin/events?ticket=….
	Ticket string `json:"ticket"`
	// ExpiresIn is how many seconds it stays valid unused.
	ExpiresIn int `json:"expires_in"`
}
