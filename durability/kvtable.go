package durability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

const (
	scanPage = 256
	// scanBudget bounds how many index entries one scan (a ClaimDue, List
	// or Purge) reads.
	scanBudget = 20000
)

// table stores records of type T in a Kv with their due and created scores.
// It remembers the records it wrote last (a write-through cache): an update
// of a record this process just wrote needs no read, and if another process
// changed it meanwhile the version check refuses the write and the record is
// read again.
type table[T any] struct {
	kv    Kv
	group string
	// scores returns the record's due score (inDue false when it is never
	// claimable) and its created score.
	scores func(*T) (due int64, inDue bool, created int64)
	// cache is the KvDurability's, shared by its tables.
	cache *recordCache
}

// remember caches rec at version; size is its encoded length.
func (t *table[T]) remember(id string, rec T, version int64, size int) {
	t.cache.remember(t.group+id, rec, version, size)
}

func (t *table[T]) forget(id string) { t.cache.forget(t.group + id) }

// settle caches rec as written by w while it has work left (it is in the due
// index); a finished record (done, sent, dead) leaves the cache, so a busy
// bot's cache holds the records in flight, not the ones behind it.
func (t *table[T]) settle(id string, rec T, w Write) {
	if w.Due == nil {
		t.forget(id)
		return
	}
	t.remember(id, rec, w.Next, len(w.Value))
}

func (t *table[T]) recall(id string) (T, int64, bool) {
	rec, v, ok := t.cache.recall(t.group + id)
	if !ok {
		var zero T
		return zero, 0, false
	}
	return rec.(T), v, true
}

// nextVersion is the version a write stores: past the record's current one,
// and past any version the key had before a delete (no ABA on re-creation).
func nextVersion(old int64) int64 {
	return max(old+1, time.Now().UnixNano())
}

func (t *table[T]) get(ctx context.Context, id string) (T, int64, error) {
	var rec T
	b, v, err := t.kv.Get(ctx, t.group+id)
	if err != nil {
		return rec, 0, err
	}
	if v == 0 {
		return rec, 0, ErrNotFound
	}
	if rec, err = decodeRecord[T](b); err != nil {
		return rec, 0, fmt.Errorf("durability: record %s%s is corrupt (restore the store from a backup, or discard the record): %w", t.group, id, err)
	}
	return rec, v, nil
}

// decodeRecord reads a stored record; bytes from a store are untrusted (a
// damaged file, another program's writes).
func decodeRecord[T any](b []byte) (T, error) {
	var rec T
	err := json.Unmarshal(b, &rec)
	return rec, err
}

// writeOf returns the Kv write that stores rec over version (0 to create),
// with its two index scores.
func (t *table[T]) writeOf(id string, version int64, rec *T) (Write, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return Write{}, err
	}
	due, inDue, created := t.scores(rec)
	w := Write{Key: t.group + id, Version: version, Next: nextVersion(version), Value: b, Group: t.group, Order: &created}
	if inDue {
		w.Due = &due
	}
	return w, nil
}

// put writes rec over version with extra writes, atomically.
func (t *table[T]) put(ctx context.Context, id string, version int64, rec *T, extra []Write) error {
	w, err := t.writeOf(id, version, rec)
	if err != nil {
		return err
	}
	err = t.kv.Commit(ctx, append([]Write{w}, extra...))
	switch {
	case err == nil:
		t.settle(id, *rec, w)
	case errors.Is(err, ErrConflict):
		t.forget(id)
	}
	return err
}

// current returns the record as this process last wrote it, or as stored.
func (t *table[T]) current(ctx context.Context, id string) (T, int64, error) {
	if rec, v, ok := t.recall(id); ok {
		return rec, v, nil
	}
	return t.get(ctx, id)
}

func (t *table[T]) del(ctx context.Context, id string, version int64) error {
	t.forget(id)
	return t.kv.Commit(ctx, []Write{{Key: t.group + id, Version: version, Delete: true, Group: t.group}})
}

// update applies fn to the current record and writes it, retrying on version
// conflicts. fn returns the extra writes to commit with the record.
func (t *table[T]) update(ctx context.Context, id string, fn func(rec *T) ([]Write, error)) (T, error) {
	for cached := true; ; {
		rec, v, hit := t.recall(id)
		if !cached || !hit {
			hit = false
			var err error
			if rec, v, err = t.get(ctx, id); err != nil {
				return rec, err
			}
		}
		extra, err := fn(&rec)
		if err != nil {
			if hit {
				// Refused on what the cache holds: another goroutine of
				// this process may have written since. The store decides.
				cached = false
				continue
			}
			return rec, err
		}
		err = t.put(ctx, id, v, &rec, extra)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return rec, err
	}
}

// scan reads records from index ix with score <= max, calling keep for
// each until it returns false or the budget is spent.
func (t *table[T]) scan(ctx context.Context, ix Index, max int64, keep func(id string, rec T, version int64) bool) error {
	return t.scanFrom(ctx, ix, math.MinInt64, max, keep)
}

// scanFrom is scan from score from (inclusive).
func (t *table[T]) scanFrom(ctx context.Context, ix Index, from, max int64, keep func(id string, rec T, version int64) bool) error {
	cursor := IndexEntry{Score: from} // the keys at from: every key is after ""
	for read := 0; read < scanBudget; {
		entries, err := t.kv.Range(ctx, t.group, ix, cursor, max, scanPage)
		if err != nil {
			return err
		}
		for _, e := range entries {
			read++
			id := strings.TrimPrefix(e.Key, t.group)
			rec, v, err := t.get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !keep(id, rec, v) {
				return nil
			}
		}
		if len(entries) < scanPage {
			return nil
		}
		cursor = entries[len(entries)-1]
	}
	return nil
}

// list returns records matching match from the created index, oldest first,
// from those created at since on.
func (t *table[T]) list(ctx context.Context, since int64, limit int, match func(*T) bool) ([]T, error) {
	var out []T
	from := int64(math.MinInt64)
	if since > 0 {
		from = since
	}
	err := t.scanFrom(ctx, IndexOrder, from, math.MaxInt64, func(_ string, rec T, _ int64) bool {
		if match(&rec) {
			out = append(out, rec)
		}
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// purge deletes records created before before for which purgeable returns
// true; a record that changed since the scan stays.
func (t *table[T]) purge(ctx context.Context, before int64, purgeable func(*T) bool) (int, error) {
	type victim struct {
		id string
		v  int64
	}
	var victims []victim
	err := t.scan(ctx, IndexOrder, before, func(id string, rec T, v int64) bool {
		if purgeable(&rec) {
			victims = append(victims, victim{id, v})
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, vc := range victims {
		err := t.del(ctx, vc.id, vc.v)
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrConflict):
			// It changed since the scan (a replay or retry): keep it.
		default:
			return n, err
		}
	}
	return n, nil
}
