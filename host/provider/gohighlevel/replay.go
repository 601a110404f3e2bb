package gohighlevel

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
)

// Keep is how long a webhookId is remembered: three times the timestamp
// window, since a webhook signed earlier is refused by its timestamp.
const Keep = 3 * Window

// seen remembers the webhookIds of the accepted webhooks, each with its
// body's hash, in the backend's Kv under group (they survive a restart and
// are shared by replicas), or in memory when there is no Kv.
type seen struct {
	kv    durability.Kv
	group string

	mu  sync.Mutex
	mem map[string]seenID
}

type seenID struct {
	hash []byte
	at   time.Time
}

// check records id with the body's hash; fresh is false when id was seen
// before with another body. A redelivery (the same body) is fresh again.
func (s *seen) check(ctx context.Context, id string, hash []byte, now time.Time) (fresh bool, err error) {
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if old, ok := s.mem[id]; ok {
			return bytes.Equal(old.hash, hash), nil
		}
		s.mem[id] = seenID{hash: hash, at: now}
		return true, nil
	}
	at := now.UnixMilli()
	err = s.kv.Commit(ctx, []durability.Write{{Key: s.group + id, Version: 0, Value: hash, Group: s.group, Order: &at}})
	if !errors.Is(err, durability.ErrConflict) {
		return err == nil, err
	}
	old, _, err := s.kv.Get(ctx, s.group+id)
	if err != nil {
		return false, err
	}
	return bytes.Equal(old, hash), nil
}

// purge forgets the ids seen before before, in batches of 500.
func (s *seen) purge(ctx context.Context, before time.Time) (int, error) {
	if s.kv == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for id, e := range s.mem {
			if e.at.Before(before) {
				delete(s.mem, id)
				n++
			}
		}
		return n, nil
	}
	n := 0
	for {
		ids, err := s.kv.Range(ctx, s.group, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, before.UnixMilli()-1, 500)
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

// Run implements provider.Runner: every minute, the webhookIds older than
// Keep are forgotten.
func (p *Provider) Run(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := p.seen.purge(ctx, p.now().Add(-Keep)); err != nil && ctx.Err() == nil {
			p.log.Error("gohighlevel: forgetting old webhookIds failed", "provider", p.cfg.ID, "err", err)
		}
	}
}
