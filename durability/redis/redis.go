// Package redis is the durability backend for several replicas on one Redis
// or one Redis Cluster (go-redis v9).
//
// On a single node a scope's inbox journal, conversation state and webchat
// transcript live under {prefix}:{durable:inbox:<scope>}, its outbox under
// {prefix}:{durable:outbox:<scope>} (the layout stores have had since the
// first release). On a cluster everything of a scope lives under one hash tag,
// {prefix}:{durable:<scope>}, so that every commit (a completion writes inbox,
// outbox and state together) touches one slot; keys outside a scope share
// {prefix}:{durable:kv}. Records are fields of a hash (version and value in one
// field, so a read is atomic); the two ordered indexes are sorted sets. Every
// commit is one Lua script that checks every expected version and applies the
// writes atomically; concurrent commits of one process are pipelined into one
// round trip per master (group commit), optionally followed by WAIT.
//
// A commit whose reply was lost (a dropped connection, a failover) is sent
// again; the script recognises a commit it already applied (every key holds
// the commit's own new version and value) and reports success instead of a
// conflict. Transient refusals (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING,
// READONLY, MASTERDOWN, a refused connection) are retried with backoff for
// Options.RetryFor; NOSCRIPT (a promoted replica has no script cache) sends
// the script itself.
//
// Crash survival needs Redis persistence: appendonly yes. With appendfsync
// everysec a power loss can lose the last second of writes; appendfsync
// always loses nothing and costs an fsync per write on the server.
// Replication is asynchronous: a failover can drop writes the old master
// acknowledged but had not passed on, unless the commit waited for a
// replica (Options.WaitReplicas).
package redis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/groupcommit"
)

// Options configure a Store: URL or Cluster (the store opens and closes its
// client), or Client (injected; the caller closes it; a *ClusterClient
// selects the cluster layout).
type Options struct {
	URL string
	// Cluster are a Redis Cluster's seed addresses ("host:port" or
	// "redis://…" URLs); the first URL's credentials and TLS apply to all.
	Cluster []string
	Client  goredis.UniversalClient
	// Prefix starts every key (default "botrun").
	Prefix string
	// MaxBatch caps the commits one pipeline carries (default 256).
	MaxBatch int
	// WaitReplicas is how many replicas each group commit waits for (Redis
	// WAIT) before it returns: 0 is the default (1 on a cluster, none on a
	// single node), -1 never waits.
	WaitReplicas int
	// WaitTimeout bounds that wait (default 1s); a commit whose replicas did
	// not answer in time still succeeds (and is counted in Unreplicated),
	// and the master's commits skip the wait for the next 5 s.
	WaitTimeout time.Duration
	// RetryFor is how long a transient refusal (failover, resharding,
	// restart) is retried before the caller sees the error (default 30s).
	RetryFor time.Duration
}

// Store is a durability.Kv in Redis.
type Store struct {
	c         goredis.UniversalClient
	cluster   *goredis.ClusterClient // nil on a single node
	ownClient bool
	prefix    string
	commitSHA string

	waitReplicas int
	waitTimeout  time.Duration
	retryFor     time.Duration
	unreplicated atomic.Int64
	replayed     atomic.Int64
	// lagging holds, per node (goredis.Cmdable), until when (unix ns) its
	// commits skip WAIT: its replicas did not answer the last one.
	lagging sync.Map

	gc        *groupcommit.Committer[*commit]
	resending sync.WaitGroup // commits being sent again
	closed    atomic.Bool
}

