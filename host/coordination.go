package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/dispatch"
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
	// until is rec.Until, read by held from the turn's worker while the
	// heartbeat writes.
	until atomic.Int64
}

// held reports an error once the turn has expired by this process's clock:
// another replica may hold it now, so the record running under it makes no
// more sends and does not complete.
func (t *chatTurn) held() error {
	if u := t.until.Load(); time.Now().UnixMilli() >= u {
		return fmt.Errorf("%w: the chat's turn %s expired at %s by this process's clock", durability.ErrStaleLease, t.key, time.UnixMilli(u).Format(time.RFC3339Nano))
	}
	return nil
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
// turns are a group ordered by expiry, which botrun status lists. The next
// version is past the current one and, by this host's clock, past any
// version written before a release's delete (clocks of different hosts
// may disagree: what fences a late writer's effects is the record's token,
// not the turn's).
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
	t.until.Store(r.Until)
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

// waitingForTurn is the error of a record parked because its chat's turn
// was held elsewhere: the holder runs it next, without its backoff.
const waitingForTurn = "waiting for the chat's turn (coordination)"

// coordinatedTurn runs a claimed record under its chat's turn. The holder of
// a chat's turn runs the chat's unfinished records oldest first, this one
// among them. No worker ever waits for a turn: a record whose chat's turn
// another replica holds is parked (released, due again in one poll, its
// attempt refunded) for that holder, or the next sweep, to run.
func (b *Bot) coordinatedTurn(j dispatch.Job, rec *durability.InboxRecord) {
	ctx := b.baseCtx
	if b.isStopping() {
		b.park(ctx, rec, nowMs())
		return
	}
	t, _, err := b.coord.acquire(ctx, rec.Provider, rec.Chat)
	if err != nil {
		b.log.Warn("coordination: the chat's turn could not be taken; the record runs again shortly", "id", rec.ID, "err", err)
	}
	if t == nil {
		b.park(ctx, rec, nowMs()+b.policy.poll.Milliseconds())
		return
	}
	b.runChat(j, rec, t)
	if err := t.release(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("coordination: releasing the chat's turn failed; it expires by itself", "chat", rec.Chat, "err", err)
	}
}

// park releases a claimed record that cannot run now, due at due, with its
// attempt refunded.
func (b *Bot) park(ctx context.Context, rec *durability.InboxRecord, due int64) {
	err := b.inbox.Fail(ctx, rec.ID, rec.Token, waitingForTurn, durability.FailOptions{Now: nowMs(), RetryAt: due, Refund: true})
	if err != nil && !errors.Is(err, durability.ErrStaleLease) && ctx.Err() == nil {
		b.log.Warn("coordination: releasing a waiting record failed; it is reclaimed when its lease expires", "id", rec.ID, "err", err)
	}
}

// runChat runs, under the held turn t, the chat's unfinished records in
// order: the older ones, rec, and the newer ones that are free to claim
// (parked or not started), until the chat has none, or its oldest is held
// by a live replica or waits for its retry. rec, if it cannot run before
// that, is parked behind it.
func (b *Bot) runChat(j dispatch.Job, rec *durability.InboxRecord, t *chatTurn) {
	ctx := b.baseCtx
	hb := b.leases.heartbeat(b.coord.ttl, t.extend)
	defer hb.release()
	pending := true // rec has not run yet
	ran := map[string]bool{}
	for hb.ctx.Err() == nil {
		oldest, ok, err := b.coord.order.OldestUnfinished(ctx, rec.Provider, rec.Chat)
		if err != nil {
			b.log.Warn("coordination: reading the chat's order failed", "id", rec.ID, "err", err)
			break
		}
		if !ok && pending {
			// Not in the chat's order: finished or claimed again since
			// this job was queued (nothing to do), or admitted before
			// coordination was on (it runs in its place in this queue).
			if cur, err := b.inbox.Get(ctx, rec.ID); err == nil && !cur.State.Terminal() && cur.Token == rec.Token {
				b.runRecord(j, rec, t.held)
			}
			return
		}
		if !ok || ran[oldest.ID] {
			break // done, or a record that just ran failed: its retry waits
		}
		next, blocked := b.takeNext(ctx, rec, oldest, pending)
		if blocked != 0 {
			if pending {
				b.park(ctx, rec, blocked)
				pending = false
			}
			break
		}
		if next == nil {
			break
		}
		ran[next.ID] = true
		nj := dispatch.Job{ChatKey: j.ChatKey, ID: next.ID}
		if next.ID == rec.ID {
			nj, pending = j, false
		}
		b.runRecord(nj, next, t.held)
	}
	if pending {
		b.park(ctx, rec, nowMs()+b.policy.poll.Milliseconds())
	}
}

// takeNext decides what the turn's holder does with the chat's oldest
// unfinished record: run it (this job's own record, one of this process's
// claims, or one it claims now), or stop, blocked until the returned time
// (a live replica holds it, or it waits for its retry).
func (b *Bot) takeNext(ctx context.Context, rec *durability.InboxRecord, oldest durability.InboxRecord, pending bool) (*durability.InboxRecord, int64) {
	now := nowMs()
	poll := now + b.policy.poll.Milliseconds()
	switch {
	case oldest.ID == rec.ID && pending:
		if oldest.State != durability.InboxProcessing || oldest.Token != rec.Token {
			return nil, 0 // claimed again elsewhere: no longer this job's
		}
		return rec, 0
	case oldest.State == durability.InboxProcessing && oldest.LeaseUntil > now:
		if oldest.Owner == b.policy.instanceID && oldest.LeasedAt >= b.boot.UnixMilli() {
			return &oldest, 0 // this process's claim, queued: run it here
		}
		return nil, poll // a live replica holds it; it parks it when it finds the turn taken
	case oldest.State == durability.InboxFailed && oldest.RetryAt > now && oldest.Error != waitingForTurn:
		return nil, oldest.RetryAt // the chat waits for its retry
	}
	c, err := b.inbox.Claim(ctx, oldest.ID, b.leases.lease(b.policy.inboxLease))
	if err != nil {
		return nil, poll
	}
	return &c, 0
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
