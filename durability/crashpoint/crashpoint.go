// Package crashpoint wraps a durability backend so that a bot "dies" at a
// chosen journal write: the host's crash tests and "botrun test --crash" use
// it to run a conversation with a crash at every write and check that
// nothing is lost or doubled after the restart.
package crashpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/botrun/botrun/durability"
)

// ErrCrashed is what every journal call returns once a Backend has crashed:
// the process it stands for is dead.
var ErrCrashed = errors.New("crashpoint: crashed")

// Backend wraps a backend so that a bot "dies" at a chosen journal write:
// CrashBefore(op) fails that call without running it, CrashAfter(op) runs it
// and then fails, and CrashAtWrite(n, after) does the same at the n-th counted
// write. From then on every call fails with ErrCrashed, so the abandoned bot's
// goroutines can change nothing. Close does not close the wrapped backend: a
// new bot opens it after the crash.
//
// Ops are named "inbox.put", "inbox.claim", "inbox.complete", "outbox.markSent"
// and so on (the SPI's method names). Counted writes are the writes a message
// causes; lease extensions and claimDue sweeps are not counted, since their
// number depends on timing.
type Backend struct {
	inner durability.Backend

	mu      sync.Mutex
	op      string
	nth     int
	after   bool
	writes  int
	crashed atomic.Bool
	log     []string
}

// New wraps b.
func New(b durability.Backend) *Backend { return &Backend{inner: b} }

// CrashBefore crashes at the first call of op, before it runs.
func (c *Backend) CrashBefore(op string) { c.set(op, 0, false) }

// CrashAfter crashes at the first call of op, after it ran.
func (c *Backend) CrashAfter(op string) { c.set(op, 0, true) }

// CrashAtWrite crashes at the n-th counted write (1-based), before or after it.
func (c *Backend) CrashAtWrite(n int, after bool) { c.set("", n, after) }

func (c *Backend) set(op string, n int, after bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.op, c.nth, c.after = op, n, after
}

// Crashed reports whether the crash happened.
func (c *Backend) Crashed() bool { return c.crashed.Load() }

// Writes returns the counted writes so far and their ops, in order.
func (c *Backend) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

var uncounted = map[string]bool{
	"state.putIfAbsent": true, "kv.commit": true, "inbox.extend": true, "outbox.extend": true, "inbox.claimDue": true, "outbox.claimDue": true,
}

var reads = map[string]bool{
	"inbox.get": true, "inbox.list": true, "outbox.get": true, "outbox.list": true, "state.get": true,
	"kv.get": true, "kv.range": true,
}

// Call runs fn as the operation op under the crash plan; a crashable provider
// wraps its sends with it ("provider.send").
func (c *Backend) Call(op string, fn func() error) error {
	if c.crashed.Load() {
		return fmt.Errorf("%w (%s)", ErrCrashed, op)
	}
	hit := false
	c.mu.Lock()
	if !reads[op] && !uncounted[op] {
		c.writes++
		c.log = append(c.log, op)
		hit = c.nth > 0 && c.writes == c.nth
	}
	if c.op == op {
		hit, c.op = true, ""
	}
	after := c.after
	c.mu.Unlock()
	if !hit {
		return fn()
	}
	if after {
		if err := fn(); err != nil {
			return err
		}
	}
	c.crashed.Store(true)
	return fmt.Errorf("%w at %s", ErrCrashed, op)
}

// Open implements durability.Backend.
func (c *Backend) Open(ctx context.Context, scope durability.Scope) (durability.Journals, error) {
	j, err := c.inner.Open(ctx, scope)
	if err != nil {
		return j, err
	}
	return durability.Journals{
		Inbox:  &crashInbox{c: c, j: j.Inbox},
		Outbox: &crashOutbox{c: c, j: j.Outbox},
		State:  &crashState{c: c, s: j.State},
	}, nil
}

// Close implements durability.Backend; the wrapped backend stays open.
func (c *Backend) Close() error { return nil }

// Kv returns the wrapped backend's Kv (nil when it keeps none) under the
// crash plan: its commits are the op "kv.commit" (not counted: the leader's
// lease and coordination commit on timers), its reads run unless crashed.
func (c *Backend) Kv() durability.Kv {
	kb, ok := c.inner.(interface{ Kv() durability.Kv })
	if !ok || kb.Kv() == nil {
		return nil
	}
	return &crashKv{c: c, kv: kb.Kv()}
}