type commit struct {
	keys []string
	args []any
	// eval sends the script itself: the master lacked it (NOSCRIPT).
	eval bool
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
// write. It returns 1 once applied, 2 if the store already holds exactly
// what the commit writes (it was applied before and its reply was lost: a
// versioned write's new version is this commit's own), and 0, writing
// nothing, if any version does not match.
const commitScript = `
local n = #ARGV / 7
local function applied()
  local versioned = false
  for i = 0, n - 1 do
    local cur = redis.call('HGET', KEYS[i*3+1], ARGV[i*7+1])
    if ARGV[i*7+5] == "1" then
      if cur then return false end
    else
      if cur ~= ARGV[i*7+3] .. "\n" .. ARGV[i*7+4] then return false end
      if ARGV[i*7+2] ~= "-1" then versioned = true end
    end
  end
  return versioned
end
for i = 0, n - 1 do
  local ver = ARGV[i*7+2]
  if ver ~= "-1" then
    local cur = redis.call('HGET', KEYS[i*3+1], ARGV[i*7+1])
    local curVer = "0"
    if cur then curVer = string.sub(cur, 1, string.find(cur, "\n", 1, true) - 1) end
    if curVer ~= ver then
      if applied() then return 2 end
      return 0
    end
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
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = time.Second
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 30 * time.Second
	}
	s := &Store{c: o.Client, prefix: o.Prefix, waitTimeout: o.WaitTimeout, retryFor: o.RetryFor}
	if s.c == nil {
		var err error
		if s.c, err = dial(o); err != nil {
			return nil, err
		}
		s.ownClient = true
	}
	s.cluster, _ = s.c.(*goredis.ClusterClient)
	switch {
	case o.WaitReplicas > 0:
		s.waitReplicas = o.WaitReplicas
	case o.WaitReplicas == 0 && s.cluster != nil:
		s.waitReplicas = 1
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

// load loads the commit script (on every master of a cluster) and, on a
// single node, refuses a server that runs in cluster mode.
func (s *Store) load(ctx context.Context) error {
	if s.cluster == nil {
		info, err := s.c.Info(ctx, "cluster").Result()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if strings.Contains(info, "cluster_enabled:1") {
			return errors.New("redis: the server runs in cluster mode: list its nodes in durability.cluster instead of durability.url")
		}
	}
	return s.retry(ctx, func() error {
		sha, err := s.c.ScriptLoad(ctx, commitScript).Result()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		s.commitSHA = sha
		return nil
	})
}

// base maps a Kv key ("<scope>/<kind>/…") to the Redis key its scope and
// journal live under: one hash tag per scope on a cluster, two (inbox and
// outbox) on a single node.
func (s *Store) base(key string) string {
	scope, rest, ok := strings.Cut(key, "/")
	if !ok {
		return s.prefix + ":{durable:kv}"
	}
	if s.cluster != nil {
		return s.prefix + ":{durable:" + scope + "}"
	}
	kind, _, _ := strings.Cut(rest, "/")
	// The inbox, the state committed with it and the transcript; the
	// outbox and its state indexes ("out.dead").
	journal := "inbox"
	if kind == "out" || strings.HasPrefix(kind, "out.") {
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
	var b []byte
	err := s.retry(ctx, func() (err error) {
		b, err = s.c.HGet(ctx, h, key).Bytes()
		return err
	})
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
	zrange := func(a goredis.ZRangeArgs) ([]goredis.Z, error) {
		var zs []goredis.Z
		err := s.retry(ctx, func() (err error) {
			zs, err = s.c.ZRangeArgsWithScores(ctx, a).Result()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("redis: range: %w", err)
		}
		return zs, nil
	}
	maxS := strconv.FormatInt(max, 10)
	var out []durability.IndexEntry
	if after.Score != math.MinInt64 {
		// Members tied with the cursor's score come after it by key.
		at := strconv.FormatInt(after.Score, 10)
		ties, err := zrange(goredis.ZRangeArgs{Key: z, ByScore: true, Start: at, Stop: at})
		if err != nil {
			return nil, err
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
		rest, err := zrange(goredis.ZRangeArgs{Key: z, ByScore: true, Start: start, Stop: maxS, Count: int64(limit - len(out))})
		if err != nil {
			return nil, err
		}
		for _, r := range rest {
			out = append(out, durability.IndexEntry{Key: r.Member.(string), Score: int64(r.Score)})
		}
	}
	return out, nil
}

// Commit implements durability.Kv. It returns once Redis has applied the
// commit (or refused it) and, when the store waits for replicas, once they
// acknowledged it or the wait timed out; durability beyond that is Redis's
// persistence.
func (s *Store) Commit(ctx context.Context, writes []durability.Write) error {
	if len(writes) == 0 {
		return nil // nothing to apply, nothing to route
	}
	c := &commit{err: make(chan error, 1)}
	for _, w := range writes {
		h, dz, oz := s.keys(w.Key, w.Group)
		if s.cluster != nil && len(c.keys) > 0 && h != c.keys[0] {
			return fmt.Errorf("redis: one commit writes %s and %s: on a cluster a commit must stay in one scope (one slot)", c.keys[0], h)
		}
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
	select {
	case err := <-c.err:
		return err
	case <-ctx.Done():
		// The caller gives up (an admission's bound): the commit goes on
		// and may still land, as one whose answer a cut link lost.
		return fmt.Errorf("redis: commit: %w (it may still land)", ctx.Err())
	}
}

// run sends a batch (one pipeline per master); the commits refused for a
// transient reason are sent again by a goroutine of their own, so a master
// failing over does not hold up the commits of the others.
func (s *Store) run(batch []*commit) {
	again, err := s.send(context.Background(), batch)
	if len(again) > 0 {
		s.resending.Add(1)
		go s.resend(again, err)
	}
}

// resend sends batch again with backoff until every commit got a definite
// answer or RetryFor has passed.
func (s *Store) resend(batch []*commit, lastErr error) {
	defer s.resending.Done()
	deadline := time.Now().Add(s.retryFor)
	for attempt := 0; len(batch) > 0; attempt++ {
		if time.Now().After(deadline) {
			for _, c := range batch {
				c.err <- fmt.Errorf("redis: commit: still refused after %s: %w", s.retryFor, lastErr)
			}
			return
		}
		time.Sleep(backoff(attempt))
		batch, lastErr = s.send(context.Background(), batch)
	}
}

// send pipelines batch to the masters owning its slots, settles each commit
// that got a definite answer and returns those to send again.
func (s *Store) send(ctx context.Context, batch []*commit) (again []*commit, lastErr error) {
	if s.cluster == nil {
		return s.sendTo(ctx, s.c, batch) // one node: no grouping, no goroutine
	}
	groups := map[goredis.Cmdable][]*commit{}
	for _, c := range batch {
		node, err := s.cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			again, lastErr = append(again, c), err
			continue
		}
		groups[node] = append(groups[node], c)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, g := range groups {
		wg.Go(func() {
			retry, err := s.sendTo(ctx, node, g)
			mu.Lock()
			defer mu.Unlock()
			if len(retry) > 0 {
				again, lastErr = append(again, retry...), err
			}
		})
	}
	wg.Wait()
	return again, lastErr
}

// sendTo pipelines g to one node: a script call per commit, then WAIT when
// the store waits for replicas.
func (s *Store) sendTo(ctx context.Context, node goredis.Cmdable, g []*commit) (again []*commit, lastErr error) {
	cmds := make([]*goredis.Cmd, len(g))
	var wait *goredis.Cmd
	node.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range g {
			if c.eval {
				cmds[i] = p.Eval(ctx, commitScript, c.keys, c.args...)
			} else {
				cmds[i] = p.EvalSha(ctx, s.commitSHA, c.keys, c.args...)
			}
		}
		if s.waitReplicas > 0 && !s.isLagging(node) {
			wait = p.Do(ctx, "wait", s.waitReplicas, s.waitTimeout.Milliseconds())
		}
		return nil
	})
	switch {
	case s.waitReplicas == 0:
	case wait == nil:
		s.unreplicated.Add(1)
	default:
		if n, err := wait.Int64(); err == nil && n < int64(s.waitReplicas) {
			// A master without a live replica (its replica took over from
			// a dead master, or died): stop waiting on it for a while
			// rather than stall every commit for WaitTimeout.
			s.unreplicated.Add(1)
			s.lagging.Store(node, time.Now().Add(laggingFor).UnixNano())
		}
	}
	for i, c := range g {
		n, err := cmds[i].Int()
		switch {
		case err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT"):
			// A promoted replica or a restarted server has no script cache.
			c.eval = true
			again, lastErr = append(again, c), err
		case err != nil && transient(err):
			if s.cluster != nil {
				// The slot may have moved or its master died: read the
				// cluster's slots again before the next try.
				s.cluster.ReloadState(ctx)
			}
			again, lastErr = append(again, c), err
		case err != nil:
			c.err <- fmt.Errorf("redis: commit: %w", err)
		case n == 0:
			c.err <- durability.ErrConflict
		default:
			if n == 2 {
				s.replayed.Add(1)
			}
			c.err <- nil
		}
	}
	return again, lastErr
}

// laggingFor is how long a master whose replicas missed a WAIT is not waited
// on.
const laggingFor = 5 * time.Second

// isLagging reports whether node's replicas missed a recent WAIT.
func (s *Store) isLagging(node goredis.Cmdable) bool {
	until, ok := s.lagging.Load(node)
	return ok && time.Now().UnixNano() < until.(int64)
}

// retry calls op until it succeeds, fails for good or RetryFor has passed.
func (s *Store) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(s.retryFor)
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil || !transient(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff(attempt)):
		}
	}
}

// transient reports whether err may pass by itself: a connection that failed
// or was refused, or a server's refusal while a cluster fails over,
// reshards or loads its data.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, goredis.ErrClosed) {
		return false
	}
	var nerr interface{ Timeout() bool }
	if errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset")
}

// backoff is the wait before retry attempt+1: 10ms doubling to 1s.
func backoff(attempt int) time.Duration {
	return min(10*time.Millisecond<<min(attempt, 7), time.Second)
}

// Unreplicated counts the group commits that returned without the replicas'
// acknowledgement they asked for: their WAIT timed out, or it was skipped
// because the master's replicas had missed one in the last 5 s.
func (s *Store) Unreplicated() int64 { return s.unreplicated.Load() }

// Replayed counts the commits sent again after a lost reply that the store
// had already applied (reported as successes).
func (s *Store) Replayed() int64 { return s.replayed.Load() }

// Close stops the writer after the queued commits and those being sent
// again, and closes an owned client.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.gc.Close()
	s.resending.Wait()
	if s.ownClient {
		return s.c.Close()
	}
	return nil
}
