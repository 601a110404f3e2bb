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
	"time"
)

// KvDurability implements Backend over any Kv: records are JSON values under
// "<scope>/in/<id>" and "<scope>/out/<key>" (the groups of the two journals),
// conversation state under "<scope>/st/<key>". A record's due score is when it
// becomes claimable (none once settled); its order score is its creation time.
// The records this process wrote last are cached, within a budget of bytes
// (DefaultRecordCacheBytes unless WithRecordCache says otherwise).
type KvDurability struct {
	kv    Kv
	cache *recordCache
}

// NewKvDurability returns the journals over kv.
func NewKvDurability(kv Kv) *KvDurability {
	return &KvDurability{kv: kv, cache: newRecordCache(DefaultRecordCacheBytes)}
}

// WithRecordCache returns a copy of d whose record cache holds at most
// maxBytes of records (their encoded size plus a small per-record overhead),
// the least recently written evicted first. Journals opened before keep the
// cache they had.
func (d *KvDurability) WithRecordCache(maxBytes int64) *KvDurability {
	return &KvDurability{kv: d.kv, cache: newRecordCache(maxBytes)}
}

// Open implements Backend.
func (d *KvDurability) Open(_ context.Context, scope Scope) (Journals, error) {
	p := scope.ID() + "/"
	in := &table[InboxRecord]{kv: d.kv, group: p + "in/", scores: inboxScores, cache: d.cache}
	out := &table[OutboxRecord]{kv: d.kv, group: p + "out/", scores: outboxScores, cache: d.cache}
	st := &kvState{kv: d.kv, prefix: p + "st/"}
	return Journals{Inbox: &kvInbox{t: in, out: out, state: st}, Outbox: &kvOutbox{t: out}, State: st}, nil
}

// Close implements Backend.
func (d *KvDurability) Close() error { return d.kv.Close() }

// Kv returns the store the journals live in; the host keeps other per-scope
// data (the webchat transcript) beside them.
func (d *KvDurability) Kv() Kv { return d.kv }