type crashKv struct {
	c  *Backend
	kv durability.Kv
}

func (w *crashKv) Get(ctx context.Context, key string) ([]byte, int64, error) {
	var version int64
	v, err := call1(w.c, "kv.get", func() ([]byte, error) {
		var v []byte
		var err error
		v, version, err = w.kv.Get(ctx, key)
		return v, err
	})
	return v, version, err
}

func (w *crashKv) Commit(ctx context.Context, writes []durability.Write) error {
	return w.c.Call("kv.commit", func() error { return w.kv.Commit(ctx, writes) })
}

func (w *crashKv) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	return call1(w.c, "kv.range", func() ([]durability.IndexEntry, error) { return w.kv.Range(ctx, group, ix, after, max, limit) })
}

// Close leaves the wrapped Kv open, as Backend.Close does the backend.
func (w *crashKv) Close() error { return nil }

// call1 runs a call returning one value under the crash plan.
func call1[T any](c *Backend, op string, fn func() (T, error)) (T, error) {
	var v T
	err := c.Call(op, func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

type crashInbox struct {
	c *Backend
	j durability.InboxJournal
}

func (w *crashInbox) Put(ctx context.Context, rec durability.InboxPut, now int64, l *durability.Lease) (durability.PutStatus, durability.InboxRecord, error) {
	var r durability.InboxRecord
	st, err := call1(w.c, "inbox.put", func() (durability.PutStatus, error) {
		var st durability.PutStatus
		var err error
		st, r, err = w.j.Put(ctx, rec, now, l)
		return st, err
	})
	return st, r, err
}

func (w *crashInbox) Claim(ctx context.Context, id string, l durability.Lease) (durability.InboxRecord, error) {
	return call1(w.c, "inbox.claim", func() (durability.InboxRecord, error) { return w.j.Claim(ctx, id, l) })
}

func (w *crashInbox) Extend(ctx context.Context, id string, token, until int64) error {
	return w.c.Call("inbox.extend", func() error { return w.j.Extend(ctx, id, token, until) })
}

func (w *crashInbox) Complete(ctx context.Context, id string, token int64, c durability.Completion) error {
	return w.c.Call("inbox.complete", func() error { return w.j.Complete(ctx, id, token, c) })
}

// CompleteWithSent runs as "inbox.complete" when the wrapped journal offers
// it.
func (w *crashInbox) CompleteWithSent(ctx context.Context, id string, token int64, c durability.Completion, sent []durability.SentMark) error {
	cs, ok := w.j.(durability.CompleteSender)
	if !ok {
		return errors.New("crashpoint: the wrapped inbox cannot complete with sends")
	}
	return w.c.Call("inbox.complete", func() error { return cs.CompleteWithSent(ctx, id, token, c, sent) })
}

func (w *crashInbox) Fail(ctx context.Context, id string, token int64, msg string, o durability.FailOptions) error {
	return w.c.Call("inbox.fail", func() error { return w.j.Fail(ctx, id, token, msg, o) })
}

func (w *crashInbox) ClaimDue(ctx context.Context, o durability.ClaimOptions) ([]durability.InboxRecord, error) {
	return call1(w.c, "inbox.claimDue", func() ([]durability.InboxRecord, error) { return w.j.ClaimDue(ctx, o) })
}

func (w *crashInbox) Get(ctx context.Context, id string) (durability.InboxRecord, error) {
	return call1(w.c, "inbox.get", func() (durability.InboxRecord, error) { return w.j.Get(ctx, id) })
}

func (w *crashInbox) List(ctx context.Context, f durability.ListFilter) ([]durability.InboxRecord, error) {
	return call1(w.c, "inbox.list", func() ([]durability.InboxRecord, error) { return w.j.List(ctx, f) })
}

func (w *crashInbox) Replay(ctx context.Context, id string, now int64) error {
	return w.c.Call("inbox.replay", func() error { return w.j.Replay(ctx, id, now) })
}

func (w *crashInbox) Purge(ctx context.Context, before int64) (int, error) {
	return call1(w.c, "inbox.purge", func() (int, error) { return w.j.Purge(ctx, before) })
}

func (w *crashInbox) Discard(ctx context.Context, id string) error {
	return w.c.Call("inbox.discard", func() error { return w.j.Discard(ctx, id) })
}

func (w *crashInbox) PurgeDead(ctx context.Context, before int64) ([]string, error) {
	return call1(w.c, "inbox.purgeDead", func() ([]string, error) { return w.j.PurgeDead(ctx, before) })
}

type crashOutbox struct {
	c *Backend
	j durability.OutboxJournal
}

func (w *crashOutbox) Put(ctx context.Context, rec durability.OutboxPut, now int64, l *durability.Lease) (durability.PutStatus, durability.OutboxRecord, error) {
	var r durability.OutboxRecord
	st, err := call1(w.c, "outbox.put", func() (durability.PutStatus, error) {
		var st durability.PutStatus
		var err error
		st, r, err = w.j.Put(ctx, rec, now, l)
		return st, err
	})
	return st, r, err
}

func (w *crashOutbox) Begin(ctx context.Context, key string, l durability.Lease) (durability.OutboxRecord, error) {
	return call1(w.c, "outbox.begin", func() (durability.OutboxRecord, error) { return w.j.Begin(ctx, key, l) })
}

func (w *crashOutbox) MarkSent(ctx context.Context, key string, token int64, ref string, now int64) error {
	return w.c.Call("outbox.markSent", func() error { return w.j.MarkSent(ctx, key, token, ref, now) })
}

func (w *crashOutbox) Extend(ctx context.Context, key string, token, until int64) error {
	return w.c.Call("outbox.extend", func() error { return w.j.Extend(ctx, key, token, until) })
}

func (w *crashOutbox) MarkFailed(ctx context.Context, key string, token int64, msg string, o durability.FailOptions) error {
	return w.c.Call("outbox.markFailed", func() error { return w.j.MarkFailed(ctx, key, token, msg, o) })
}

func (w *crashOutbox) ClaimDue(ctx context.Context, o durability.ClaimOptions) ([]durability.ClaimedSend, error) {
	return call1(w.c, "outbox.claimDue", func() ([]durability.ClaimedSend, error) { return w.j.ClaimDue(ctx, o) })
}

func (w *crashOutbox) ResolveAmbiguous(ctx context.Context, key string, token int64, to durability.OutboxState, now int64) error {
	return w.c.Call("outbox.resolveAmbiguous", func() error { return w.j.ResolveAmbiguous(ctx, key, token, to, now) })
}

func (w *crashOutbox) Get(ctx context.Context, key string) (durability.OutboxRecord, error) {
	return call1(w.c, "outbox.get", func() (durability.OutboxRecord, error) { return w.j.Get(ctx, key) })
}

func (w *crashOutbox) List(ctx context.Context, f durability.ListFilter) ([]durability.OutboxRecord, error) {
	return call1(w.c, "outbox.list", func() ([]durability.OutboxRecord, error) { return w.j.List(ctx, f) })
}

func (w *crashOutbox) Retry(ctx context.Context, key string, now int64) error {
	return w.c.Call("outbox.retry", func() error { return w.j.Retry(ctx, key, now) })
}

func (w *crashOutbox) Discard(ctx context.Context, key string) error {
	return w.c.Call("outbox.discard", func() error { return w.j.Discard(ctx, key) })
}

func (w *crashOutbox) Purge(ctx context.Context, before int64) (int, error) {
	return call1(w.c, "outbox.purge", func() (int, error) { return w.j.Purge(ctx, before) })
}

func (w *crashOutbox) PurgeDead(ctx context.Context, before int64) ([]string, error) {
	return call1(w.c, "outbox.purgeDead", func() ([]string, error) { return w.j.PurgeDead(ctx, before) })
}

type crashState struct {
	c *Backend
	s durability.StateStore
}

func (w *crashState) Get(ctx context.Context, key string) ([]byte, bool, error) {
	var ok bool
	v, err := call1(w.c, "state.get", func() ([]byte, error) {
		var v []byte
		var err error
		v, ok, err = w.s.Get(ctx, key)
		return v, err
	})
	return v, ok, err
}

// PutIfAbsent implements durability.StateCreator when the wrapped store does.
func (w *crashState) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	sc, ok := w.s.(durability.StateCreator)
	if !ok {
		return nil, false, fmt.Errorf("crashpoint: the wrapped state store (%T) has no PutIfAbsent", w.s)
	}
	var created bool
	v, err := call1(w.c, "state.putIfAbsent", func() ([]byte, error) {
		var v []byte
		var err error
		v, created, err = sc.PutIfAbsent(ctx, key, value)
		return v, err
	})
	return v, created, err
}
