package durability

import (
	"context"
	"errors"
	"fmt"
)

// outboxScores are an outbox record's table scores: due at RetryAt while
// pending or failed, when the lease expires while sending, out of the due
// index once sent, dead or unknown.
func outboxScores(r *OutboxRecord) (int64, bool, int64) {
	switch r.State {
	case OutboxPending, OutboxFailed:
		return r.RetryAt, true, r.CreatedAt
	case OutboxSending:
		return r.LeaseUntil, true, r.CreatedAt
	}
	return 0, false, r.CreatedAt
}

// kvOutbox implements OutboxJournal.
type kvOutbox struct {
	t *table[OutboxRecord]
}

// beginOutbox is the outbox's claim transition (postgres/claim.go applies it
// in SQL too).
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
			State: OutboxPending, RetryAt: max(now, p.NotBefore), CreatedAt: now, UpdatedAt: now}
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

// MarkSentWith implements SentWriter.
func (j *kvOutbox) MarkSentWith(ctx context.Context, key string, token int64, now int64, deliver Deliver) (string, error) {
	var ref string
	retry := false
	_, err := j.t.update(ctx, key, func(rec *OutboxRecord) ([]Write, error) {
		if err := leased(string(rec.State), string(OutboxSending), token, rec.Token, "outbox", key); err != nil {
			return nil, err
		}
		r, writes, err := deliver(ctx, retry)
		retry = true
		if err != nil {
			return nil, err
		}
		ref = r
		rec.State, rec.Ref, rec.Error = OutboxSent, r, ""
		rec.LeaseUntil, rec.RetryAt = 0, 0
		rec.UpdatedAt, rec.CompletedAt = now, now
		return writes, nil
	})
	return ref, err
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
	return claimDue(ctx, j.t, opts, outboxClaims)
}

// outboxClaims are the outbox's claimRules: pending and failed records due
// by now, and sending records whose lease expired or that Reclaim names
// (ambiguous: the provider may have accepted them), claimed by beginOutbox.
var outboxClaims = &claimRules[OutboxRecord, ClaimedSend]{
	native:    NativeClaimer.ClaimOutbox,
	id:        func(r *OutboxRecord) string { return r.Key },
	created:   func(r *OutboxRecord) int64 { return r.CreatedAt },
	claimable: outboxClaimable,
	begin: func(r *OutboxRecord, lease Lease) ClaimedSend {
		ambiguous := r.State == OutboxSending
		if ambiguous {
			// An ambiguous claim made no provider call: it charges nothing.
			r.Attempts--
		}
		beginOutbox(r, lease)
		return ClaimedSend{Record: *r, Ambiguous: ambiguous}
	},
	claimed: func(r OutboxRecord, ambiguous bool) ClaimedSend {
		return ClaimedSend{Record: r, Ambiguous: ambiguous}
	},
}

func outboxClaimable(rec *OutboxRecord, opts ClaimOptions) bool {
	switch rec.State {
	case OutboxPending, OutboxFailed:
		return rec.RetryAt <= opts.Lease.Now
	case OutboxSending:
		return rec.LeaseUntil <= opts.Lease.Now || reclaims(opts, rec.Owner, rec.LeasedAt)
	}
	return false
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
	return j.t.list(ctx, f)
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
		rec, v, err := j.t.get(ctx, key)
		if err != nil {
			return err
		}
		err = j.t.del(ctx, key, v, &rec)
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

func (j *kvOutbox) Purge(ctx context.Context, before int64) (int, error) {
	gone, err := j.t.purgeDone(ctx, before, func(r *OutboxRecord) bool {
		return r.State == OutboxSent && r.CompletedAt < before
	})
	return len(gone), err
}

func (j *kvOutbox) PurgeDead(ctx context.Context, before int64) ([]string, error) {
	return j.t.purgeIndexed(ctx, before, func(r *OutboxRecord) bool { return r.CompletedAt < before })
}

// ClaimExpired implements ExpiredClaimer.
func (j *kvOutbox) ClaimExpired(ctx context.Context, key string, lease Lease) (ClaimedSend, error) {
	rec, err := j.t.update(ctx, key, func(rec *OutboxRecord) ([]Write, error) {
		if rec.State != OutboxSending || rec.LeaseUntil > lease.Now {
			return nil, fmt.Errorf("%w: outbox %s is %s (lease until %d)", ErrNotClaimable, key, rec.State, rec.LeaseUntil)
		}
		outboxClaims.begin(rec, lease)
		return nil, nil
	})
	if err != nil {
		return ClaimedSend{}, err
	}
	return ClaimedSend{Record: rec, Ambiguous: true}, nil
}
