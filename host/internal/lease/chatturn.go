package lease

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
	"github.com/botrun/botrun/host/internal/clock"
)

// ChatTurns are the chats' turns across the replicas that share the
// backend ([durability] coordination): a chat's turn is a lease with a
// fencing token in the backend's Kv, and the replica holding it runs the
// chat's unfinished records.
type ChatTurns struct {
	kv durability.Kv
	// prefix is "<scope>/turn/"; owner is this replica's instance id and
	// boot, "<instance id>#<boot>".
	prefix, owner, instance string
	ttl                     time.Duration
	clock                   clock.Clock
}

// NewChatTurns returns the chat turns of scope in kv, taken by instance
// (booted at boot) for ttl at a time.
func NewChatTurns(kv durability.Kv, scope, instance string, boot time.Time, ttl time.Duration, c clock.Clock) *ChatTurns {
	return &ChatTurns{kv: kv, prefix: scope + "/turn/", instance: instance,
		owner: fmt.Sprintf("%s#%d", instance, boot.UnixNano()), ttl: ttl, clock: c}
}

// TTL is the length of a turn's lease.
func (c *ChatTurns) TTL() time.Duration { return c.ttl }

// turnRecord is a chat turn as the Kv keeps it: its holder, fencing token
// (greater than the last holder's while the turn passes from holder to
// holder) and expiry (Unix milliseconds, by the holder's clock).
type turnRecord struct {
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	Until int64  `json:"until"`
}

// ChatTurn is a turn this replica holds.
type ChatTurn struct {
	c       *ChatTurns
	key     string
	version int64
	rec     turnRecord
	// until is rec.Until, read by Held from the turn's worker while the
	// heartbeat writes; deadline is the same on the monotonic clock (a
	// Clock.Elapsed reading).
	until    atomic.Int64
	deadline atomic.Int64
}

// Until is the turn's expiry (Unix ms) as of its last write.
func (t *ChatTurn) Until() int64 { return t.until.Load() }

// Held reports an error once the turn has expired by this process's clock:
// another replica may hold it now, so the record running under it makes no
// more sends and does not complete.
//
// The expiry is counted on the monotonic clock from each write (a step of
// the wall clock does not end a turn this process still holds).
func (t *ChatTurn) Held() error {
	if t.c.clock.Elapsed() >= time.Duration(t.deadline.Load()) {
		return fmt.Errorf("%w: the chat's turn %s (until %s) expired by this process's count", durability.ErrStaleLease, t.key, time.UnixMilli(t.until.Load()).Format(time.RFC3339Nano))
	}
	return nil
}

func (c *ChatTurns) key(channelID, chat string) string {
	return c.prefix + url.PathEscape(channelID) + "/" + url.PathEscape(chat)
}

// Acquire takes the chat's turn when it is free, expired, or held by an
// earlier boot of this instance (which is dead: instance ids are unique
// among live replicas). holder names the live holder when it is taken.
func (c *ChatTurns) Acquire(ctx context.Context, channelID, chat string) (t *ChatTurn, holder string, err error) {
	key := c.key(channelID, chat)
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
	now := c.clock.Now()
	earlierBoot := strings.HasPrefix(cur.Owner, c.instance+"#") && cur.Owner != c.owner
	if cur.Owner != "" && cur.Until > now.UnixMilli() && !earlierBoot {
		return nil, cur.Owner, nil
	}
	next := turnRecord{Owner: c.owner, Token: cur.Token + 1, Until: now.Add(c.ttl).UnixMilli()}
	t = &ChatTurn{c: c, key: key, version: v, rec: next}
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
func (t *ChatTurn) write(ctx context.Context, r turnRecord) error {
	b, _ := json.Marshal(r)
	sent, left := t.c.clock.Elapsed(), time.Duration(r.Until-t.c.clock.Now().UnixMilli())*time.Millisecond
	next := max(t.version+1, t.c.clock.Now().UnixNano())
	until := r.Until
	w := durability.Write{Key: t.key, Version: t.version, Next: next, Value: b, Group: t.c.prefix, Order: &until}
	if err := t.c.kv.Commit(ctx, []durability.Write{w}); err != nil {
		return err
	}
	t.version = next
	t.rec = r
	t.until.Store(r.Until)
	t.deadline.Store(int64(sent + left))
	return nil
}

// Extend keeps the turn until until; it answers durability.ErrStaleLease
// when another replica took it (this one was frozen past it).
func (t *ChatTurn) Extend(ctx context.Context, until int64) error {
	r := t.rec
	r.Until = until
	err := t.write(ctx, r)
	if errors.Is(err, durability.ErrConflict) {
		return fmt.Errorf("%w: the turn %s was taken by another replica", durability.ErrStaleLease, t.key)
	}
	return err
}

// Release gives the turn up: the key is deleted (a chat's turn costs no
// storage between messages), so the next holder's token starts again.
func (t *ChatTurn) Release(ctx context.Context) error {
	err := t.c.kv.Commit(ctx, []durability.Write{{Key: t.key, Version: t.version, Delete: true, Group: t.c.prefix}})
	if errors.Is(err, durability.ErrConflict) {
		return nil // taken by another already
	}
	return err
}

// statusTurnLimit bounds the chat turns a status reads.
const statusTurnLimit = 10000

// Holder is a held lease as a status shows it: its replica's instance id
// and its expiry (Unix ms).
type Holder struct {
	Owner string
	Until int64
}

// HeldTurns lists the chat turns held under group, each by its replica's
// instance id.
func HeldTurns(ctx context.Context, kv durability.Kv, group string) ([]Holder, error) {
	entries, err := kv.Range(ctx, group, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, math.MaxInt64, statusTurnLimit)
	if err != nil {
		return nil, err
	}
	var out []Holder
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
		out = append(out, Holder{owner, r.Until})
	}
	return out, nil
}
