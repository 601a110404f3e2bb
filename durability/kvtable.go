package durability

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/botrun/botrun/durability/internal/scan"
)

// scanPage is how many index entries one Range reads; scan.Budget() bounds
// how many one scan (a ClaimDue, List or Purge) reads.
const scanPage = 256

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
	// fields returns the record's state and chat (what List filters on).
	fields func(*T) (state, chat string)
	// indexed are the states kept in a state index of their own: a marker
	// key "<scope>/in.dead/<id>" in group "<scope>/in.dead/" (stateGroup),
	// ordered by creation, written and deleted in the commits that move a
	// record into and out of the state. They are the states retention
	// keeps (dead letters, unknown sends), which the creation index buries
	// under done and sent records.
	indexed []string
	// live are the states of the records in the due index.
	live []string
	// stateIndexed is false while the store holds records that entered an
	// indexed state before the state indexes existed (the migration at Open
	// could not write): List then walks the creation index for them.
	stateIndexed bool
	// cache is the KvDurability's, shared by its tables.
	cache *recordCache
	// purgeAt is the creation index entry where the last Purge stopped
	// reading (nil: from the oldest), so that successive purges move past
	// more than scan.Budget() records retention keeps (dead letters, live
	// records) at the front instead of reading only those.
	purgeMu sync.Mutex
	purgeAt *IndexEntry
}

// stateGroup is the group of state's index.
func (t *table[T]) stateGroup(state string) string {
	return strings.TrimSuffix(t.group, "/") + "." + state + "/"
}

// indexedState is the state index rec belongs in, "" for none.
func (t *table[T]) indexedState(rec *T) string {
	if state, _ := t.fields(rec); slices.Contains(t.indexed, state) {
		return state
	}
	return ""
}

// mark is the write that puts id in the index of state.
func (t *table[T]) mark(id, state string, rec *T) Write {
	g := t.stateGroup(state)
	_, _, created := t.scores(rec)
	return Write{Key: g + id, Version: AnyVersion, Value: []byte(id), Group: g, Order: &created}
}

// unmark is the write that takes id out of the index of state.
func (t *table[T]) unmark(id, state string) Write {
	g := t.stateGroup(state)
	return Write{Key: g + id, Version: AnyVersion, Delete: true, Group: g}
}

// moved returns the writes that move id from the state index of was ("" for
// none) to rec's.
func (t *table[T]) moved(id, was string, rec *T) []Write {
	now := ""
	if rec != nil {
		now = t.indexedState(rec)
	}
	if now == was {
		return nil
	}
	var ws []Write
	if was != "" {
		ws = append(ws, t.unmark(id, was))
	}
	if now != "" {
		ws = append(ws, t.mark(id, now, rec))
	}
	return ws
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

// del deletes rec, stored as id at version, with its state index marker.
func (t *table[T]) del(ctx context.Context, id string, version int64, rec *T) error {
	t.forget(id)
	w := Write{Key: t.group + id, Version: version, Delete: true, Group: t.group}
	return t.kv.Commit(ctx, append([]Write{w}, t.moved(id, t.indexedState(rec), nil)...))
}

// update applies fn to the current record and writes it, retrying on version
// conflicts. fn returns the extra writes to commit with the record; the
// writes that move the record between state indexes join them. Every change
// of state into or out of an indexed one goes through update (claims, the
// completion with sends and Put never touch an indexed state).
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
		was := t.indexedState(&rec)
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
		err = t.put(ctx, id, v, &rec, append(slices.Clip(extra), t.moved(id, was, &rec)...))
		if errors.Is(err, ErrConflict) {
			continue
		}
		return rec, err
	}
}

// scan reads records from index ix with score <= max, calling keep for
// each until it returns false or the budget is spent.
func (t *table[T]) scan(ctx context.Context, ix Index, max int64, keep func(id string, rec T, version int64) bool) error {
	return t.scanFrom(ctx, t.group, ix, math.MinInt64, max, keep)
}

// scanFrom is scan from score from (inclusive) over the index ix of group:
// the table's own, or one of its state indexes (whose keys end with the
// record's id too).
func (t *table[T]) scanFrom(ctx context.Context, group string, ix Index, from, max int64, keep func(id string, rec T, version int64) bool) error {
	return t.walk(ctx, group, ix, from, max, scan.Budget(), keep)
}

// walk is scanFrom reading up to budget index entries.
func (t *table[T]) walk(ctx context.Context, group string, ix Index, from, max int64, budget int, keep func(id string, rec T, version int64) bool) error {
	// The keys at from: every key is after "".
	_, err := t.walkAfter(ctx, group, ix, IndexEntry{Score: from}, max, budget, keep)
	return err
}

// walkAfter is walk from the entries after cursor; it returns the last entry
// it read, nil once it read the last entry at or below max.
func (t *table[T]) walkAfter(ctx context.Context, group string, ix Index, cursor IndexEntry, max int64, budget int, keep func(id string, rec T, version int64) bool) (*IndexEntry, error) {
	for read := 0; read < budget; {
		entries, err := t.kv.Range(ctx, group, ix, cursor, max, scanPage)
		if err != nil {
			return &cursor, err
		}
		for _, e := range entries {
			read++
			cursor = e
			id := strings.TrimPrefix(e.Key, group)
			rec, v, err := t.get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return &cursor, err
			}
			if !keep(id, rec, v) {
				return &cursor, nil
			}
		}
		if len(entries) < scanPage {
			return nil, nil
		}
	}
	return &cursor, nil
}

