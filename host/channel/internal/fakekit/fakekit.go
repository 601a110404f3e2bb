// Package fakekit is what every channel's fake API (the *test packages
// beside the channels) embeds: the lock over its exported fields, the sends
// it accepted, a settable rate limit, the media it serves, and the small
// wire helpers its handlers repeat (a JSON answer, a bearer token check).
// Each fake keeps its own wire format, its own checks and its own error
// answers: the kit holds only what is the same in all of them.
//
// fakekit imports the standard library only (testing among it: it is a
// test kit, and WaitFor and Log serve the channels' tests). It is internal to
// host/channel: only the channels' fakes and tests use it.
package fakekit

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"github.com/botrun/botrun/internal/waitfor"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Kit is the state every fake shares, S being the fake's record of one
// accepted send. Lock guards its fields (and the fake's own) while the fake
// serves; a test takes it to change them.
type Kit[S any] struct {
	mu sync.Mutex
	// Limited is how many of the next sends the fake refuses as the real
	// API refuses a rate-limited one (429 with Retry-After, or the API's
	// own rate-limit error).
	Limited int
	// Media are the bytes of the media the fake serves, by its name or id.
	Media map[string][]byte
	// Sent are the accepted sends, in order.
	Sent []S
	n    int
}

// Lock guards the exported fields while the fake serves.
func (k *Kit[S]) Lock() { k.mu.Lock() }

// Unlock releases Lock.
func (k *Kit[S]) Unlock() { k.mu.Unlock() }

// MediaStore makes Media empty, ready for a test to fill; a fake's New
// calls it.
func (k *Kit[S]) MediaStore() { k.Media = map[string][]byte{} }

// LimitNext makes the next n sends rate limited (Limited = n); it takes
// the lock.
func (k *Kit[S]) LimitNext(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Limited = n
}

// RateLimited reports whether this send is one of the Limited ones, and
// counts it. Call it with the lock held.
func (k *Kit[S]) RateLimited() bool {
	if k.Limited > 0 {
		k.Limited--
		return true
	}
	return false
}

// Next counts a message id the fake gives out and returns the count
// (1, 2, …): the number the fake shapes its id from. Call it with the
// lock held.
func (k *Kit[S]) Next() int {
	k.n++
	return k.n
}

// Record accepts s, and returns the count of the fake's ids as Next does.
// Call it with the lock held.
func (k *Kit[S]) Record(s S) int {
	k.Sent = append(k.Sent, s)
	return k.Next()
}

// Collect returns, in order, what read finds in the accepted sends: the
// texts of the sends to one recipient, typically.
func (k *Kit[S]) Collect(read func(S) (string, bool)) []string {
	return Gather(k, read)
}

// Gather returns, in order, what read finds in k's accepted sends, of any
// type: Collect for what is not a string (a fake's own records of the sends
// to one recipient). It takes the lock.
func Gather[S, T any](k *Kit[S], read func(S) (T, bool)) []T {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []T
	for _, s := range k.Sent {
		if t, ok := read(s); ok {
			out = append(out, t)
		}
	}
	return out
}

// Last is the last accepted send (the zero S when there is none).
func (k *Kit[S]) Last() S {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s S
	if len(k.Sent) > 0 {
		s = k.Sent[len(k.Sent)-1]
	}
	return s
}

// ServeMedia answers the media called name with its bytes as mime, or 404
// when the fake has none by that name. It takes the lock.
func (k *Kit[S]) ServeMedia(w http.ResponseWriter, r *http.Request, name, mime string) {
	k.mu.Lock()
	b, ok := k.Media[name]
	k.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if mime != "" {
		w.Header().Set("Content-Type", mime)
	}
	w.Write(b)
}

// Set is a set of the given keys: a fake's recipients, typically.
func Set[K comparable](keys ...K) map[K]bool {
	m := make(map[K]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// JSON answers status with v as JSON.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// HeaderIs reports whether r's header key is want, compared in constant
// time; an empty want matches nothing.
func HeaderIs(r *http.Request, key, want string) bool {
	got := r.Header.Get(key)
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Bearer reports whether r carries "Authorization: Bearer <token>".
func Bearer(r *http.Request, token string) bool {
	return HeaderIs(r, "Authorization", "Bearer "+token)
}

// WaitFor polls cond until it holds, failing t after a generous deadline
// (30 s, for a loaded machine under -race): a test waits for a condition,
// never for a fixed time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !waitfor.True(2*time.Minute, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Log is a log sink the channel's goroutines write while a test reads it.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
