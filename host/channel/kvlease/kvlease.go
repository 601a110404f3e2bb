// Package kvlease holds a named lease in a durability.Kv: at most one holder
// at a time among the processes that share the Kv, each hold with a fencing
// token greater than every earlier hold's. The host elects the leader of a
// channel's session (session = "leader", a WhatsApp Web device) with one
// (Lead): a second process waits until the lease is released or expires.
//
// The record is {"owner","token","until"} (until in Unix milliseconds, by the
// holder's clock), changed only by compare-and-set on the key's version. A
// holder renews it every third of its length and counts itself the holder
// only until three quarters of the length after its last successful write;
// Hold ends the held context at that point by a timer, and bounds each
// renewal's write by it, so a holder that cannot renew (a lost or hanging
// database) stops before another can take over, as long as clocks differ by
// less than the remaining quarter. A frozen process (SIGSTOP, a long GC
// pause) runs no timer: it learns of the loss only when it thaws, and what
// it guards must check Held (the fencing token) before acting.
//
// kvlease is not under host/channel/internal because the host (its leader
// election and status) imports it beside the WhatsApp Web channel. It
// imports the standard library and durability.
package kvlease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
)

// ErrLost is returned by Renew when another holder took the lease, or it
// expired before it could be renewed.
var ErrLost = errors.New("lease lost")

// Record is a lease as the Kv keeps it: its holder (empty once released),
// the fencing token of the last hold, and when the hold expires (Unix
// milliseconds, by the holder's clock).
type Record struct {
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	Until int64  `json:"until"`
}

// Read returns the lease at key in kv; ok is false when it was never taken.
func Read(ctx context.Context, kv durability.Kv, key string) (r Record, ok bool, err error) {
	r, v, err := New(kv, key, "-", 0).read(ctx)
	return r, v != 0, err
}

// Lease is one process's handle on a named lease. Its methods are safe for
// concurrent use.
type Lease struct {
	kv    durability.Kv
	key   string
	owner string
	ttl   time.Duration

	mu      sync.Mutex
	version int64     // the record's version while held, else 0
	token   int64     // the fencing token of the hold
	valid   time.Time // held until then, by this process's clock
}

// New returns a handle on the lease at key, held ttl at a time, by owner
// ("" makes one from the host name, the process id and random bits).
func New(kv durability.Kv, key, owner string, ttl time.Duration) *Lease {
	if owner == "" {
		owner = Owner()
	}
	return &Lease{kv: kv, key: key, owner: owner, ttl: max(ttl, 20*time.Millisecond)}
}

// Owner returns a name for this process: host/pid/random.
func Owner() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Name is the owner this handle holds the lease as.
func (l *Lease) Name() string { return l.owner }

func (l *Lease) read(ctx context.Context) (Record, int64, error) {
	b, v, err := l.kv.Get(ctx, l.key)
	if err != nil || v == 0 {
		return Record{}, v, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, v, fmt.Errorf("lease %s: unreadable record: %w", l.key, err)
	}
	return r, v, nil
}

// write replaces the record at version v with r.
func (l *Lease) write(ctx context.Context, v int64, r Record) error {
	b, _ := json.Marshal(r)
	return l.kv.Commit(ctx, []durability.Write{{Key: l.key, Version: v, Next: v + 1, Value: b}})
}

// TryAcquire takes the lease when it is free, expired or this handle's
// already. When another holds it, ok is false and holder names it.
func (l *Lease) TryAcquire(ctx context.Context) (ok bool, holder string, err error) {
	r, v, err := l.read(ctx)
	if err != nil {
		return false, "", err
	}
	now := time.Now()
	l.mu.Lock()
	mine := v != 0 && v == l.version && r.Owner == l.owner && r.Token == l.token
	l.mu.Unlock()
	if v != 0 && !mine && r.Until > now.UnixMilli() && r.Owner != "" {
		return false, r.Owner, nil
	}
	token := r.Token
	if !mine {
		token++ // a new hold: its token is greater than every earlier one
	}
	next := Record{Owner: l.owner, Token: token, Until: now.Add(l.ttl).UnixMilli()}
	if err := l.write(ctx, v, next); err != nil {
		if errors.Is(err, durability.ErrConflict) {
			return false, "another process (it took the lease just now)", nil
		}
		return false, "", err
	}
	l.mu.Lock()
	l.version, l.token, l.valid = v+1, token, now.Add(l.ttl-l.ttl/4)
	l.mu.Unlock()
	return true, "", nil
}

