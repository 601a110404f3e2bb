package durability

import "context"

// KvDurability implements Backend over any Kv: records are JSON values under
// "<scope>/in/<id>" and "<scope>/out/<key>" (the groups of the two journals),
// conversation state under "<scope>/st/<key>". A record's due score is when it
// becomes claimable (none once settled); its order score is its creation time.
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