const (
	scanPage = 256
	// scanBudget bounds how many index entries one ClaimDue reads.
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

// scan reads records from index with min <= score <= max, calling keep for
// each until it returns false or the budget is spent.
func (t *table[T]) scan(ctx context.Context, ix Index, max int64, keep func(id string, rec T, version int64) bool) error {
	cursor := IndexEntry{Score: math.MinInt64}
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

// list returns records matching match from the created index, oldest first.
func (t *table[T]) list(ctx context.Context, limit int, match func(*T) bool) ([]T, error) {
	var out []T
	err := t.scan(ctx, IndexOrder, math.MaxInt64, func(_ string, rec T, _ int64) bool {
		if match(&rec) {
			out = append(out, rec)
		}
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// purge deletes records created before before for which dead returns true.
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

func inboxScores(r *InboxRecord) (int64, bool, int64) {
	switch r.State {
	case InboxPending:
		return r.CreatedAt, true, r.CreatedAt
	case InboxFailed:
		return r.RetryAt, true, r.CreatedAt
	case InboxProcessing:
		return r.LeaseUntil, true, r.CreatedAt
	}
	return 0, false, r.CreatedAt
}

func outboxScores(r *OutboxRecord) (int64, bool, int64) {
	switch r.State {
	case OutboxPending, OutboxFailed:
		return r.RetryAt, true, r.CreatedAt
	case OutboxSending:
		return r.LeaseUntil, true, r.CreatedAt
	}
	return 0, false, r.CreatedAt
}

// claimWindow returns the due-index ceiling for a ClaimDue.
func claimWindow(opts ClaimOptions) int64 {
	if opts.Reclaim != nil {
		return math.MaxInt64 // reclaimed leases have not expired yet
	}
	return opts.Lease.Now
}

func withLimit(opts ClaimOptions) ClaimOptions {
	opts.Limit = limitOf(opts)
	return opts
}

func limitOf(opts ClaimOptions) int {
	if opts.Limit <= 0 {
		return 100
	}
	return opts.Limit
}

func reclaims(opts ClaimOptions, owner string, leasedAt int64) bool {
	return opts.Reclaim != nil && owner == opts.Reclaim.Owner && leasedAt < opts.Reclaim.Before
}

// kvInbox implements InboxJournal.
type kvInbox struct {
	t     *table[InboxRecord]
	out   *table[OutboxRecord]
	state *kvState
}

func (j *kvInbox) Put(ctx context.Context, p InboxPut, now int64, lease *Lease) (PutStatus, InboxRecord, error) {
	rec := InboxRecord{ID: p.ID, Provider: p.Provider, Chat: p.Chat, Payload: p.Payload,
		State: InboxPending, CreatedAt: now, UpdatedAt: now}
	if lease != nil {
		claimInbox(&rec, *lease)
	}
	err := j.t.put(ctx, p.ID, 0, &rec, nil)
	if !errors.Is(err, ErrConflict) {
		return Created, rec, err
	}
	// It exists: count the duplicate.
	rec, err = j.t.update(ctx, p.ID, func(r *InboxRecord) ([]Write, error) {
		r.Duplicates++
		r.UpdatedAt = max(r.UpdatedAt, now)
		return nil, nil
	})
	if errors.Is(err, ErrNotFound) {
		return j.Put(ctx, p, now, lease) // purged meanwhile
	}
	return Exists, rec, err
}

func claimInbox(rec *InboxRecord, lease Lease) {
	rec.State = InboxProcessing
	rec.Attempts++
	rec.Token++
	rec.Owner = lease.Owner
	rec.LeasedAt = lease.Now
	rec.LeaseUntil = lease.Until
	rec.RetryAt = 0
	rec.UpdatedAt = lease.Now
}

func (j *kvInbox) Claim(ctx context.Context, id string, lease Lease) (InboxRecord, error) {
	return j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		switch {
		case rec.State == InboxPending || rec.State == InboxFailed:
		case rec.State == InboxProcessing && rec.LeaseUntil <= lease.Now:
		default:
			return nil, fmt.Errorf("%w: inbox %s is %s", ErrNotClaimable, id, rec.State)
		}
		claimInbox(rec, lease)
		return nil, nil
	})
}

// leased checks a fencing token against a record in the leased state.
func leased(state, want string, token, current int64, what, id string) error {
	if state != want || token != current {
		return fmt.Errorf("%w: %s %s (token %d, record %s with token %d)", ErrStaleLease, what, id, token, state, current)
	}
	return nil
}

func (j *kvInbox) Extend(ctx context.Context, id string, token, until int64) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return nil, err
		}
		rec.LeaseUntil = until
		return nil, nil
	})
	return err
}

func (j *kvInbox) Complete(ctx context.Context, id string, token int64, effects []StateWrite, module string, now int64) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return nil, err
		}
		rec.State = InboxDone
		rec.Module = module
		rec.Error = ""
		rec.LeaseUntil = 0
		rec.UpdatedAt, rec.CompletedAt = now, now
		return j.state.writes(effects), nil
	})
	return err
}

