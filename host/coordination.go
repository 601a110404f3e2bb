package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/botrun/botrun/durability"
)

// coordination serializes each chat's turns across the replicas that share
// the backend ([durability] coordination): a chat's turn is a lease with a
// fencing token in the backend's Kv, and the replica holding it runs the
// chat's unfinished records oldest first, whichever replica admitted them.
// Conversation state lives in the backend and lands with each completion,
// so the next message continues the conversation on whichever replica
// receives it.
type coordination struct {
	order durability.ChatOrder
	kv    durability.Kv
	// prefix is "<scope>/turn/"; owner is this replica's instance id and
	// boot, "<instance id>#<boot>".
	prefix, owner, instance string
	ttl                     time.Duration
}

// turnRecord is a chat turn as the Kv keeps it: its holder, fencing token
// (greater than the last holder's while the turn passes from holder to
// holder) and expiry (Unix milliseconds, by the holder's clock).
type turnRecord struct {
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	Until int64  `json:"until"`
}

// chatTurn is a turn this replica holds.
type chatTurn struct {
	c       *coordination
	key     string
	version int64
	rec     turnRecord
}

func newCoordination(order durability.ChatOrder, kv durability.Kv, scope, instance string, boot time.Time, ttl time.Duration) *coordination {
	return &coordination{order: order, kv: kv, prefix: scope + "/turn/", instance: instance,
		owner: fmt.Sprintf("%s#%d", instance, boot.UnixNano()), ttl: ttl}
}

func (c *coordination) key(providerID, chat string) string {
	return c.prefix + url.PathEscape(providerID) + "/" + url.PathEscape(chat)
}

// acquire takes the chat's turn when it is free, expired, or held by an
// earlier boot of this instance (which is dead: instance ids are unique
// among live replicas). holder names the live holder when it is taken.
func (c *coordination) acquire(ctx context.Context, providerID, chat string) (t *chatTurn, holder string, err error) {
	key := c.key(providerID, chat)
	b, v, err := c.kv.Get(ctx, key)
	if err != nil {
		return nil, "", fmt.Errorf("reading the turn of chat %q: %w", chat, err)
	}
	var cur turnRecord
	if v != 0 {
		if err := json.Unmarshal(b, &cur); err != nil {
			return nil, "", fmt.Errorf("the turn of chat %q is unreadable (delete key %s): %w", chat, key, err)
		}
	}
	now := time.Now()
	earlierBoot := strings.HasPrefix(cur.Owner, c.instance+"#") && cur.Owner != c.owner
	if cur.Owner != "" && cur.Until > now.UnixMilli() && !earlierBoot {
		return nil, cur.Owner, nil
	}
	next := turnRecord{Owner: c.owner, Token: cur.Token + 1, Until: now.Add(c.ttl).UnixMilli()}
	t = &chatTurn{c: c, key: key, version: v, rec: next}
	if err := t.write(ctx, next); err != nil {
		if errors.Is(err, durability.ErrConflict) {
			return nil, "another replica (it took the turn just now)", nil
		}
		return nil, "", fmt.Errorf("taking the turn of chat %q: %w", chat, err)
	}
	return t, "", nil
}

// write replaces the turn at the version this handle knows with r. The
// turns are a group ordered by expiry, which botrun status lists. A version
// is past every earlier one of the key, also across a release's delete, so
// a holder frozen past its turn can never match a later holder's version.
func (t *chatTurn) write(ctx context.Context, r turnRecord) error {
	b, _ := json.Marshal(r)
	next := max(t.version+1, time.Now().UnixNano())
	until := r.Until
	w := durability.Write{Key: t.key, Version: t.version, Next: next, Value: b, Group: t.c.prefix, Order: &until}
	if err := t.c.kv.Commit(ctx, []durability.Write{w}); err != nil {
		return err
	}
	t.version = next
	t.rec = r
	return nil
}

// extend keeps the turn until until; it answers durability.ErrStaleLease
// when another replica took it (this one was frozen past it).
func (t *chatTurn) extend(ctx context.Context, until int64) error {
	r := t.rec
	r.Until = until
	err := t.write(ctx, r)
	if errors.Is(err, durability.ErrConflict) {
		return fmt.Errorf("%w: the turn %s was taken by another replica", durability.ErrStaleLease, t.key)
	}
	return err
}

// release gives the turn up: the key is deleted (a chat's turn costs no
// storage between messages), so the next holder's token starts again.
func (t *chatTurn) release(ctx context.Context) error {
	err := t.c.kv.Commit(ctx, []durability.Write{{Key: t.key, Version: t.version, Delete: true, Group: t.c.prefix}})
	if errors.Is(err, durability.ErrConflict) {
		return nil // taken by another already
	}
	return err
}

