package durability

import (
	"context"
	"errors"
	"fmt"
)

// KvDurability implements Backend over any Kv: records are JSON values under
// "<scope>/in/<id>" and "<scope>/out/<key>" (the groups of the two journals),
// conversation state under "<scope>/st/<key>". A record's due score is when it
// becomes claimable (none once settled); its order score is its creation time.
// The records retention keeps (dead inbound records, dead and unknown sends)
// also have a marker key in an index of their state ("<scope>/in.dead/<id>",
// "<scope>/out.dead/<key>", "<scope>/out.unknown/<key>"), so a list of them
// never walks the done and sent records.
// The records this process wrote last are cached, within a budget of bytes
// (DefaultRecordCacheBytes unless WithRecordCache says otherwise).
//
// The files: kvtable.go stores records in a Kv (the cache, the two indexes,
// the scan), kvclaim.go is the ClaimDue both journals share, kvinbox.go,
// kvoutbox.go and kvstate.go are the journals.
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
func (d *KvDurability) Open(ctx context.Context, scope Scope) (Journals, error) {
	p := scope.ID() + "/"
	in := &table[InboxRecord]{kv: d.kv, group: p + "in/", scores: inboxScores, cache: d.cache,
		fields:  func(r *InboxRecord) (string, string) { return string(r.State), r.Chat },
		indexed: []string{string(InboxDead)},
		live:    []string{string(InboxPending), string(InboxFailed), string(InboxProcessing)}}
	out := &table[OutboxRecord]{kv: d.kv, group: p + "out/", scores: outboxScores, cache: d.cache,
		fields:  func(r *OutboxRecord) (string, string) { return string(r.State), r.Chat },
		indexed: []string{string(OutboxDead), string(OutboxUnknown)},
		live:    []string{string(OutboxPending), string(OutboxFailed), string(OutboxSending)}}
	indexed, err := d.indexStates(ctx, scope.ID(), in, out)
	if err != nil {
		return Journals{}, err
	}
	in.stateIndexed, out.stateIndexed = indexed, indexed
	st := &kvState{kv: d.kv, prefix: p + "st/"}
	return Journals{Inbox: &kvInbox{t: in, out: out, state: st}, Outbox: &kvOutbox{t: out}, State: st}, nil
}

// stateIndexVersion is the value of a scope's "<scope>/idx/states" key once
// its records are in their state indexes.
const stateIndexVersion = "1"

// indexStates reports whether the records of scope (its ID) are in their state
// indexes, and puts them there first if the store was written before the
// indexes existed (once per scope: it reads every record). A store opened
// read-only (its writes refused with ErrReadOnly) is reported unindexed: its
// lists of an indexed state walk the creation index until a writer opens it.
// Any other failure fails the open: the scope would stay unindexed, its dead
// letters past the first 20,000 records unlisted. Every process sharing the
// store must write the markers: a botrun older than the indexes that moves a
// record into an indexed state afterwards leaves it out.
func (d *KvDurability) indexStates(ctx context.Context, scope string, in *table[InboxRecord], out *table[OutboxRecord]) (bool, error) {
	key := scope + "/idx/states"
	b, v, err := d.kv.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("durability: reading %s: %w", key, err)
	}
	if v != 0 && string(b) == stateIndexVersion {
		return true, nil
	}
	err = in.markAll(ctx)
	if err == nil {
		err = out.markAll(ctx)
	}
	if err == nil {
		err = d.kv.Commit(ctx, []Write{{Key: key, Version: AnyVersion, Value: []byte(stateIndexVersion)}})
	}
	switch {
	case errors.Is(err, ErrReadOnly):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("durability: indexing the records of %s by state (once, for a store written by an older botrun; opening again retries it): %w", scope, err)
	}
	return true, nil
}

// Close implements Backend.
func (d *KvDurability) Close() error { return d.kv.Close() }

// Kv returns the store the journals live in; the host keeps other per-scope
// data (the webchat transcript) beside them.
func (d *KvDurability) Kv() Kv { return d.kv }
