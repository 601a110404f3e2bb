// Package memory is the in-memory durability backend: KvDurability over an
// in-process Kv. Nothing survives a restart, but leases, retries, backoff and
// the dead-letter queue work, and several bots in one process may share one
// Backend (each in its own scope).
package memory

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"

	"github.com/botrun/botrun/durability"
)

// Options configure the memory backend; it has none yet.
type Options struct{}

// Open returns an empty in-memory backend; it never fails.
func Open(context.Context, Options) (durability.Backend, error) { return New(), nil }

// New is Open for callers that need no options and no error (tests).
func New() durability.Backend {
	return durability.NewKvDurability(NewKv())
}

// Kv is an in-memory durability.Kv. It is safe for concurrent use.
type Kv struct {
	mu      sync.Mutex
	version int64
	items   map[string]item
	indexes map[indexKey]*index
	closed  bool
}

type item struct {
	value      []byte
	version    int64
	group      string
	due, order *int64
}

type indexKey struct {
	group string
	ix    durability.Index
}

// index is an ordered set of (score, key).
type index struct {
	sorted []durability.IndexEntry
}

// NewKv returns an empty Kv.
func NewKv() *Kv {
	return &Kv{items: map[string]item{}, indexes: map[indexKey]*index{}}
}

// Get implements durability.Kv.
func (k *Kv) Get(_ context.Context, key string) ([]byte, int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, 0, durability.ErrClosed
	}
	it, ok := k.items[key]
	if !ok {
		return nil, 0, nil
	}
	return slices.Clone(it.value), it.version, nil
}

// Commit implements durability.Kv.
func (k *Kv) Commit(_ context.Context, writes []durability.Write) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return durability.ErrClosed
	}
	for _, w := range writes {
		if w.Version == durability.AnyVersion {
			continue
		}
		if k.items[w.Key].version != w.Version {
			return durability.ErrConflict
		}
	}
	for _, w := range writes {
		k.apply(w)
	}
	return nil
}

func (k *Kv) apply(w durability.Write) {
	old, had := k.items[w.Key]
	if w.Delete {
		if had {
			k.unindex(w.Key, old, item{})
		}
		delete(k.items, w.Key)
		return
	}
	v := w.Next
	if v <= 0 {
		v = k.version + 1
	}
	k.version = max(k.version, v)
	it := item{value: slices.Clone(w.Value), version: v, group: w.Group, due: w.Due, order: w.Order}
	k.items[w.Key] = it
	if had {
		k.unindex(w.Key, old, it)
	}
	k.reindex(w.Key, it, old, had)
}

func same(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func (k *Kv) ix(group string, ix durability.Index) *index {
	key := indexKey{group, ix}
	x := k.indexes[key]
	if x == nil {
		x = &index{}
		k.indexes[key] = x
	}
	return x
}

// unindex removes it's index entries that next does not keep (a score that
// did not change is left in place: no shifting of a large index).
func (k *Kv) unindex(key string, it, next item) {
	keep := it.group == next.group
	if it.due != nil && !(keep && same(it.due, next.due)) {
		k.ix(it.group, durability.IndexDue).remove(durability.IndexEntry{Key: key, Score: *it.due})
	}
	if it.order != nil && !(keep && same(it.order, next.order)) {
		k.ix(it.group, durability.IndexOrder).remove(durability.IndexEntry{Key: key, Score: *it.order})
	}
}

// reindex adds it's index entries that old (when had) did not have already.
func (k *Kv) reindex(key string, it, old item, had bool) {
	keep := had && it.group == old.group
	if it.due != nil && !(keep && same(it.due, old.due)) {
		k.ix(it.group, durability.IndexDue).add(durability.IndexEntry{Key: key, Score: *it.due})
	}
	if it.order != nil && !(keep && same(it.order, old.order)) {
		k.ix(it.group, durability.IndexOrder).add(durability.IndexEntry{Key: key, Score: *it.order})
	}
}

func compare(a, b durability.IndexEntry) int {
	if c := cmp.Compare(a.Score, b.Score); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

func (x *index) remove(e durability.IndexEntry) {
	if i, found := slices.BinarySearchFunc(x.sorted, e, compare); found {
		x.sorted = slices.Delete(x.sorted, i, i+1)
	}
}

func (x *index) add(e durability.IndexEntry) {
	i, _ := slices.BinarySearchFunc(x.sorted, e, compare)
	x.sorted = slices.Insert(x.sorted, i, e)
}

// Range implements durability.Kv.
func (k *Kv) Range(_ context.Context, group string, ix durability.Index, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, durability.ErrClosed
	}
	x := k.indexes[indexKey{group, ix}]
	if x == nil {
		return nil, nil
	}
	i, found := slices.BinarySearchFunc(x.sorted, after, compare)
	if found {
		i++
	}
	if limit <= 0 {
		limit = math.MaxInt
	}
	var out []durability.IndexEntry
	for ; i < len(x.sorted) && len(out) < limit && x.sorted[i].Score <= max; i++ {
		out = append(out, x.sorted[i])
	}
	return out, nil
}

// Close implements durability.Kv; later calls fail with ErrClosed.
func (k *Kv) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

// State is a Kv's whole content, for backends that persist it (the file
// journal snapshots it). The indexes are rebuilt from the items.
type State struct {
	// Version is the highest version handed out.
	Version int64           `json:"version"`
	Items   map[string]Item `json:"items"`
}

// Item is one stored value with its group and index scores.
type Item struct {
	Value   []byte `json:"value"`
	Version int64  `json:"v"`
	Group   string `json:"g,omitempty"`
	Due     *int64 `json:"due,omitempty"`
	Order   *int64 `json:"order,omitempty"`
}

// Export copies the Kv's content.
func (k *Kv) Export() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := State{Version: k.version, Items: make(map[string]Item, len(k.items))}
	for key, it := range k.items {
		s.Items[key] = Item{Value: it.value, Version: it.version, Group: it.group, Due: it.due, Order: it.order}
	}
	return s
}

// Import returns a Kv holding s.
func Import(s State) *Kv {
	k := NewKv()
	k.version = s.Version
	for key, it := range s.Items {
		i := item{value: it.Value, version: it.Version, group: it.Group, due: it.Due, order: it.Order}
		k.items[key] = i
		k.reindex(key, i, item{}, false)
		k.version = max(k.version, it.Version)
	}
	return k
}
