package webchat

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/botrun/botrun/host/channel/httpkit"
)

// maxClients bounds the buckets kept; past it, full buckets (clients quiet
// long enough to have refilled) are dropped.
const maxClients = 10000

// limiter is a token bucket per client address: rate tokens a second, at
// most burst.
type limiter struct {
	rate, burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// newLimiter returns a limiter; rate 0 allows everything.
func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(max(burst, 1)), buckets: map[string]*bucket{}}
}

// allow takes a token of client's bucket, or says how long until one is
// there.
func (l *limiter) allow(client string, now time.Time) (bool, time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[client]
	if b == nil {
		if len(l.buckets) >= maxClients {
			l.dropFull(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[client] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

func (l *limiter) dropFull(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// limited answers 429 with Retry-After (whole seconds, at least 1) to a
// client address over its rate. The address is the connection's peer: behind
// a reverse proxy, every client shares the proxy's bucket.
func (p *Provider) limited(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		client, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			client = r.RemoteAddr
		}
		if ok, wait := p.limit.allow(client, time.Now()); !ok {
			httpkit.SetRetryAfter(w.Header(), wait)
			writeError(w, http.StatusTooManyRequests, "too many requests from your address; wait and try again")
			return
		}
		next(w, r)
	}
}
