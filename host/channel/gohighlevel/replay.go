package gohighlevel

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Keep is how long the webhookId of an accepted webhook is remembered:
// three times the timestamp window, since a webhook signed earlier is
// refused by its timestamp.
const Keep = 3 * Window

// RetryKeep is how long the webhookId of a webhook botrun answered 429 is
// remembered: GoHighLevel retries only a 429, the same payload (its old
// timestamp) six times at 10-minute intervals with jitter, and botrun
// accepts those retries past the window.
const RetryKeep = 2 * time.Hour

// verdict is what the webhookId store says of a webhook.
type verdict int

const (
	accept   verdict = iota
	stale            // outside the window, and not a retry botrun asked for
	replayed         // the webhookId was seen with another body
)

// seen remembers webhookIds, each with its body's hash and whether botrun
// asked for a retry, in the backend's Kv under group (they survive a restart
// and are shared by replicas), or in memory when there is no Kv. Each
// record's IndexOrder score is when it expires.
type seen struct {
	kv    durability.Kv
	group string

	mu  sync.Mutex
	mem map[string]seenID
}

type seenID struct {
	value   []byte // the body's SHA-256, then 'r' when a retry was asked for
	expires time.Time
}

// retried marks a record's value of a webhook botrun answered 429.
const retried = 'r'

// check decides on a webhook whose id and body's hash are id and hash:
// inWindow says its timestamp is within the window. A new id in the window
// is recorded (Keep) and accepted; a known id with the same body is
// accepted in the window (a redelivery) and outside it only when botrun
// asked for the retry; a known id with another body is replayed.
func (s *seen) check(ctx context.Context, id string, hash []byte, inWindow bool, now time.Time) (verdict, error) {
	if inWindow {
		created, err := s.create(ctx, id, hash, now.Add(Keep))
		if err != nil || created {
			return accept, err
		}
	}
	old, err := s.get(ctx, id)
	switch {
	case err != nil:
		return stale, err
	case old == nil:
		return stale, nil
	case len(old) < len(hash) || !bytes.Equal(old[:len(hash)], hash):
		return replayed, nil
	case inWindow || (len(old) == len(hash)+1 && old[len(hash)] == retried):
		return accept, nil
	}
	return stale, nil
}

// retry records that botrun answered the webhook 429: its retries are
// accepted until RetryKeep from now.
func (s *seen) retry(ctx context.Context, id string, hash []byte, now time.Time) error {
	value := append(append([]byte(nil), hash...), retried)
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.mem[id] = seenID{value: value, expires: now.Add(RetryKeep)}
		return nil
	}
	at := now.Add(RetryKeep).UnixMilli()
	return s.kv.Commit(ctx, []durability.Write{{Key: s.group + id, Version: durability.AnyVersion, Value: value, Group: s.group, Order: &at}})
}

// create records id with the body's hash unless it is known; created is
// false when it is.
func (s *seen) create(ctx context.Context, id string, hash []byte, expires time.Time) (created bool, err error) {
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.mem[id]; ok {
			return false, nil
		}
		s.mem[id] = seenID{value: hash, expires: expires}
		return true, nil
	}
	at := expires.UnixMilli()
	err = s.kv.Commit(ctx, []durability.Write{{Key: s.group + id, Version: 0, Value: hash, Group: s.group, Order: &at}})
	if errors.Is(err, durability.ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// get returns id's record, or nil.
func (s *seen) get(ctx context.Context, id string) ([]byte, error) {
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mem[id].value, nil
	}
	v, version, err := s.kv.Get(ctx, s.group+id)
	if err != nil || version == 0 {
		return nil, err
	}
	return v, nil
}

// purge forgets the ids that expired by now, in batches of 500.
func (s *seen) purge(ctx context.Context, now time.Time) (int, error) {
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for id, e := range s.mem {
			if !e.expires.After(now) {
				delete(s.mem, id)
				n++
			}
		}
		return n, nil
	}
	n := 0
	for {
		ids, err := s.kv.Range(ctx, s.group, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, now.UnixMilli(), 500)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		writes := make([]durability.Write, len(ids))
		for i, id := range ids {
			writes[i] = durability.Write{Key: id.Key, Version: durability.AnyVersion, Delete: true, Group: s.group}
		}
		if err := s.kv.Commit(ctx, writes); err != nil {
			return n, err
		}
		n += len(ids)
	}
}

// Run implements channel.Runner: every minute, the webhookIds that
// expired are forgotten.
func (p *Provider) Run(ctx context.Context) {
	httpkit.Every(ctx, time.Minute, func() {
		if _, err := p.seen.purge(ctx, p.horizon()); err != nil && ctx.Err() == nil {
			p.Log.Error("gohighlevel: forgetting expired webhookIds failed", "provider", p.cfg.ID, "err", err)
		}
	})
}