// CompleteWithSent implements CompleteSender: the inbox record, the sent
// outbox records and the state writes land in one Kv commit.
func (j *kvInbox) CompleteWithSent(ctx context.Context, id string, token int64, effects []StateWrite, module string, now int64, sent []SentMark) error {
	for {
		rec, v, err := j.t.current(ctx, id)
		if err != nil {
			return err
		}
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return err
		}
		rec.State, rec.Module, rec.Error, rec.LeaseUntil = InboxDone, module, "", 0
		rec.UpdatedAt, rec.CompletedAt = now, now
		var writes []Write
		type outWrite struct {
			key string
			rec OutboxRecord
			w   Write
		}
		var outs []outWrite
		for _, m := range sent {
			o, ov, err := j.out.current(ctx, m.Key)
			if err != nil {
				return err
			}
			if err := leased(string(o.State), string(OutboxSending), m.Token, o.Token, "outbox", m.Key); err != nil {
				return err
			}
			o.State, o.Ref, o.Error = OutboxSent, m.Ref, ""
			o.LeaseUntil, o.RetryAt = 0, 0
			o.UpdatedAt, o.CompletedAt = m.Now, m.Now
			w, err := j.out.writeOf(m.Key, ov, &o)
			if err != nil {
				return err
			}
			writes = append(writes, w)
			outs = append(outs, outWrite{m.Key, o, w})
		}
		w, err := j.t.writeOf(id, v, &rec)
		if err != nil {
			return err
		}
		writes = append(append([]Write{w}, writes...), j.state.writes(effects)...)
		err = j.t.kv.Commit(ctx, writes)
		if errors.Is(err, ErrConflict) {
			j.t.forget(id)
			for _, m := range sent {
				j.out.forget(m.Key)
			}
			continue
		}
		if err != nil {
			return err
		}
		j.t.settle(id, rec, w)
		for _, o := range outs {
			j.out.settle(o.key, o.rec, o.w)
		}
		return nil
	}
}

func (j *kvInbox) Fail(ctx context.Context, id string, token int64, errMsg string, o FailOptions) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return nil, err
		}
		rec.Error = errMsg
		rec.LeaseUntil = 0
		rec.UpdatedAt = o.Now
		if o.Refund && rec.Attempts > 0 {
			rec.Attempts--
		}
		if o.Dead {
			rec.State, rec.CompletedAt, rec.RetryAt = InboxDead, o.Now, 0
		} else {
			rec.State, rec.RetryAt = InboxFailed, o.RetryAt
		}
		return nil, nil
	})
	return err
}

func (j *kvInbox) ClaimDue(ctx context.Context, opts ClaimOptions) ([]InboxRecord, error) {
	if nc, ok := j.t.kv.(NativeClaimer); ok {
		vals, err := nc.ClaimInbox(ctx, j.t.group, withLimit(opts))
		if err != nil {
			return nil, err
		}
		out := make([]InboxRecord, 0, len(vals))
		for _, v := range vals {
			rec, err := decodeRecord[InboxRecord](v.Value)
			if err != nil {
				return out, fmt.Errorf("durability: claimed record %s is corrupt: %w", v.Key, err)
			}
			j.t.remember(rec.ID, rec, v.Version, len(v.Value))
			out = append(out, rec)
		}
		return out, nil
	}
	now := opts.Lease.Now
	limit := limitOf(opts)
	type candidate struct {
		id      string
		rec     InboxRecord
		version int64
	}
	var cands []candidate
	err := j.t.scan(ctx, IndexDue, claimWindow(opts), func(id string, rec InboxRecord, v int64) bool {
		ok := false
		switch rec.State {
		case InboxPending:
			ok = rec.CreatedAt < opts.PendingBefore
		case InboxFailed:
			ok = rec.RetryAt <= now
		case InboxProcessing:
			ok = rec.LeaseUntil <= now || reclaims(opts, rec.Owner, rec.LeasedAt)
		}
		if ok {
			cands = append(cands, candidate{id, rec, v})
		}
		// Past 4*limit candidates the scan stops, so a sweep does not read
		// a whole backlog. A pending record's due score is its creation
		// time, so no pending record past the stop is older than the ones
		// kept; a failed or processing record's score is later than its
		// creation, so one past the stop may be older: while reclaiming (a
		// restart, when those are the backlog) the scan reads everything
		// (up to scanBudget), and a chat's records are claimed oldest first.
		return opts.Reclaim != nil || len(cands) < 4*limit
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if a.rec.CreatedAt != b.rec.CreatedAt {
			return cmp.Compare(a.rec.CreatedAt, b.rec.CreatedAt)
		}
		return cmp.Compare(a.rec.ID, b.rec.ID)
	})
	cands = cands[:min(len(cands), limit)]
	// One commit claims them all, unless another claimer took one since
	// the scan (a conflict applies nothing): then they are claimed one by
	// one.
	if len(cands) > 0 {
		writes := make([]Write, len(cands))
		claimed := make([]InboxRecord, len(cands))
		for i, c := range cands {
			claimed[i] = c.rec
			claimInbox(&claimed[i], opts.Lease)
			if writes[i], err = j.t.writeOf(c.id, c.version, &claimed[i]); err != nil {
				return nil, err
			}
		}
		switch err := j.t.kv.Commit(ctx, writes); {
		case err == nil:
			for i, c := range cands {
				j.t.settle(c.id, claimed[i], writes[i])
			}
			return claimed, nil
		case !errors.Is(err, ErrConflict):
			return nil, err
		}
	}
	var out []InboxRecord
	for _, c := range cands {
		rec, err := j.t.update(ctx, c.id, func(rec *InboxRecord) ([]Write, error) {
			ok := false
			switch rec.State {
			case InboxPending:
				ok = rec.CreatedAt < opts.PendingBefore
			case InboxFailed:
				ok = rec.RetryAt <= now
			case InboxProcessing:
				ok = rec.LeaseUntil <= now || reclaims(opts, rec.Owner, rec.LeasedAt)
			}
			if !ok {
				return nil, ErrNotClaimable
			}
			claimInbox(rec, opts.Lease)
			return nil, nil
		})
		switch {
		case err == nil:
			out = append(out, rec)
		case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
		default:
			return out, err
		}
	}
	return out, nil
}