// list returns the records f selects, oldest created first. A state with an
// index of its own is read from it; a live state from the due index, which
// holds the live records only; anything else walks the creation index. Each
// reads at most scan.Budget() index entries.
func (t *table[T]) list(ctx context.Context, f ListFilter) ([]T, error) {
	from := int64(math.MinInt64)
	if f.Since > 0 {
		from = f.Since
	}
	match := func(rec *T) bool {
		state, chat := t.fields(rec)
		return (f.State == "" || state == f.State) && (f.Chat == "" || chat == f.Chat)
	}
	var out []T
	collect := func(_ string, rec T, _ int64) bool {
		if match(&rec) {
			out = append(out, rec)
		}
		return f.Limit <= 0 || len(out) < f.Limit
	}
	switch {
	case t.stateIndexed && slices.Contains(t.indexed, f.State):
		// A marker whose record left the state (an events journal's own
		// replay) is skipped.
		return out, t.scanFrom(ctx, t.stateGroup(f.State), IndexOrder, from, math.MaxInt64, collect)
	case slices.Contains(t.live, f.State):
		return t.listLive(ctx, from, f.Limit, match)
	}
	return out, t.scanFrom(ctx, t.group, IndexOrder, from, math.MaxInt64, collect)
}

// listLive lists the matching records of the due index created at from on,
// oldest created first (the due index orders them by due time).
func (t *table[T]) listLive(ctx context.Context, from int64, limit int, match func(*T) bool) ([]T, error) {
	type found struct {
		id      string
		created int64
		rec     T
	}
	var all []found
	err := t.scan(ctx, IndexDue, math.MaxInt64, func(id string, rec T, _ int64) bool {
		if _, _, created := t.scores(&rec); created >= from && match(&rec) {
			all = append(all, found{id, created, rec})
		}
		return true
	})
	slices.SortFunc(all, func(a, b found) int {
		if a.created != b.created {
			return cmp.Compare(a.created, b.created)
		}
		return strings.Compare(a.id, b.id)
	})
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]T, len(all))
	for i, a := range all {
		out[i] = a.rec
	}
	return out, err
}

// markAll writes the state index marker of every record in an indexed state
// (the migration of a store written before the state indexes), reading the
// whole creation index.
func (t *table[T]) markAll(ctx context.Context) error {
	var marks []Write
	var err error
	werr := t.walk(ctx, t.group, IndexOrder, math.MinInt64, math.MaxInt64, math.MaxInt, func(id string, rec T, _ int64) bool {
		if state := t.indexedState(&rec); state != "" {
			marks = append(marks, t.mark(id, state, &rec))
		}
		if len(marks) == scanPage {
			err = t.kv.Commit(ctx, marks)
			marks = nil
		}
		return err == nil
	})
	if err != nil || werr != nil || len(marks) == 0 {
		return errors.Join(err, werr)
	}
	return t.kv.Commit(ctx, marks)
}

// purgeDone is purgeAfter over the table's creation index, from where the last
// purgeDone stopped reading it: each reads up to scan.Budget() entries, and the
// one that reads the last starts the next from the oldest again.
func (t *table[T]) purgeDone(ctx context.Context, before int64, purgeable func(*T) bool) ([]string, error) {
	t.purgeMu.Lock()
	defer t.purgeMu.Unlock()
	start := IndexEntry{Score: math.MinInt64}
	if t.purgeAt != nil {
		start = *t.purgeAt
	}
	gone, next, err := t.purgeAfter(ctx, t.group, start, before, purgeable)
	if err == nil {
		t.purgeAt = next
	}
	return gone, err
}

// purgeAfter deletes the records of group's creation index (the table's
// own, or one of its state indexes) created at or before before for which
// purgeable returns true, reading up to scan.Budget() entries after cursor, and
// returns their ids and the last entry read, nil once it read the last; a
// record that changed since the scan stays.
func (t *table[T]) purgeAfter(ctx context.Context, group string, cursor IndexEntry, before int64, purgeable func(*T) bool) ([]string, *IndexEntry, error) {
	type victim struct {
		id  string
		v   int64
		rec T
	}
	var victims []victim
	next, err := t.walkAfter(ctx, group, IndexOrder, cursor, before, scan.Budget(), func(id string, rec T, v int64) bool {
		if purgeable(&rec) {
			victims = append(victims, victim{id, v, rec})
		}
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	var gone []string
	for _, vc := range victims {
		err := t.del(ctx, vc.id, vc.v, &vc.rec)
		switch {
		case err == nil:
			gone = append(gone, vc.id)
		case errors.Is(err, ErrConflict):
			// It changed since the scan (a replay or retry): keep it.
		default:
			return gone, nil, err
		}
	}
	return gone, next, nil
}

// purgeIndexed deletes the records in the indexed states completed before
// before (purgeable says which), reading each state's index (the creation
// index while the store is not state-indexed) to its end, scan.Budget()
// entries at a time, and returns their ids.
func (t *table[T]) purgeIndexed(ctx context.Context, before int64, purgeable func(*T) bool) ([]string, error) {
	var gone []string
	for _, state := range t.indexed {
		group := t.group
		if t.stateIndexed {
			group = t.stateGroup(state)
		}
		for cursor := (&IndexEntry{Score: math.MinInt64}); cursor != nil; {
			ids, next, err := t.purgeAfter(ctx, group, *cursor, before, func(rec *T) bool {
				s, _ := t.fields(rec)
				return s == state && purgeable(rec)
			})
			gone = append(gone, ids...)
			if err != nil {
				return gone, err
			}
			cursor = next
		}
	}
	return gone, nil
}