// Acquire waits until it holds the lease, trying every third of its length;
// waiting is called with the holder's name whenever it changes.
func (l *Lease) Acquire(ctx context.Context, waiting func(holder string)) error {
	last := ""
	for {
		ok, holder, err := l.TryAcquire(ctx)
		if ok {
			return nil
		}
		if err != nil {
			holder = "unknown (" + err.Error() + ")"
		}
		if holder != last && waiting != nil {
			waiting(holder)
		}
		last = holder
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.ttl / 3):
		}
	}
}

// Renew extends the hold by the lease's length. ErrLost means another holder
// took it, or it expired by this process's clock: stop what it guards. The
// write must finish while the hold is still valid (three quarters of the
// lease after the last successful write): its context ends then.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	v, token, valid := l.version, l.token, l.valid
	l.mu.Unlock()
	if v == 0 || time.Now().After(valid) {
		return ErrLost
	}
	wctx, cancel := context.WithDeadline(ctx, valid)
	defer cancel()
	now := time.Now()
	err := l.write(wctx, v, Record{Owner: l.owner, Token: token, Until: now.Add(l.ttl).UnixMilli()})
	if errors.Is(err, durability.ErrConflict) {
		l.drop()
		return ErrLost
	}
	if err != nil {
		return fmt.Errorf("renewing lease %s: %w", l.key, err)
	}
	l.mu.Lock()
	l.version, l.valid = v+1, now.Add(l.ttl-l.ttl/4)
	l.mu.Unlock()
	return nil
}

func (l *Lease) drop() {
	l.mu.Lock()
	l.version, l.valid = 0, time.Time{}
	l.mu.Unlock()
}

// Release gives the lease up (its record keeps the token, so the next
// hold's is greater).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	v, token := l.version, l.token
	l.mu.Unlock()
	if v == 0 {
		return nil
	}
	l.drop()
	err := l.write(ctx, v, Record{Token: token})
	if errors.Is(err, durability.ErrConflict) {
		return nil // another holder has it already
	}
	return err
}

// Held reports whether this handle holds the lease now, by its own clock,
// and the hold's fencing token.
func (l *Lease) Held() (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version != 0 && time.Now().Before(l.valid), l.token
}

// validUntil is when this handle stops counting itself the holder.
func (l *Lease) validUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}

// Lead holds the lease whenever it can and runs session while it holds it,
// until ctx ends: session's context ends when the hold is lost (see Hold),
// and the hold is released once session returned. A session that returns
// while the hold stands gives it up: Lead waits half a lease before it
// stands again, so another process can take it. waiting and lost are
// Hold's.
func (l *Lease) Lead(ctx context.Context, waiting func(holder string), lost func(error), session func(held context.Context)) {
	for ctx.Err() == nil {
		held, release, err := l.Hold(ctx, waiting, lost)
		if err != nil {
			return // ctx ended
		}
		session(held)
		early := held.Err() == nil
		release()
		if early {
			select {
			case <-ctx.Done():
			case <-time.After(l.ttl / 2):
			}
		}
	}
}

// Hold acquires the lease (see Acquire) and renews it every third of its
// length until ctx ends or it is lost: held ends then, and lost is called
// with why. It is lost when another holder took it, and also when three
// quarters of the lease passed since the last successful write (renewals
// failing, or a write hanging): a timer ends held at that point, before
// the record expires and another process can take it. release stops the
// renewals and gives the lease up; call it once the guarded work stopped.
func (l *Lease) Hold(ctx context.Context, waiting func(holder string), lost func(error)) (held context.Context, release func(), err error) {
	if err := l.Acquire(ctx, waiting); err != nil {
		return nil, nil, err
	}
	held, cancel := context.WithCancel(ctx)
	var once sync.Once
	end := func(err error) {
		once.Do(func() {
			if lost != nil && held.Err() == nil {
				lost(err)
			}
			cancel()
		})
	}
	expiry := time.AfterFunc(time.Until(l.validUntil()), func() {
		end(fmt.Errorf("%w: not renewed within three quarters of its length", ErrLost))
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		defer expiry.Stop()
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-held.Done():
				return
			case <-t.C:
			}
			err := l.Renew(held)
			switch {
			case err == nil:
				expiry.Reset(time.Until(l.validUntil()))
			case errors.Is(err, ErrLost):
				end(err)
				return
			case held.Err() == nil:
				if ok, _ := l.Held(); !ok {
					end(fmt.Errorf("%w: renewing failed until it expired: %w", ErrLost, err))
					return
				}
			}
		}
	}()
	release = func() {
		once.Do(cancel)
		cancel()
		<-done
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		l.Release(rctx)
	}
	return held, release, nil
}