func (j *kvInbox) Get(ctx context.Context, id string) (InboxRecord, error) {
	rec, _, err := j.t.get(ctx, id)
	return rec, err
}

func (j *kvInbox) List(ctx context.Context, f ListFilter) ([]InboxRecord, error) {
	return j.t.list(ctx, f.Limit, func(r *InboxRecord) bool {
		return (f.State == "" || string(r.State) == f.State) && (f.Chat == "" || r.Chat == f.Chat)
	})
}

func (j *kvInbox) Replay(ctx context.Context, id string, now int64) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if rec.State != InboxDone && rec.State != InboxDead && rec.State != InboxFailed {
			return nil, fmt.Errorf("%w: inbox %s is %s (replay takes done, failed or dead)", ErrInvalidState, id, rec.State)
		}
		rec.State = InboxPending
		rec.Attempts, rec.RetryAt, rec.CompletedAt, rec.LeaseUntil = 0, 0, 0, 0
		rec.UpdatedAt = now
		return nil, nil
	})
	return err
}

func (j *kvInbox) Purge(ctx context.Context, before int64) (int, error) {
	return j.t.purge(ctx, before, func(r *InboxRecord) bool {
		return r.State == InboxDone && r.CompletedAt < before
	})
}

// kvOutbox implements OutboxJournal.
type kvOutbox struct {
	t *table[OutboxRecord]
}

func beginOutbox(rec *OutboxRecord, lease Lease) {
	rec.State = OutboxSending
	rec.Attempts++
	rec.Token++
	rec.Owner = lease.Owner
	rec.LeasedAt = lease.Now
	rec.LeaseUntil = lease.Until
	rec.UpdatedAt = lease.Now
}

func (j *kvOutbox) Put(ctx context.Context, p OutboxPut, now int64, lease *Lease) (PutStatus, OutboxRecord, error) {
	for {
		rec := OutboxRecord{Key: p.Key, Provider: p.Provider, Chat: p.Chat, Payload: p.Payload,
			Fingerprint: p.Fingerprint, PreviousPart: p.PreviousPart, Inbound: p.Inbound,
			State: OutboxPending, RetryAt: now, CreatedAt: now, UpdatedAt: now}
		if lease != nil {
			beginOutbox(&rec, *lease)
			rec.RetryAt = 0
		}
		err := j.t.put(ctx, p.Key, 0, &rec, nil)
		if !errors.Is(err, ErrConflict) {
			return Created, rec, err
		}
		existing, _, err := j.t.get(ctx, p.Key)
		if errors.Is(err, ErrNotFound) {
			continue // discarded meanwhile
		}
		return Exists, existing, err
	}
}

