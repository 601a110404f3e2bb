// Package redis is the durability backend for several replicas on one Redis
// (go-redis v9). A scope's inbox journal, conversation state and webchat
// transcript live under {prefix}:{durable:inbox:<scope>}, its outbox under
// {prefix}:{durable:outbox:<scope>}: the braces keep each in one cluster
// slot. Records are fields of a hash (version and value in one field, so a
// read is atomic); the two ordered indexes are sorted sets. Every commit is
// one Lua script that checks every expected version and applies the writes
// atomically; concurrent commits of one process are pipelined into one round
// trip (group commit).
//
// Crash survival needs Redis persistence: appendonly yes. With appendfsync
// everysec a power loss can lose the last second of writes; appendfsync
// always loses nothing and costs an fsync per write on the server.
package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/groupcommit"
)

// Options configure a Store: URL (the store opens and closes its client) or
// Client (injected; the caller closes it).
type Options struct {
	URL    string
	Client goredis.UniversalClient
	// Prefix starts every key (default "botrun").
	Prefix string
	// MaxBatch caps the commits one pipeline carries (default 256).
	MaxBatch int
}

// Store is a durability.Kv in Redis.
type Store struct {
	c         goredis.UniversalClient
	ownClient bool
	prefix    string
	commitSHA string

	gc     *groupcommit.Committer[*commit]
	closed atomic.Bool
}

type commit struct {
	keys []string
	args []any
	err  chan error
}

// Backend is the journals over a Store.
type Backend struct {
	*durability.KvDurability
	*Store
}

// Close closes the store.
func (b *Backend) Close() error { return b.Store.Close() }

// Open connects and loads the commit script.
func Open(ctx context.Context, o Options) (*Backend, error) {
	s, err := OpenStore(ctx, o)
	if err != nil {
		return nil, err
	}
	return &Backend{KvDurability: durability.NewKvDurability(s), Store: s}, nil
}

// commitScript: KEYS are (value hash, due zset, order zset) per write; ARGV
// are (key, expected version, next version, value, delete, due, order) per
// write. It returns 0, writing nothing, if any version does not match.
const commitScript = `
local n = #ARGV / 7
for i = 0, n - 1 do
  local ver = ARGV[i*7+2]
  if ver ~= "-1" then
    local cur = redis.call('HGET', KEYS[i*3+1], ARGV[i*7+1])
    local curVer = "0"
    if cur then curVer = string.sub(cur, 1, string.find(cur, "\n", 1, true) - 1) end
    if curVer ~= ver then return 0 end
  end
end
for i = 0, n - 1 do
  local key = ARGV[i*7+1]
  local vh, dz, oz = KEYS[i*3+1], KEYS[i*3+2], KEYS[i*3+3]
  if ARGV[i*7+5] == "1" then
    redis.call('HDEL', vh, key)
    redis.call('ZREM', dz, key)
    redis.call('ZREM', oz, key)
  else
    redis.call('HSET', vh, key, ARGV[i*7+3] .. "\n" .. ARGV[i*7+4])
    if ARGV[i*7+6] == "" then redis.call('ZREM', dz, key) else redis.call('ZADD', dz, ARGV[i*7+6], key) end
    if ARGV[i*7+7] == "" then redis.call('ZREM', oz, key) else redis.call('ZADD', oz, ARGV[i*7+7], key) end
  end
end
return 1
`

// OpenStore opens the Kv alone.
func OpenStore(ctx context.Context, o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = "botrun"
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	s := &Store{c: o.Client, prefix: o.Prefix}
	if s.c == nil {
		if o.URL == "" {
			return nil, errors.New("redis: set durability.url (or inject a client)")
		}
		opts, err := goredis.ParseURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("redis: url: %w", err)
		}
		s.c, s.ownClient = goredis.NewClient(opts), true
	}
	if err := s.load(ctx); err != nil {
		if s.ownClient {
			s.c.Close()
		}
		return nil, err
	}
	s.gc = groupcommit.New(o.MaxBatch, s.run)
	return s, nil
}

func (s *Store) load(ctx context.Context) error {
	sha, err := s.c.ScriptLoad(ctx, commitScript).Result()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	s.commitSHA = sha
	return nil
}

// base maps a Kv key ("<scope>/<kind>/…") to the Redis key its scope and
// journal live under.
func (s *Store) base(key string) string {
	scope, rest, ok := strings.Cut(key, "/")
	if !ok {
		return s.prefix + ":{durable:kv}"
	}
	kind, _, _ := strings.Cut(rest, "/")
	journal := "inbox" // the inbox, the state committed with it, the transcript
	if kind == "out" {
		journal = "outbox"
	}
	return s.prefix + ":{durable:" + journal + ":" + scope + "}"
}

