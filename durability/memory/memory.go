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

// New returns an empty in-memory backend.
func New() durability.Backend {
	return durability.NewKvDurability(NewKv())
}

// Kv is an in-memory durability.Kv. It is safe for concurrent use.
type Kv struct {
	mu      sync.Mutex
	version int64
	items   map[string]item
	indexes map[string]*index
	closed  bool
}

type item struct {
	value   []byte
	version int64
}

// index is an ordered set: members sorted by (score, member), with their scores.
type index struct {
	sorted []durability.IndexEntry
	score  map[string]int64
}

// NewKv returns an empty Kv.
func NewKv() *Kv {
	return &Kv{items: map[string]item{}, indexes: map[string]*index{}}
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
func (k *Kv) Commit(_ context.Context, writes []durability.Write, ops []durability.IndexOp) error {
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
		if w.Delete {
			delete(k.items, w.Key)
			continue
		}
		v := w.Next
		if v <= 0 {
			v = k.version + 1
		}
		k.version = max(k.version, v)
		k.items[w.Key] = item{value: slices.Clone(w.Value), version: v}
	}
	for _, op := range ops {
		ix := k.indexes[op.Index]
		if ix == nil {
			ix = &index{score: map[string]int64{}}
			k.indexes[op.Index] = ix
		}
		ix.remove(op.Member)
		if !op.Remove {
			ix.add(durability.IndexEntry{Member: op.Member, Score: op.Score})
		}
	}
	return nil
}

func compare(a, b durability.IndexEntry) int {
	if c := cmp.Compare(a.Score, b.Score); c != 0 {
		return c
	}
	return cmp.Compare(a.Member, b.Member)
}

func (ix *index) remove(member string) {
	s, ok := ix.score[member]
	if !ok {
		return
	}
	i, _ := slices.BinarySearchFunc(ix.sorted, durability.IndexEntry{Member: member, Score: s}, compare)
	ix.sorted = slices.Delete(ix.sorted, i, i+1)
	delete(ix.score, member)
}

func (ix *index) add(e durability.IndexEntry) {
	i, _ := slices.BinarySearchFunc(ix.sorted, e, compare)
	ix.sorted = slices.Insert(ix.sorted, i, e)
	ix.score[e.Member] = e.Score
}

// Range implements durability.Kv.
func (k *Kv) Range(_ context.Context, name string, after durability.IndexEntry, max int64, limit int) ([]durability.IndexEntry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, durability.ErrClosed
	}
	ix := k.indexes[name]
	if ix == nil {
		return nil, nil
	}
	i, found := slices.BinarySearchFunc(ix.sorted, after, compare)
	if found {
		i++
	}
	if limit <= 0 {
		limit = math.MaxInt
	}
	var out []durability.IndexEntry
	for ; i < len(ix.sorted) && len(out) < limit && ix.sorted[i].Score <= max; i++ {
		out = append(out, ix.sorted[i])
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
// journal snapshots it).
type State struct {
	// Version is the last version handed out.
	Version int64                              `json:"version"`
	Items   map[string]Item                    `json:"items"`
	Index   map[string][]durability.IndexEntry `json:"index"`
}

// Item is one stored value.
type Item struct {
	Value   []byte `json:"value"`
	Version int64  `json:"v"`
}

// Export copies the Kv's content.
func (k *Kv) Export() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := State{Version: k.version, Items: make(map[string]Item, len(k.items)), Index: make(map[string][]durability.IndexEntry, len(k.indexes))}
	for key, it := range k.items {
		s.Items[key] = Item{Value: it.value, Version: it.version}
	}
	for name, ix := range k.indexes {
		if len(ix.sorted) > 0 {
			s.Index[name] = slices.Clone(ix.sorted)
		}
	}
	return s
}

// Import returns a Kv holding s.
func Import(s State) *Kv {
	k := NewKv()
	k.version = s.Version
	for key, it := range s.Items {
		k.items[key] = item{value: it.Value, version: it.Version}
	}
	for name, entries := range s.Index {
		ix := &index{score: map[string]int64{}}
		for _, e := range entries {
			ix.add(e)
		}
		k.indexes[name] = ix
	}
	return k
}
