package eventjournal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/botrun/botrun/durability"
)

// Journal is an append-only event journal whose events workers claim under
// leases with fencing tokens. Times are the journal's clock.
type Journal interface {
	// Append records e. An id the journal holds is refused with ErrExists
	// (the existing record is returned with it).
	Append(ctx context.Context, e Event) (EventRecord, error)
	// Get returns the event, or ErrNotFound.
	Get(ctx context.Context, id string) (EventRecord, error)
	// List returns the events f selects, oldest Time first.
	List(ctx context.Context, f Filter) ([]EventRecord, error)
	// Replay makes a done, failed or dead event pending again, with its
	// attempts reset, so the next claim takes it.
	Replay(ctx context.Context, id string) error
	// Claim leases due events of one channel to a worker, in due order:
	// pending events whose time has come, failed events due again and
	// claimed events whose lease expired, each under a fresh fencing token.
	// A reserved channel (the bot's, "botrun:…") is refused with ErrReserved.
	Claim(ctx context.Context, o ClaimOptions) ([]EventRecord, error)
	// Extend extends a claimed event's lease to lease from now.
	Extend(ctx context.Context, id string, token int64, lease time.Duration) error
	// Complete marks a claimed event done. A token that is not the
	// event's current one is refused with ErrStaleLease.
	Complete(ctx context.Context, id string, token int64) error
	// Fail marks a claimed event failed (due again at RetryAt) or dead.
	Fail(ctx context.Context, id string, token int64, errMsg string, o FailOptions) error
	// Purge deletes done events completed before before; it returns how
	// many. Dead events stay until replayed, and so do reserved channels'
	// events (the bot purges its own by its retention).
	Purge(ctx context.Context, before time.Time) (int, error)
	// Close lets the operations already called finish and refuses later
	// ones with ErrClosed.
	Close() error
}

// Filter selects events for List; its zero value selects them all.
type Filter struct {
	// Channel selects one channel (empty: any).
	Channel string
	// Type selects one type (empty: any).
	Type string
	// State selects one state (empty: any).
	State State
	// Since and Until bound the events' Time, inclusive (zero: unbounded).
	Since, Until time.Time
	// Limit caps the result (0: no cap).
	Limit int
}

// ClaimOptions say what Claim takes and for whom.
type ClaimOptions struct {
	// Channel is the channel claimed; empty claims only events without a
	// channel.
	Channel string
	// Owner names the worker.
	Owner string
	// Lease is how long the worker holds each event unless it extends
	// (default 60 s).
	Lease time.Duration
	// Limit caps how many events are claimed (default 10).
	Limit int
}

// FailOptions settle a failed event.
type FailOptions struct {
	// RetryAt is when the event is due again (zero: now).
	RetryAt time.Time
	// Dead gives the event up until an operator replays it.
	Dead bool
}

// KvJournal is a Journal kept in a durability.Kv (see Group for the layout):
// the file journals are KvJournals over a file store.
type KvJournal struct {
	kv  durability.Kv
	now func() time.Time
}

// NewKvJournal returns the journal kept in kv; now is its clock (nil:
// time.Now).
func NewKvJournal(kv durability.Kv, now func() time.Time) *KvJournal {
	if now == nil {
		now = time.Now
	}
	return &KvJournal{kv: kv, now: now}
}

// Kv returns the store the journal lives in.
func (j *KvJournal) Kv() durability.Kv { return j.kv }

func (j *KvJournal) nowMs() int64 { return j.now().UnixMilli() }

// Close closes the store.
func (j *KvJournal) Close() error { return j.kv.Close() }

// NextVersion is the version a write over version old stores: past it, and
// past any version the key had before a delete (no ABA on re-creation).
func NextVersion(old int64) int64 {
	return max(old+1, time.Now().UnixNano())
}

func (j *KvJournal) get(ctx context.Context, id string) (EventRecord, int64, error) {
	b, v, err := j.kv.Get(ctx, Key(id))
	if err != nil {
		return EventRecord{}, 0, err
	}
	if v == 0 {
		return EventRecord{}, 0, fmt.Errorf("%w: event %s", ErrNotFound, id)
	}
	rec, err := DecodeRecord(b)
	if err != nil {
		return rec, 0, fmt.Errorf("events: event %s is unreadable (restore the journal from a backup): %w", id, err)
	}
	return rec, v, nil
}

