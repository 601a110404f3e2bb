package durability

import (
	"container/list"
	"sync"
)

// DefaultRecordCacheBytes is the default budget of KvDurability's record
// cache.
const DefaultRecordCacheBytes = 64 << 20

// cacheEntryOverhead is what one cached record costs besides its encoded
// bytes (map entry, list element, the decoded struct's headers).
const cacheEntryOverhead = 256

// recordCache remembers the records this process wrote last, by store key,
// within a budget of bytes (each record's encoded size plus a fixed overhead),
// evicting the least recently written first. It is shared by every table of
// a KvDurability.
type recordCache struct {
	maxBytes int64

	mu      sync.Mutex
	bytes   int64
	entries map[string]*list.Element
	order   list.List // of *cacheEntry, least recently written first
}

type cacheEntry struct {
	key     string
	rec     any
	version int64
	size    int64
}

func newRecordCache(maxBytes int64) *recordCache {
	return &recordCache{maxBytes: maxBytes, entries: map[string]*list.Element{}}
}

// remember stores rec at version under key; size is its encoded length. A
// record larger than the whole budget is not kept.
func (c *recordCache) remember(key string, rec any, version int64, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok && el.Value.(*cacheEntry).version > version {
		// Versions only grow: a goroutine remembering a write that another
		// one already wrote over is late, not right.
		return
	}
	c.drop(key)
	e := &cacheEntry{key: key, rec: rec, version: version, size: int64(size) + cacheEntryOverhead}
	if e.size > c.maxBytes {
		return
	}
	for c.bytes+e.size > c.maxBytes {
		c.drop(c.order.Front().Value.(*cacheEntry).key)
	}
	c.entries[key] = c.order.PushBack(e)
	c.bytes += e.size
}

// forget drops key.
func (c *recordCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(key)
}

func (c *recordCache) drop(key string) {
	el, ok := c.entries[key]
	if !ok {
		return
	}
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.entries, key)
	c.bytes -= e.size
}

// recall returns the record remembered under key.
func (c *recordCache) recall(key string) (rec any, version int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*cacheEntry)
	return e.rec, e.version, true
}

// size returns the bytes and entries held.
func (c *recordCache) size() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, len(c.entries)
}
