// Package ratelimit follows Discord's REST rate limits for one bot token:
// the per-route buckets its answers describe and the 429s, per route or
// global (Limiter), and reads a 429's wait (RetryAfter).
//
// ratelimit may import the standard library and the channel SPI
// (host/channel, for its RateLimitedError) only.
package ratelimit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// Limiter follows Discord's rate limits: the per-route buckets its answers
// describe (X-RateLimit-Remaining, X-RateLimit-Reset-After) and the 429s
// (retry_after, per route or global). A request on a route whose bucket is
// spent waits for its reset when that is near (maxWait), and otherwise fails
// with a *channel.RateLimitedError without being made, so the outbox waits
// instead of a worker.
type Limiter struct {
	mu     sync.Mutex
	routes map[string]bucket
	global time.Time // no request before this
	// Now is the clock and Sleep the wait, set by New (a test sets its
	// own before the first request).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// maxWait is the longest wait made inline.
	maxWait time.Duration
}

// bucket is what the last answer on a route said of its bucket.
type bucket struct {
	remaining int
	reset     time.Time
}

// maxRoutes bounds the routes remembered (one per channel, and one per
// interaction token for follow-ups); past it the reset ones are forgotten.
const maxRoutes = 1024

// New returns a Limiter that remembers no bucket yet.
func New() *Limiter {
	return &Limiter{routes: map[string]bucket{}, Now: time.Now, Sleep: SleepCtx, maxWait: 5 * time.Second}
}

// SleepCtx waits d or until ctx ends.
func SleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errBucketSpent is wrapped by the RateLimitedError of a request not made
// because its bucket is spent.
var errBucketSpent = errors.New("the route's rate limit bucket is spent")

// Wait returns when a request on route may be made: at once, after a short
// wait, or with a *channel.RateLimitedError for a long one.
func (l *Limiter) Wait(ctx context.Context, route string) error {
	l.mu.Lock()
	now := l.Now()
	until := l.global
	if b, ok := l.routes[route]; ok && b.remaining <= 0 && b.reset.After(until) {
		until = b.reset
	}
	l.mu.Unlock()
	d := until.Sub(now)
	switch {
	case d <= 0:
		return nil
	case d > l.maxWait:
		return &channel.RateLimitedError{RetryAfter: d, Err: errBucketSpent}
	}
	return l.Sleep(ctx, d)
}

// Update records the bucket an answer on route describes.
func (l *Limiter) Update(route string, h http.Header) {
	rem, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	after, err2 := strconv.ParseFloat(h.Get("X-RateLimit-Reset-After"), 64)
	if err1 != nil || err2 != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget()
	l.routes[route] = bucket{remaining: rem, reset: l.Now().Add(seconds(after))}
}

// Limited records a 429: route (or every route, when global) waits wait.
func (l *Limiter) Limited(route string, wait time.Duration, global bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until := l.Now().Add(wait)
	if global {
		if until.After(l.global) {
			l.global = until
		}
		return
	}
	l.forget()
	l.routes[route] = bucket{remaining: 0, reset: until}
}

// forget drops the buckets already reset when too many are remembered.
func (l *Limiter) forget() {
	if len(l.routes) < maxRoutes {
		return
	}
	now := l.Now()
	for r, b := range l.routes {
		if !b.reset.After(now) {
			delete(l.routes, r)
		}
	}
	if len(l.routes) >= maxRoutes {
		clear(l.routes) // all pending: start over rather than grow
	}
}

// seconds converts Discord's float seconds to a duration, bounded to a day.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s <= 0 {
		return 0
	}
	return time.Duration(math.Min(s, 86400) * float64(time.Second))
}

// RetryAfter is a 429's wait: the body's retry_after (float seconds), else
// the Retry-After header, else a second.
func RetryAfter(body float64, h http.Header) time.Duration {
	if d := seconds(body); d > 0 {
		return d
	}
	if s, err := strconv.ParseFloat(h.Get("Retry-After"), 64); err == nil && s > 0 {
		return seconds(s)
	}
	return time.Second
}