// update applies fn to the current record and stores it, again on a
// version conflict.
func (j *KvJournal) update(ctx context.Context, id string, fn func(*EventRecord) error) (EventRecord, error) {
	for {
		rec, v, err := j.get(ctx, id)
		if err != nil {
			return rec, err
		}
		if err := fn(&rec); err != nil {
			return rec, err
		}
		w, err := StoredWrite(&rec, v, NextVersion(v))
		if err != nil {
			return rec, err
		}
		err = j.kv.Commit(ctx, []durability.Write{w})
		if !errors.Is(err, durability.ErrConflict) {
			return rec, err
		}
	}
}

// Append implements Journal.
func (j *KvJournal) Append(ctx context.Context, e Event) (EventRecord, error) {
	if strings.HasPrefix(e.Channel, Reserved) || strings.HasPrefix(e.ID, Reserved) {
		return EventRecord{}, fmt.Errorf("%w (channel %q, id %q)", ErrReserved, e.Channel, e.ID)
	}
	if e.Type == "" {
		return EventRecord{}, errors.New("events: an event needs a type")
	}
	if len(e.Meta) > 0 && !json.Valid(e.Meta) {
		return EventRecord{}, errors.New("events: meta is not valid JSON")
	}
	now := j.nowMs()
	at := now
	if !e.Time.IsZero() {
		at = e.Time.UnixMilli()
	}
	if e.ID == "" {
		e.ID = randomID(at)
	}
	rec := EventRecord{ID: e.ID, Channel: e.Channel, Type: e.Type, Time: at, Payload: e.Payload, Meta: e.Meta,
		State: Pending, UpdatedAt: now}
	w, err := StoredWrite(&rec, 0, NextVersion(0))
	if err != nil {
		return rec, err
	}
	err = j.kv.Commit(ctx, []durability.Write{w})
	if errors.Is(err, durability.ErrConflict) {
		old, _, gerr := j.get(ctx, e.ID)
		if gerr != nil {
			return old, gerr
		}
		return old, fmt.Errorf("%w: %s", ErrExists, e.ID)
	}
	return rec, err
}

func randomID(at int64) string {
	b := make([]byte, 8)
	rand.Read(b)
	return fmt.Sprintf("ev-%011x-%s", at, hex.EncodeToString(b))
}

// Get implements Journal.
func (j *KvJournal) Get(ctx context.Context, id string) (EventRecord, error) {
	rec, _, err := j.get(ctx, id)
	return rec, err
}

const scanPage = 256

// scan reads the events of index ix after the cursor with score <= max,
// calling keep for each until it returns false.
func (j *KvJournal) scan(ctx context.Context, ix durability.Index, after durability.IndexEntry, max int64, keep func(rec EventRecord, version int64) (bool, error)) error {
	for {
		entries, err := j.kv.Range(ctx, Group, ix, after, max, scanPage)
		if err != nil {
			return err
		}
		for _, e := range entries {
			rec, v, err := j.get(ctx, strings.TrimPrefix(e.Key, Group))
			if errors.Is(err, ErrNotFound) {
				continue // deleted since the range
			}
			if err != nil {
				return err
			}
			if more, err := keep(rec, v); !more || err != nil {
				return err
			}
		}
		if len(entries) < scanPage {
			return nil
		}
		after = entries[len(entries)-1]
	}
}

// List implements Journal.
func (j *KvJournal) List(ctx context.Context, f Filter) ([]EventRecord, error) {
	from := durability.IndexEntry{Score: math.MinInt64}
	if !f.Since.IsZero() {
		// Past every key of score Since-1: the range starts at Since.
		from = durability.IndexEntry{Score: f.Since.UnixMilli() - 1, Key: "\xff"}
	}
	until := int64(math.MaxInt64)
	if !f.Until.IsZero() {
		until = f.Until.UnixMilli()
	}
	var out []EventRecord
	err := j.scan(ctx, durability.IndexOrder, from, until, func(r EventRecord, _ int64) (bool, error) {
		if (f.Channel == "" || r.Channel == f.Channel) && (f.Type == "" || r.Type == f.Type) && (f.State == "" || r.State == f.State) {
			out = append(out, r)
		}
		return f.Limit <= 0 || len(out) < f.Limit, nil
	})
	return out, err
}

// Replay implements Journal.
func (j *KvJournal) Replay(ctx context.Context, id string) error {
	now := j.nowMs()
	_, err := j.update(ctx, id, func(r *EventRecord) error {
		if r.State != Done && r.State != Failed && r.State != Dead {
			return fmt.Errorf("%w: event %s is %s (replay takes done, failed or dead)", ErrInvalidState, id, r.State)
		}
		r.State = Pending
		r.Attempts, r.RetryAt, r.CompletedAt, r.LeaseUntil = 0, 0, 0, 0
		r.UpdatedAt = now
		return nil
	})
	return err
}

