package durability

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
)

// defaultClaimLimit is how many records a ClaimDue with no Limit claims.
const defaultClaimLimit = 100

// claimRules are what one journal brings to claimDue: which records its
// ClaimDue takes, its claim transition and what it returns per record, with T
// the stored record and C the claimed one. postgres/claim.go applies the same
// rules in SQL (a NativeClaimer): keep them in step.
type claimRules[T, C any] struct {
	// native is the journal's NativeClaimer method.
	native func(NativeClaimer, context.Context, string, ClaimOptions) ([]ClaimedValue, error)
	// id and created order the candidates (oldest created first, then by
	// id); id is also the record's key in its table.
	id      func(*T) string
	created func(*T) int64
	// claimable reports whether ClaimDue takes rec.
	claimable func(rec *T, opts ClaimOptions) bool
	// begin applies the claim transition to a claimable rec and returns what
	// ClaimDue returns for it.
	begin func(rec *T, lease Lease) C
	// claimed returns what ClaimDue returns for a record a NativeClaimer
	// claimed.
	claimed func(rec T, ambiguous bool) C
	// batch (the inbox) stops the scan past 4*limit candidates unless
	// reclaiming, and claims the oldest limit of them in one commit (one by
	// one only if another claimer took one since the scan). Without it (the
	// outbox) the scan reads the whole due window, up to scan.Budget(), and the
	// candidates are claimed one by one, oldest first, past any another
	// claimer took, until limit are claimed.
	batch bool
}

// claimDue is the ClaimDue of both journals: it leases the claimable records
// of t's due window under opts.Lease, oldest created first, at most
// opts.Limit (defaultClaimLimit if 0). A Kv that is a NativeClaimer claims
// them itself.
func claimDue[T, C any](ctx context.Context, t *table[T], opts ClaimOptions, r *claimRules[T, C]) ([]C, error) {
	if opts.Limit <= 0 {
		opts.Limit = defaultClaimLimit
	}
	limit := opts.Limit
	if nc, ok := t.kv.(NativeClaimer); ok {
		vals, err := r.native(nc, ctx, t.group, opts)
		if err != nil {
			return nil, err
		}
		out := make([]C, 0, len(vals))
		for _, v := range vals {
			rec, err := decodeRecord[T](v.Value)
			if err != nil {
				return out, fmt.Errorf("durability: claimed record %s is corrupt: %w", v.Key, err)
			}
			t.remember(r.id(&rec), rec, v.Version, len(v.Value))
			out = append(out, r.claimed(rec, v.Ambiguous))
		}
		return out, nil
	}
	type candidate struct {
		id      string
		rec     T
		version int64
	}
	var cands []candidate
	err := t.scan(ctx, IndexDue, claimWindow(opts), func(id string, rec T, v int64) bool {
		if r.claimable(&rec, opts) {
			cands = append(cands, candidate{id, rec, v})
		}
		// Past 4*limit candidates the inbox's scan stops, so a sweep does
		// not read a whole backlog. A pending record's due score is its
		// creation time, so no pending record past the stop is older than
		// the ones kept; a failed or processing record's score is later
		// than its creation, so one past the stop may be older: while
		// reclaiming (a restart, when those are the backlog) the scan reads
		// everything (up to scan.Budget()), and a chat's records are claimed
		// oldest first.
		return !r.batch || opts.Reclaim != nil || len(cands) < 4*limit
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if ca, cb := r.created(&a.rec), r.created(&b.rec); ca != cb {
			return cmp.Compare(ca, cb)
		}
		return cmp.Compare(r.id(&a.rec), r.id(&b.rec))
	})
	if r.batch {
		cands = cands[:min(len(cands), limit)]
		// One commit claims them all, unless another claimer took one
		// since the scan (a conflict applies nothing): then they are
		// claimed one by one.
		if len(cands) > 0 {
			writes := make([]Write, len(cands))
			recs := make([]T, len(cands))
			claimed := make([]C, len(cands))
			for i, c := range cands {
				recs[i] = c.rec
				claimed[i] = r.begin(&recs[i], opts.Lease)
				if writes[i], err = t.writeOf(c.id, c.version, &recs[i]); err != nil {
					return nil, err
				}
			}
			switch err := t.kv.Commit(ctx, writes); {
			case err == nil:
				for i, c := range cands {
					t.settle(c.id, recs[i], writes[i])
				}
				return claimed, nil
			case !errors.Is(err, ErrConflict):
				return nil, err
			}
		}
	}
	var out []C
	for _, c := range cands {
		if len(out) == limit {
			break
		}
		var res C
		_, err := t.update(ctx, c.id, func(rec *T) ([]Write, error) {
			if !r.claimable(rec, opts) {
				return nil, ErrNotClaimable
			}
			res = r.begin(rec, opts.Lease)
			return nil, nil
		})
		switch {
		case err == nil:
			out = append(out, res)
		case errors.Is(err, ErrNotClaimable), errors.Is(err, ErrNotFound):
			// Another claimer took it, or it was purged, since the scan.
		default:
			return out, err
		}
	}
	return out, nil
}

// claimWindow returns the due-index ceiling for a ClaimDue.
func claimWindow(opts ClaimOptions) int64 {
	if opts.Reclaim != nil {
		return math.MaxInt64 // reclaimed leases have not expired yet
	}
	return opts.Lease.Now
}

// reclaims reports whether opts.Reclaim names a lease owner took at leasedAt.
func reclaims(opts ClaimOptions, owner string, leasedAt int64) bool {
	return opts.Reclaim != nil && owner == opts.Reclaim.Owner && leasedAt < opts.Reclaim.Before
}

// leased checks a fencing token against a record in the leased state.
func leased(state, want string, token, current int64, what, id string) error {
	if state != want || token != current {
		return fmt.Errorf("%w: %s %s (token %d, record %s with token %d)", ErrStaleLease, what, id, token, state, current)
	}
	return nil
}