func (j *kvOutbox) Begin(ctx context.Context, key string, lease Lease) (OutboxRecord, error) {
	return j.t.update(ctx, key, func(rec *OutboxRecord) ([]Write, error) {
		if rec.State != OutboxPending && rec.State != OutboxFailed {
			return nil, fmt.Errorf("%w: outbox %s is %s", ErrNotClaimable, key, rec.State)
		}
		beginOutbox(rec, lease)
		return nil, nil
	})
}

func (j *kvOutbox) sending(ctx context.Context, key string, token int64, fn func(rec *OutboxRecord)) error {
	_, err := j.t.update(ctx, key, func(rec *OutboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(OutboxSending), token, rec.Token, "outbox", key); err != nil {
			return nil, err
		}
		fn(rec)
		return nil, nil
	})
	return err
}

func (j *kvOutbox) MarkSent(ctx context.Context, key string, token int64, ref string, now int64) error {
	return j.sending(ctx, key, token, func(rec *OutboxRecord) {
		rec.State, rec.Ref, rec.Error = OutboxSent, ref, ""
		rec.LeaseUntil, rec.RetryAt = 0, 0
		rec.UpdatedAt, rec.CompletedAt = now, now
	})
}

func (j *kvOutbox) Extend(ctx context.Context, key string, token, until int64) error {
	return j.sending(ctx, key, token, func(rec *OutboxRecord) { rec.LeaseUntil = until })
}

func (j *kvOutbox) MarkFailed(ctx context.Context, key string, token int64, errMsg string, o FailOptions) error {
	return j.sending(ctx, key, token, func(rec *OutboxRecord) {
		rec.Error = errMsg
		rec.LeaseUntil = 0
		rec.UpdatedAt = o.Now
		if o.Refund && rec.Attempts > 0 {
			rec.Attempts--
		}
		if o.Dead {
			rec.State, rec.CompletedAt, rec.RetryAt = OutboxDead, o.Now, 0
		} else {
			rec.State, rec.RetryAt = OutboxFailed, o.RetryAt
		}
	})
}