// claimable reports whether a claim at now takes r.
func claimable(r *EventRecord, now int64) bool {
	due, ok := r.Due()
	return ok && due <= now
}

// Claim implements Journal.
func (j *KvJournal) Claim(ctx context.Context, o ClaimOptions) ([]EventRecord, error) {
	if o.Lease <= 0 {
		o.Lease = 60 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 10
	}
	if strings.HasPrefix(o.Channel, Reserved) {
		return nil, fmt.Errorf("%w: a worker cannot claim channel %q (the bot's own records)", ErrReserved, o.Channel)
	}
	now := j.nowMs()
	var out []EventRecord
	err := j.scan(ctx, durability.IndexDue, durability.IndexEntry{Score: math.MinInt64}, now, func(r EventRecord, _ int64) (bool, error) {
		if r.Channel != o.Channel || !claimable(&r, now) {
			return true, nil
		}
		rec, err := j.update(ctx, r.ID, func(r *EventRecord) error {
			if r.Channel != o.Channel || !claimable(r, now) {
				return ErrNotClaimable
			}
			r.State = Processing
			r.Attempts++
			r.Token++
			r.Owner, r.LeasedAt, r.LeaseUntil = o.Owner, now, now+o.Lease.Milliseconds()
			r.RetryAt, r.UpdatedAt = 0, now
			return nil
		})
		switch {
		case err == nil:
			out = append(out, rec)
		case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
			// Another worker took it, or it was purged, since the range.
		default:
			return false, err
		}
		return len(out) < o.Limit, nil
	})
	return out, err
}

// leased checks a fencing token against a claimed event.
func leased(r *EventRecord, token int64) error {
	if r.State != Processing || r.Token != token {
		return fmt.Errorf("%w: event %s (token %d, event %s with token %d)", ErrStaleLease, r.ID, token, r.State, r.Token)
	}
	return nil
}

// Extend implements Journal.
func (j *KvJournal) Extend(ctx context.Context, id string, token int64, lease time.Duration) error {
	until := j.nowMs() + lease.Milliseconds()
	_, err := j.update(ctx, id, func(r *EventRecord) error {
		if err := leased(r, token); err != nil {
			return err
		}
		r.LeaseUntil = until
		return nil
	})
	return err
}

// Complete implements Journal.
func (j *KvJournal) Complete(ctx context.Context, id string, token int64) error {
	now := j.nowMs()
	_, err := j.update(ctx, id, func(r *EventRecord) error {
		if err := leased(r, token); err != nil {
			return err
		}
		r.State, r.Error, r.LeaseUntil = Done, "", 0
		r.UpdatedAt, r.CompletedAt = now, now
		return nil
	})
	return err
}

// Fail implements Journal.
func (j *KvJournal) Fail(ctx context.Context, id string, token int64, errMsg string, o FailOptions) error {
	now := j.nowMs()
	_, err := j.update(ctx, id, func(r *EventRecord) error {
		if err := leased(r, token); err != nil {
			return err
		}
		r.Error, r.LeaseUntil, r.UpdatedAt = errMsg, 0, now
		switch {
		case o.Dead:
			r.State, r.CompletedAt, r.RetryAt = Dead, now, 0
		case o.RetryAt.IsZero():
			r.State, r.RetryAt = Failed, now
		default:
			r.State, r.RetryAt = Failed, o.RetryAt.UnixMilli()
		}
		return nil
	})
	return err
}

// Purge implements Journal.
func (j *KvJournal) Purge(ctx context.Context, before time.Time) (int, error) {
	limit := before.UnixMilli()
	type victim struct {
		id string
		v  int64
	}
	var victims []victim
	err := j.scan(ctx, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, limit, func(r EventRecord, v int64) (bool, error) {
		// The bot purges its own records by its durability.retention.
		if r.State == Done && r.CompletedAt < limit && !strings.HasPrefix(r.Channel, Reserved) {
			victims = append(victims, victim{r.ID, v})
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, vc := range victims {
		err := j.kv.Commit(ctx, []durability.Write{{Key: Key(vc.id), Version: vc.v, Delete: true, Group: Group}})
		switch {
		case err == nil:
			n++
		case errors.Is(err, durability.ErrConflict):
			// Replayed since the scan: it stays.
		default:
			return n, err
		}
	}
	return n, nil
}
