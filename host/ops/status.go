package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/kvlease"
	"github.com/botrun/botrun/host/internal/lease"
)

// Status is who holds what among a bot's replicas, as its backend records
// it: the leader of each provider whose session is "leader", and the
// records each replica holds leased. A replica shows by what it holds: one
// that leads nothing and holds no lease is not listed.
type Status struct {
	// At is when it was read (Unix ms).
	At int64 `json:"at"`
	// Sessions are the providers whose session is "leader", in config
	// order.
	Sessions []SessionStatus `json:"sessions"`
	// Replicas are the lease owners, by name.
	Replicas []ReplicaStatus `json:"replicas"`
}

// SessionStatus is the leader of one provider's session.
type SessionStatus struct {
	Provider string `json:"provider"`
	// Leader is the replica (durability.instance_id) holding the session,
	// or "" when none does (never elected, or given up on a clean stop).
	Leader string `json:"leader,omitempty"`
	// Token is the fencing token of the last hold.
	Token int64 `json:"token"`
	// Until is when the hold expires unless renewed (Unix ms, by the
	// leader's clock).
	Until int64 `json:"until,omitempty"`
	// Expired is set when Until passed: the leader stopped renewing (it
	// died or froze), and another replica takes the session over.
	Expired bool `json:"expired,omitempty"`
}

// ReplicaStatus is what one replica (a lease owner) holds.
type ReplicaStatus struct {
	Owner string `json:"owner"`
	// Leads are the providers whose session it leads.
	Leads []string `json:"leads,omitempty"`
	// Held are the records it holds leased, by kind (see leaseKinds).
	Held map[string]HeldLeases `json:"held,omitempty"`
}

// HeldLeases counts the records of one kind a replica holds leased.
type HeldLeases struct {
	Count int `json:"count"`
	// Expired of them are past their lease: their owner stopped (died or
	// froze) and another replica takes them over.
	Expired int `json:"expired,omitempty"`
	// Earliest is the earliest lease expiry among them (Unix ms).
	Earliest int64 `json:"earliest_until"`
}

// Lease is one leased record: its owner and lease expiry (Unix ms).
type Lease struct {
	Owner string
	Until int64
}

// leaseKinds are the kinds of leased records a status counts, in the order
// they are shown: inbound records, sends in flight, and chat turns
// ([durability] coordination).
var leaseKinds = []struct {
	name string
	list func(ctx context.Context, op *Operator) ([]Lease, error)
}{
	{"inbox", func(ctx context.Context, op *Operator) ([]Lease, error) {
		recs, err := op.in.List(ctx, durability.ListFilter{State: string(durability.InboxProcessing)})
		return leasesOf(recs, err, func(r durability.InboxRecord) Lease { return Lease{r.Owner, r.LeaseUntil} })
	}},
	{"outbox", func(ctx context.Context, op *Operator) ([]Lease, error) {
		recs, err := op.out.List(ctx, durability.ListFilter{State: string(durability.OutboxSending)})
		return leasesOf(recs, err, func(r durability.OutboxRecord) Lease { return Lease{r.Owner, r.LeaseUntil} })
	}},
	{"turn", func(ctx context.Context, op *Operator) ([]Lease, error) {
		if op.o.Kv == nil {
			return nil, nil
		}
		held, err := lease.HeldTurns(ctx, op.o.Kv, op.o.Scope+"turn/")
		return leasesOf(held, err, func(h lease.Holder) Lease { return Lease{h.Owner, h.Until} })
	}},
}

// leasesOf is the lease of each of recs (listed with err).
func leasesOf[R any](recs []R, err error, lease func(R) Lease) ([]Lease, error) {
	out := make([]Lease, len(recs))
	for i, r := range recs {
		out[i] = lease(r)
	}
	return out, err
}

// LeaseKinds names the kinds of leased records a Status counts, in order.
func LeaseKinds() []string {
	names := make([]string, len(leaseKinds))
	for i, k := range leaseKinds {
		names[i] = k.name
	}
	return names
}

// Status reads who holds what among the bot's replicas from its journals
// and its backend's Kv (none: the sessions show no leader), from the
// running bot or from another process.
func (op *Operator) Status(ctx context.Context) (Status, error) {
	now := op.nowMs()
	st := Status{At: now, Sessions: []SessionStatus{}, Replicas: []ReplicaStatus{}}
	replicas := map[string]*ReplicaStatus{}
	replica := func(owner string) *ReplicaStatus {
		r := replicas[owner]
		if r == nil {
			r = &ReplicaStatus{Owner: owner, Held: map[string]HeldLeases{}}
			replicas[owner] = r
		}
		return r
	}
	for _, id := range op.o.Sessions {
		s := SessionStatus{Provider: id}
		if op.o.Kv != nil {
			key := channel.Env{ID: id, KeyPrefix: op.o.Scope}.SessionKey()
			rec, _, err := kvlease.Read(ctx, op.o.Kv, key)
			if err != nil {
				return Status{}, fmt.Errorf("status: the leader of %s: %w", id, err)
			}
			s.Leader, s.Token, s.Until = rec.Owner, rec.Token, rec.Until
			s.Expired = rec.Owner != "" && rec.Until <= now
		}
		if s.Leader != "" && !s.Expired {
			r := replica(s.Leader)
			r.Leads = append(r.Leads, id)
		}
		st.Sessions = append(st.Sessions, s)
	}
	for _, kind := range leaseKinds {
		leases, err := kind.list(ctx, op)
		if err != nil {
			return Status{}, fmt.Errorf("status: the %s leases: %w", kind.name, err)
		}
		for _, l := range leases {
			r := replica(l.Owner)
			h := r.Held[kind.name]
			h.Count++
			if l.Until <= now {
				h.Expired++
			}
			if h.Earliest == 0 || l.Until < h.Earliest {
				h.Earliest = l.Until
			}
			r.Held[kind.name] = h
		}
	}
	for _, r := range replicas {
		st.Replicas = append(st.Replicas, *r)
	}
	slices.SortFunc(st.Replicas, func(a, b ReplicaStatus) int { return strings.Compare(a.Owner, b.Owner) })
	return st, nil
}
