package durability

import (
	"context"
	"errors"
	"fmt"
)

// inboxScores are an inbox record's table scores: due when it becomes
// claimable (pending: its creation; failed: at RetryAt; processing: when the lease
// expires), out of the due index once done or dead.
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

// kvInbox implements InboxJournal.
type kvInbox struct {
	t     *table[InboxRecord]
	out   *table[OutboxRecord]
	state *kvState
	// chats keeps each chat's unfinished records in order (nil unless
	// opened for coordination).
	chats *chatIndex
}

func (j *kvInbox) Put(ctx context.Context, p InboxPut, now int64, lease *Lease) (PutStatus, InboxRecord, error) {
	rec := InboxRecord{ID: p.ID, Provider: p.Provider, Chat: p.Chat, Payload: p.Payload,
		State: InboxPending, CreatedAt: now, UpdatedAt: now}
	if lease != nil {
		claimInbox(&rec, *lease)
	}
	err := j.t.put(ctx, p.ID, 0, &rec, j.chatAdd(&rec))
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

// claimInbox is the inbox's claim transition (postgres/claim.go applies it
// in SQL too).
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

// completed is the inbox's completion transition.
func completed(rec *InboxRecord, c Completion) {
	rec.State, rec.Module, rec.Inputs, rec.Error, rec.LeaseUntil = InboxDone, c.Module, c.Inputs, "", 0
	rec.UpdatedAt, rec.CompletedAt = c.Now, c.Now
}

func (j *kvInbox) Complete(ctx context.Context, id string, token int64, c Completion) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return nil, err
		}
		completed(rec, c)
		return append(j.state.writes(c.Effects), j.chatRemove(rec)...), nil
	})
	return err
}

// CompleteWithSent implements CompleteSender: the inbox record, the sent
// outbox records and the state writes land in one Kv commit.
func (j *kvInbox) CompleteWithSent(ctx context.Context, id string, token int64, c Completion, sent []SentMark) error {
	for {
		rec, v, err := j.t.current(ctx, id)
		if err != nil {
			return err
		}
		if err := leased(string(rec.State), string(InboxProcessing), token, rec.Token, "inbox", id); err != nil {
			return err
		}
		completed(&rec, c)
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
		writes = append(append(append([]Write{w}, writes...), j.state.writes(c.Effects)...), j.chatRemove(&rec)...)
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
		if o.Inputs != nil {
			rec.Inputs = o.Inputs
		}
		rec.LeaseUntil = 0
		rec.UpdatedAt = o.Now
		if o.Refund && rec.Attempts > 0 {
			rec.Attempts--
		}
		if o.Dead {
			rec.State, rec.CompletedAt, rec.RetryAt = InboxDead, o.Now, 0
			return j.chatRemove(rec), nil // a dead letter does not hold its chat up
		}
		rec.State, rec.RetryAt = InboxFailed, o.RetryAt
		return nil, nil
	})
	return err
}

func (j *kvInbox) ClaimDue(ctx context.Context, opts ClaimOptions) ([]InboxRecord, error) {
	return claimDue(ctx, j.t, opts, inboxClaims)
}

// inboxClaims are the inbox's claimRules: pending records created before
// PendingBefore, failed records due by now and processing records whose
// lease expired or that Reclaim names, claimed by claimInbox.
var inboxClaims = &claimRules[InboxRecord, InboxRecord]{
	native:    NativeClaimer.ClaimInbox,
	id:        func(r *InboxRecord) string { return r.ID },
	created:   func(r *InboxRecord) int64 { return r.CreatedAt },
	claimable: inboxClaimable,
	begin: func(r *InboxRecord, lease Lease) InboxRecord {
		claimInbox(r, lease)
		return *r
	},
	claimed: func(r InboxRecord, _ bool) InboxRecord { return r },
	batch:   true,
}

func inboxClaimable(rec *InboxRecord, opts ClaimOptions) bool {
	switch rec.State {
	case InboxPending:
		return rec.CreatedAt < opts.PendingBefore
	case InboxFailed:
		return rec.RetryAt <= opts.Lease.Now
	case InboxProcessing:
		return rec.LeaseUntil <= opts.Lease.Now || reclaims(opts, rec.Owner, rec.LeasedAt)
	}
	return false
}

func (j *kvInbox) Get(ctx context.Context, id string) (InboxRecord, error) {
	rec, _, err := j.t.get(ctx, id)
	return rec, err
}

func (j *kvInbox) List(ctx context.Context, f ListFilter) ([]InboxRecord, error) {
	return j.t.list(ctx, f)
}

func (j *kvInbox) Replay(ctx context.Context, id string, now int64) error {
	_, err := j.t.update(ctx, id, func(rec *InboxRecord) ([]Write, error) {
		if rec.State != InboxDone && rec.State != InboxDead && rec.State != InboxFailed {
			return nil, fmt.Errorf("%w: inbox %s is %s (replay takes done, failed or dead)", ErrInvalidState, id, rec.State)
		}
		add := rec.State.Terminal() // a failed record is in its chat's order already
		rec.State = InboxPending
		rec.Attempts, rec.RetryAt, rec.CompletedAt, rec.LeaseUntil = 0, 0, 0, 0
		rec.UpdatedAt = now
		if add {
			return j.chatAdd(rec), nil
		}
		return nil, nil
	})
	return err
}

func (j *kvInbox) Purge(ctx context.Context, before int64) (int, error) {
	gone, err := j.t.purgeDone(ctx, before, func(r *InboxRecord) bool {
		return r.State == InboxDone && r.CompletedAt < before
	})
	return len(gone), err
}

func (j *kvInbox) PurgeDead(ctx context.Context, before int64) ([]string, error) {
	return j.t.purgeIndexed(ctx, before, func(r *InboxRecord) bool { return r.CompletedAt < before })
}

func (j *kvInbox) Discard(ctx context.Context, id string) error {
	for {
		rec, v, err := j.t.get(ctx, id)
		if err != nil {
			return err
		}
		if rec.State != InboxDead {
			return fmt.Errorf("%w: inbox %s is %s (discard takes a dead record; replay it, or let retention purge it once done)", ErrInvalidState, id, rec.State)
		}
		if err = j.t.del(ctx, id, v, &rec); !errors.Is(err, ErrConflict) {
			return err
		}
	}
}