// coordinatedTurn runs a claimed record under its chat's turn. Holding the
// turn, it runs the chat's older unfinished records first (claiming them,
// or taking over this process's own), then rec. While another replica holds
// the turn, or holds an older record of the chat, it waits, keeping rec's
// lease, and tries again.
func (b *Bot) coordinatedTurn(j job, rec *durability.InboxRecord) {
	ctx := b.baseCtx
	cur, err := b.inbox.Get(ctx, rec.ID)
	if err == nil && (cur.State.Terminal() || cur.Token != rec.Token) {
		return // finished or claimed again since this job was queued
	}
	wait := 5 * time.Millisecond
	for {
		if b.isStopping() {
			return // the lease expires and the record is reclaimed
		}
		t, holder, err := b.coord.acquire(ctx, rec.Provider, rec.Chat)
		switch {
		case err != nil:
			b.log.Warn("coordination: the chat's turn could not be read; trying again", "id", rec.ID, "err", err)
		case t != nil:
			ran := b.runChat(j, rec, t)
			if err := t.release(ctx); err != nil && ctx.Err() == nil {
				b.log.Warn("coordination: releasing the chat's turn failed; it expires by itself", "chat", rec.Chat, "err", err)
			}
			if ran {
				return
			}
		default:
			_ = holder // a live replica runs the chat now
		}
		if !b.keepLease(ctx, rec) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*3/2, 100*time.Millisecond)
	}
}

// runChat runs, under the held turn t, the chat's unfinished records older
// than rec, then rec. It reports false when an older record is held by a
// live owner elsewhere: the caller releases the turn and waits.
func (b *Bot) runChat(j job, rec *durability.InboxRecord, t *chatTurn) bool {
	ctx := b.baseCtx
	hb := b.leases.heartbeat(b.coord.ttl, t.extend)
	defer hb.release()
	for {
		oldest, ok, err := b.coord.order.OldestUnfinished(ctx, rec.Provider, rec.Chat)
		if err != nil {
			b.log.Warn("coordination: reading the chat's order failed; trying again", "id", rec.ID, "err", err)
			return false
		}
		if !ok || oldest.ID == rec.ID {
			b.runRecord(j, rec)
			return true
		}
		older := oldest
		mine := older.State == durability.InboxProcessing && older.Owner == b.policy.instanceID &&
			older.LeasedAt >= b.boot.UnixMilli() && older.LeaseUntil > nowMs()
		if !mine {
			older, err = b.inbox.Claim(ctx, oldest.ID, b.leases.lease(b.policy.inboxLease))
			if err != nil {
				return false // a live replica holds it; it runs it under this turn next
			}
		}
		b.runRecord(job{chatKey: j.chatKey, id: older.ID}, &older)
	}
}

// keepLease extends the lease of a record waiting for its chat's turn once a
// third of it is gone; false when another owner claimed it meanwhile.
func (b *Bot) keepLease(ctx context.Context, rec *durability.InboxRecord) bool {
	lease := b.policy.inboxLease
	if time.Until(time.UnixMilli(rec.LeaseUntil)) > 2*lease/3 {
		return true
	}
	until := time.Now().Add(lease).UnixMilli()
	switch err := b.inbox.Extend(ctx, rec.ID, rec.Token, until); {
	case err == nil:
		rec.LeaseUntil = until
		return true
	case errors.Is(err, durability.ErrStaleLease), errors.Is(err, durability.ErrNotFound):
		return false // another owner runs it (or it finished)
	default:
		b.log.Warn("coordination: extending a waiting record's lease failed", "id", rec.ID, "err", err)
		return true
	}
}

// statusTurnLimit bounds the chat turns a status reads.
const statusTurnLimit = 10000

// heldTurns lists the chat turns held under group, each by its replica's
// instance id.
func heldTurns(ctx context.Context, kv durability.Kv, group string) ([]heldLease, error) {
	entries, err := kv.Range(ctx, group, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, math.MaxInt64, statusTurnLimit)
	if err != nil {
		return nil, err
	}
	var out []heldLease
	for _, e := range entries {
		b, v, err := kv.Get(ctx, e.Key)
		if err != nil {
			return nil, err
		}
		var r turnRecord
		if v == 0 || json.Unmarshal(b, &r) != nil || r.Owner == "" {
			continue
		}
		owner, _, _ := strings.Cut(r.Owner, "#")
		out = append(out, heldLease{owner, r.Until})
	}
	return out, nil
}
