// Package answers is the journal of what a turn's API calls (fetch) got:
// each answer, or the failure that stood for one, is committed before the
// guest reads it, keyed by the inbound record's id and the call's index
// with the request's fingerprint, so that a turn run again (a crash, a lost
// lease, a failover, an operator's replay) reads the same answers without
// calling the APIs again. It keeps them in the backend's Kv beside the
// journals, and purges them with the inbox records' retention.
//
// answers imports abi, durability and host/internal/fetch; it never
// imports host.
package answers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/fetch"
)

// Answer is one journaled call: what it got (Response, or Error when it
// got no response) for the request whose fingerprint is Fingerprint.
type Answer struct {
	Fingerprint string             `json:"fp"`
	Response    *abi.FetchResponse `json:"response,omitempty"`
	Error       *abi.FetchError    `json:"error,omitempty"`
	// At is when it was journaled, in Unix milliseconds: Purge goes by it.
	At int64 `json:"at"`
	// API, Method and Path (without its query, at most 256 bytes) name
	// the call for an operator; TookMs is how long it took. Never its
	// headers.
	API    string `json:"api,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	TookMs int64  `json:"took_ms,omitempty"`
}

// Numbered is call N (1-based) of a record and its answer.
type Numbered struct {
	N int `json:"n"`
	Answer
}

// Replay is what a's call answers when it is made again with the request
// whose fingerprint is fp: the journaled response (marked replayed) or
// failure. ok is false when a is for another request, or holds neither.
func (a Answer) Replay(fp string) (res abi.FetchResponse, ok bool, err error) {
	switch {
	case a.Fingerprint != fp:
		return abi.FetchResponse{}, false, nil
	case a.Error != nil:
		return abi.FetchResponse{}, true, a.Error
	case a.Response != nil:
		res = *a.Response
		res.Replayed = true
		return res, true, nil
	}
	return abi.FetchResponse{}, false, nil
}

// Journal keeps the answers of one bot's turns in a Kv.
type Journal struct {
	kv     durability.Kv
	prefix string
	// inbox, when set, keeps the answers of the records it still holds
	// from Purge.
	inbox durability.InboxJournal
}

// New returns the journal of the bot whose keys start with prefix (the
// bot's scope, as the channels' Env.KeyPrefix). With inbox, Purge keeps
// the answers of the records inbox still holds.
func New(kv durability.Kv, prefix string, inbox durability.InboxJournal) *Journal {
	return &Journal{kv: kv, prefix: prefix + "fetch/", inbox: inbox}
}

// key is the answer of call n (1-based) of record; the index is padded so
// that a record's answers sort in call order.
func (j *Journal) key(record string, n int) string {
	return j.prefix + record + "/" + fmt.Sprintf("%06d", n)
}

// Get returns the answer of call n of record; ok is false when none was
// journaled.
func (j *Journal) Get(ctx context.Context, record string, n int) (a Answer, ok bool, err error) {
	b, _, err := j.kv.Get(ctx, j.key(record, n))
	if err != nil || b == nil {
		return Answer{}, false, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return Answer{}, false, fmt.Errorf("answers: the answer of call %d of %s is unreadable: %w", n, record, err)
	}
	return a, true, nil
}

// Calls returns the answers journaled for record's calls 1 to max, in call
// order (a call refused before it was made, or to an API whose journal is
// off, has none).
func (j *Journal) Calls(ctx context.Context, record string, max int) ([]Numbered, error) {
	var out []Numbered
	for n := 1; n <= max; n++ {
		a, ok, err := j.Get(ctx, record, n)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, Numbered{N: n, Answer: a})
		}
	}
	return out, nil
}

// Put journals a as the answer of call n of record, replacing the one a
// diverged run journaled before; it returns once the write is durable.
func (j *Journal) Put(ctx context.Context, record string, n int, a Answer) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("answers: encode the answer of call %d of %s: %w", n, record, err)
	}
	at := a.At
	if err := j.kv.Commit(ctx, []durability.Write{{Key: j.key(record, n), Version: durability.AnyVersion, Value: b,
		Group: j.prefix, Order: &at}}); err != nil {
		return fmt.Errorf("answers: journal the answer of call %d of %s: %w", n, record, err)
	}
	return nil
}

// Purge deletes the answers journaled before before (Unix milliseconds)
// whose inbound record is gone (purged by retention, or discarded), in
// batches of 500, and returns how many went. An answer whose record is still
// kept (a dead letter, a record completed after the cut) stays: a replay of
// that record reads it rather than calling the API again.
func (j *Journal) Purge(ctx context.Context, before int64) (int, error) {
	n := 0
	cursor := durability.IndexEntry{Score: math.MinInt64}
	for {
		ids, err := j.kv.Range(ctx, j.prefix, durability.IndexOrder, cursor, before-1, 500)
		if err != nil || len(ids) == 0 {
			return n, err
		}
		cursor = ids[len(ids)-1]
		var writes []durability.Write
		for _, id := range ids {
			kept, err := j.recordKept(ctx, id.Key)
			if err != nil {
				return n, fmt.Errorf("answers: purge: %w", err)
			}
			if !kept {
				writes = append(writes, durability.Write{Key: id.Key, Version: durability.AnyVersion, Delete: true, Group: j.prefix})
			}
		}
		if len(writes) > 0 {
			if err := j.kv.Commit(ctx, writes); err != nil {
				return n, fmt.Errorf("answers: purge: %w", err)
			}
		}
		n += len(writes)
	}
}

// recordKept says whether the inbound record of the answer at key is still
// in the inbox (without an inbox, none is).
func (j *Journal) recordKept(ctx context.Context, key string) (bool, error) {
	if j.inbox == nil {
		return false, nil
	}
	rest := strings.TrimPrefix(key, j.prefix)
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return false, nil
	}
	record := rest[:i]
	_, err := j.inbox.Get(ctx, record)
	switch {
	case errors.Is(err, durability.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// Call is call n (1-based) of record as the host makes it, and its
// fingerprint: the live turn and the dry run map a guest's request the
// same way.
func Call(record string, n int, req abi.FetchRequest) (fetch.Request, string) {
	r := fetch.Request{Method: req.Method, Path: req.Path, Header: req.Headers, Body: req.Bytes(), Key: req.Key}
	if r.Key == "" {
		r.Key = Key(record, n)
	}
	return r, fetch.Fingerprint(req.API, r)
}

// Key is the Idempotency-Key of call n (1-based) of record when the guest
// gives none: "<record>:fetch:<n>".
func Key(record string, n int) string { return record + ":fetch:" + strconv.Itoa(n) }

// DivergedKey is the Idempotency-Key of call n of record when the journal
// holds another request's answer for it (a replay under a changed module):
// Key with the new request's fingerprint, so that an API that honours the
// key does not answer the new request with the first one's answer.
func DivergedKey(record string, n int, fp string) string {
	return Key(record, n) + ":" + fp[:min(12, len(fp))]
}