func (j *kvOutbox) ClaimDue(ctx context.Context, opts ClaimOptions) ([]ClaimedSend, error) {
	if nc, ok := j.t.kv.(NativeClaimer); ok {
		vals, err := nc.ClaimOutbox(ctx, j.t.group, withLimit(opts))
		if err != nil {
			return nil, err
		}
		out := make([]ClaimedSend, 0, len(vals))
		for _, v := range vals {
			rec, err := decodeRecord[OutboxRecord](v.Value)
			if err != nil {
				return out, fmt.Errorf("durability: claimed record %s is corrupt: %w", v.Key, err)
			}
			j.t.remember(rec.Key, rec, v.Version, len(v.Value))
			out = append(out, ClaimedSend{Record: rec, Ambiguous: v.Ambiguous})
		}
		return out, nil
	}
	now := opts.Lease.Now
	claimable := func(rec *OutboxRecord) (ok, ambiguous bool) {
		switch rec.State {
		case OutboxPending, OutboxFailed:
			return rec.RetryAt <= now, false
		case OutboxSending:
			amb := rec.LeaseUntil <= now || reclaims(opts, rec.Owner, rec.LeasedAt)
			return amb, amb
		}
		return false, false
	}
	var cands []OutboxRecord
	err := j.t.scan(ctx, IndexDue, claimWindow(opts), func(_ string, rec OutboxRecord, _ int64) bool {
		if ok, _ := claimable(&rec); ok {
			cands = append(cands, rec)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(cands, func(a, b OutboxRecord) int {
		if a.CreatedAt != b.CreatedAt {
			return cmp.Compare(a.CreatedAt, b.CreatedAt)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	var out []ClaimedSend
	for _, c := range cands {
		if len(out) == limitOf(opts) {
			break
		}
		var amb bool
		rec, err := j.t.update(ctx, c.Key, func(rec *OutboxRecord) ([]Write, error) {
			ok, a := claimable(rec)
			if !ok {
				return nil, ErrNotClaimable
			}
			amb = a
			if a {
				// An ambiguous claim made no provider call: it charges nothing.
				rec.Attempts--
			}
			beginOutbox(rec, opts.Lease)
			return nil, nil
		})
		switch {
		case err == nil:
			out = append(out, ClaimedSend{Record: rec, Ambiguous: amb})
		case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
		default:
			return out, err
		}
	}
	return out, nil
}

func (j *kvOutbox) ResolveAmbiguous(ctx context.Context, key string, token int64, to OutboxState, now int64) error {
	if to != OutboxUnknown && to != OutboxPending {
		return fmt.Errorf("%w: resolve ambiguous to %q (want unknown or pending)", ErrInvalidState, to)
	}
	return j.sending(ctx, key, token, func(rec *OutboxRecord) {
		rec.State, rec.LeaseUntil, rec.UpdatedAt = to, 0, now
		if to == OutboxUnknown {
			rec.CompletedAt = now
		} else {
			rec.RetryAt = now
		}
	})
}

func (j *kvOutbox) Get(ctx context.Context, key string) (OutboxRecord, error) {
	rec, _, err := j.t.get(ctx, key)
	return rec, err
}

func (j *kvOutbox) List(ctx context.Context, f ListFilter) ([]OutboxRecord, error) {
	return j.t.list(ctx, f.Limit, func(r *OutboxRecord) bool {
		return (f.State == "" || string(r.State) == f.State) && (f.Chat == "" || r.Chat == f.Chat)
	})
}

func (j *kvOutbox) Retry(ctx context.Context, key string, now int64) error {
	_, err := j.t.update(ctx, key, func(rec *OutboxRecord) ([]Write, error) {
		if rec.State != OutboxFailed && rec.State != OutboxDead && rec.State != OutboxUnknown {
			return nil, fmt.Errorf("%w: outbox %s is %s (retry takes failed, dead or unknown)", ErrInvalidState, key, rec.State)
		}
		rec.State, rec.Attempts, rec.RetryAt, rec.CompletedAt, rec.UpdatedAt = OutboxPending, 0, now, 0, now
		return nil, nil
	})
	return err
}

func (j *kvOutbox) Discard(ctx context.Context, key string) error {
	for {
		_, v, err := j.t.get(ctx, key)
		if err != nil {
			return err
		}
		err = j.t.del(ctx, key, v)
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

func (j *kvOutbox) Purge(ctx context.Context, before int64) (int, error) {
	return j.t.purge(ctx, before, func(r *OutboxRecord) bool {
		return r.State == OutboxSent && r.CompletedAt < before
	})
}

// kvState implements StateStore and turns state writes into Kv writes.
type kvState struct {
	kv     Kv
	prefix string
}

func (s *kvState) Get(ctx context.Context, key string) ([]byte, bool, error) {
	b, v, err := s.kv.Get(ctx, s.prefix+key)
	if err != nil || v == 0 {
		return nil, false, err
	}
	return b, true, nil
}

// PutIfAbsent implements StateCreator with a compare-and-set on "absent".
func (s *kvState) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	for {
		err := s.kv.Commit(ctx, []Write{{Key: s.prefix + key, Version: 0, Value: value}})
		if err == nil {
			return value, true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, false, err
		}
		// Another writer created it first: read theirs. (If it was deleted
		// meanwhile, try again.)
		if b, ok, err := s.Get(ctx, key); err != nil || ok {
			return b, false, err
		}
	}
}

func (s *kvState) writes(effects []StateWrite) []Write {
	var ws []Write
	for _, e := range effects {
		ws = append(ws, Write{Key: s.prefix + e.Key, Version: AnyVersion, Value: e.Value, Delete: e.Delete})
	}
	return ws
}
