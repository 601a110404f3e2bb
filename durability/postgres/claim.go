package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/botrun/botrun/durability"
)

// The claims run as one statement each: the candidates are selected FOR
// UPDATE SKIP LOCKED (replicas claiming at once skip each other's rows), the
// claim transition of KvDurability is applied to the JSON record in SQL, and
// the new records come back. They must stay in step with claimInbox,
// beginOutbox and the claimable checks in durability/kvinbox.go and kvoutbox.go; the
// conformance suite runs them.

const claimInboxSQL = `
WITH cand AS (
	SELECT key, convert_from(value, 'UTF8')::jsonb AS r FROM %[1]s
	WHERE grp = $1 AND due IS NOT NULL AND due <= $2
	ORDER BY ord, key
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), ok AS (
	SELECT key, r FROM cand WHERE
		(r->>'state' = 'pending' AND (r->>'created_at')::bigint < $4)
		OR (r->>'state' = 'failed' AND coalesce((r->>'retry_at')::bigint, 0) <= $5)
		OR (r->>'state' = 'processing' AND (coalesce((r->>'lease_until')::bigint, 0) <= $5
			OR ($6 <> '' AND r->>'owner' = $6 AND coalesce((r->>'leased_at')::bigint, 0) < $7)))
	ORDER BY (r->>'created_at')::bigint, key
	LIMIT $8
)
UPDATE %[1]s AS d SET
	value = convert_to(((ok.r - 'retry_at') || jsonb_build_object(
		'state', 'processing',
		'attempts', coalesce((ok.r->>'attempts')::bigint, 0) + 1,
		'token', coalesce((ok.r->>'token')::bigint, 0) + 1,
		'owner', $9::text, 'leased_at', $5::bigint, 'lease_until', $10::bigint, 'updated_at', $5::bigint))::text, 'UTF8'),
	version = d.version + 1,
	due = $10
FROM ok WHERE d.key = ok.key
RETURNING d.key, d.value, d.version, false`

const claimOutboxSQL = `
WITH cand AS (
	SELECT key, convert_from(value, 'UTF8')::jsonb AS r FROM %[1]s
	WHERE grp = $1 AND due IS NOT NULL AND due <= $2
		-- A reclaiming claim looks past now for this instance's sends in
		-- flight; sends held until later (scheduled, backing off) are not
		-- candidates, so they never take the candidates' places.
		AND (due <= $5 OR convert_from(value, 'UTF8')::jsonb->>'state' = 'sending')
	ORDER BY ord, key
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), ok AS (
	SELECT key, r, r->>'state' = 'sending' AS amb FROM cand WHERE
		$4::bigint IS NOT NULL AND -- PendingBefore concerns inbox records only
		((r->>'state' IN ('pending', 'failed') AND coalesce((r->>'retry_at')::bigint, 0) <= $5)
		OR (r->>'state' = 'sending' AND (coalesce((r->>'lease_until')::bigint, 0) <= $5
			OR ($6 <> '' AND r->>'owner' = $6 AND coalesce((r->>'leased_at')::bigint, 0) < $7))))
	ORDER BY (r->>'created_at')::bigint, key
	LIMIT $8
)
UPDATE %[1]s AS d SET
	value = convert_to((ok.r || jsonb_build_object(
		'state', 'sending',
		'attempts', coalesce((ok.r->>'attempts')::bigint, 0) + CASE WHEN ok.amb THEN 0 ELSE 1 END,
		'token', coalesce((ok.r->>'token')::bigint, 0) + 1,
		'owner', $9::text, 'leased_at', $5::bigint, 'lease_until', $10::bigint, 'updated_at', $5::bigint))::text, 'UTF8'),
	version = d.version + 1,
	due = $10
FROM ok WHERE d.key = ok.key
RETURNING d.key, d.value, d.version, ok.amb`

// ClaimInbox implements durability.NativeClaimer.
func (s *Store) ClaimInbox(ctx context.Context, group string, o durability.ClaimOptions) ([]durability.ClaimedValue, error) {
	return s.claim(ctx, claimInboxSQL, group, o)
}

// ClaimOutbox implements durability.NativeClaimer.
func (s *Store) ClaimOutbox(ctx context.Context, group string, o durability.ClaimOptions) ([]durability.ClaimedValue, error) {
	return s.claim(ctx, claimOutboxSQL, group, o)
}

func (s *Store) claim(ctx context.Context, q, group string, o durability.ClaimOptions) ([]durability.ClaimedValue, error) {
	window := o.Lease.Now
	owner, before := "", int64(0)
	if o.Reclaim != nil {
		window = 1<<63 - 1 // a reclaimed lease has not expired yet
		owner, before = o.Reclaim.Owner, o.Reclaim.Before
	}
	// Candidates read per claim: enough to skip the rows that are due but not
	// claimable (pending ones this process holds) without locking a backlog.
	scan := 4*o.Limit + 256
	sql := fmt.Sprintf(q, pgx.Identifier{s.table}.Sanitize())
	var out []durability.ClaimedValue
	err := s.retry(ctx, "claim", false, func(ctx context.Context) error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sql, group, window, scan, o.PendingBefore, o.Lease.Now, owner, before, o.Limit, o.Lease.Owner, o.Lease.Until)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c durability.ClaimedValue
			if err := rows.Scan(&c.Key, &c.Value, &c.Version, &c.Ambiguous); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	// Oldest first, as the statement ordered its candidates.
	sortByCreated(out)
	return out, nil
}

func sortByCreated(vs []durability.ClaimedValue) {
	type created struct {
		CreatedAt int64 `json:"created_at"`
	}
	at := make(map[string]int64, len(vs))
	for _, v := range vs {
		var c created
		json.Unmarshal(v.Value, &c)
		at[v.Key] = c.CreatedAt
	}
	slices.SortStableFunc(vs, func(a, b durability.ClaimedValue) int {
		if c := cmp.Compare(at[a.Key], at[b.Key]); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}