func (s *Store) keys(key, group string) (hash, due, ord string) {
	b := s.base(key)
	return b + ":v", b + ":due:" + group, b + ":ord:" + group
}

// Get implements durability.Kv.
func (s *Store) Get(ctx context.Context, key string) ([]byte, int64, error) {
	h, _, _ := s.keys(key, "")
	b, err := s.c.HGet(ctx, h, key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("redis: get: %w", err)
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, 0, fmt.Errorf("redis: get %s: stored value has no version", key)
	}
	v, err := strconv.ParseInt(string(b[:i]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("redis: get %s: bad version: %w", key, err)
	}
	return b[i+1:], v, nil
}

// Range implements durability.Kv.
func (s *Store) Range(ctx context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	_, dz, oz := s.keys(group, group)
	z := dz
	if ix == durability.IndexOrder {
		z = oz
	} else if ix != durability.IndexDue {
		return nil, fmt.Errorf("redis: unknown index %d", ix)
	}
	if limit <= 0 {
		limit = math.MaxInt32
	}
	maxS := strconv.FormatInt(max, 10)
	var out []durability.IndexEntry
	if after.Score != math.MinInt64 {
		// Members tied with the cursor's score come after it by key.
		ties, err := s.c.ZRangeArgsWithScores(ctx, goredis.ZRangeArgs{Key: z, ByScore: true,
			Start: strconv.FormatInt(after.Score, 10), Stop: strconv.FormatInt(after.Score, 10)}).Result()
		if err != nil {
			return nil, fmt.Errorf("redis: range: %w", err)
		}
		for _, t := range ties {
			if m := t.Member.(string); m > after.Key && after.Score <= max && len(out) < limit {
				out = append(out, durability.IndexEntry{Key: m, Score: int64(t.Score)})
			}
		}
	}
	start := "-inf"
	if after.Score != math.MinInt64 {
		start = "(" + strconv.FormatInt(after.Score, 10)
	}
	if len(out) < limit {
		rest, err := s.c.ZRangeArgsWithScores(ctx, goredis.ZRangeArgs{Key: z, ByScore: true, Start: start, Stop: maxS,
			Count: int64(limit - len(out))}).Result()
		if err != nil {
			return nil, fmt.Errorf("redis: range: %w", err)
		}
		for _, r := range rest {
			out = append(out, durability.IndexEntry{Key: r.Member.(string), Score: int64(r.Score)})
		}
	}
	return out, nil
}

// Commit implements durability.Kv. It returns once Redis has applied the
// commit (or refused it); durability beyond that is Redis's persistence.
func (s *Store) Commit(ctx context.Context, writes []durability.Write) error {
	c := &commit{err: make(chan error, 1)}
	for _, w := range writes {
		h, dz, oz := s.keys(w.Key, w.Group)
		next := w.Next
		if next <= 0 {
			next = time.Now().UnixNano()
		}
		del, due, ord := "0", "", ""
		if w.Delete {
			del = "1"
		}
		if w.Due != nil {
			due = strconv.FormatInt(*w.Due, 10)
		}
		if w.Order != nil {
			ord = strconv.FormatInt(*w.Order, 10)
		}
		c.keys = append(c.keys, h, dz, oz)
		c.args = append(c.args, w.Key, strconv.FormatInt(w.Version, 10), strconv.FormatInt(next, 10), w.Value, del, due, ord)
	}
	if err := s.gc.Submit(c); err != nil {
		return durability.ErrClosed
	}
	return <-c.err
}

// run pipelines a batch: one EVALSHA per commit, one round trip.
func (s *Store) run(batch []*commit) {
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		cmds := make([]*goredis.Cmd, len(batch))
		_, err := s.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, c := range batch {
				cmds[i] = p.EvalSha(ctx, s.commitSHA, c.keys, c.args...)
			}
			return nil
		})
		if err != nil && attempt == 0 && strings.Contains(err.Error(), "NOSCRIPT") {
			// The server restarted or was flushed: load the script again.
			if s.load(ctx) == nil {
				continue
			}
		}
		for i, c := range batch {
			n, cerr := cmds[i].Int()
			switch {
			case cerr != nil:
				c.err <- fmt.Errorf("redis: commit: %w", cerr)
			case n != 1:
				c.err <- durability.ErrConflict
			default:
				c.err <- nil
			}
		}
		return
	}
}

// Close stops the writer after the queued commits and closes an owned client.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.gc.Close()
	if s.ownClient {
		return s.c.Close()
	}
	return nil
}
