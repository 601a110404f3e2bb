package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/kvlease"
	"github.com/botrun/botrun/host/config"
)

// election is this replica's standing for one provider whose session is
// "leader": a lease in the backend's Kv under the bot's scope
// (channel.Env.SessionKey), held under durability.instance_id, whose
// holder runs the channel's transport session and alone sends and admits
// on it.
type election struct {
	provider string
	// owner is this replica: durability.instance_id.
	owner string
	// lease is nil on a backend without a Kv that one process uses: that
	// process is always the leader.
	lease *kvlease.Lease
	// holder is the last other holder seen while waiting, for messages.
	holder atomic.Value
}

// Held implements channel.Fence.
func (e *election) Held() (bool, int64) {
	if e.lease == nil {
		return true, 0
	}
	return e.lease.Held()
}

// refusal is the ProviderNotLeader error of this replica.
func (e *election) refusal() error {
	leader, _ := e.holder.Load().(string)
	if leader == "" {
		leader = "none elected yet"
	}
	return fmt.Errorf("%w: provider %q: this replica (%s) does not lead its session (leader: %s); the leader delivers it", channel.ErrNotLeader, e.provider, e.owner, leader)
}

// leaders are this replica's elections, by provider id: one per provider
// whose session is "leader".
type leaders map[string]*election

// Refuse returns a ProviderNotLeader error when providerID's session is
// "leader" and this replica does not hold it now, else nil. It is checked
// right before the transport is used (a send, an admission): a replica
// frozen past its lease learns here that it lost it.
func (l leaders) Refuse(providerID string) error {
	e, ok := l[providerID]
	if !ok {
		return nil
	}
	if held, _ := e.Held(); held {
		return nil
	}
	return e.refusal()
}

// buildLeaders sets up an election for each provider whose session is
// "leader", and refuses what cannot work: a leader-only session without a
// Kv on a backend several processes share, or a channel whose own
// background work runs on every replica.
func (b *Bot) buildLeaders() error {
	b.leaders = leaders{}
	for _, pc := range b.cfg.Providers {
		p, ok := b.providers[pc.ID]
		if !ok || pc.Session != channel.SessionLeader {
			continue
		}
		if _, runs := p.(channel.Runner); runs {
			if _, session := p.(channel.SessionRunner); !session {
				return fmt.Errorf("%s: provider %q (%s): session = %q: this channel's background work runs on every replica and cannot follow a leader; leave session out", b.cfg.File, pc.ID, pc.Type, channel.SessionLeader)
			}
		}
		e := &election{provider: pc.ID, owner: b.policy.instanceID}
		switch {
		case b.kv != nil:
			key := channel.Env{ID: pc.ID, KeyPrefix: Scope(b.cfg).ID() + "/"}.SessionKey()
			e.lease = kvlease.New(b.kv, key, b.policy.instanceID, pc.SessionLease.D())
		case b.cfg.Durability.Shared:
			return fmt.Errorf("%s: provider %q: session = %q needs a backend that keeps a Kv to elect the leader in; this %s backend keeps none", b.cfg.File, pc.ID, channel.SessionLeader, b.cfg.Durability.Backend)
		}
		b.leaders[pc.ID] = e
	}
	return nil
}

// startSessions starts the channels' transport sessions: a leader-only one
// under its election, the others at once.
func (b *Bot) startSessions() {
	for _, p := range b.ordered {
		sr, ok := p.(channel.SessionRunner)
		e := b.leaders[p.ID()]
		switch {
		case e != nil && e.lease != nil:
			b.runners.Go(func() { b.lead(b.baseCtx, e, sr) })
		case ok:
			if e != nil {
				b.log.Info("session: the backend is this process's alone: it leads the session", "provider", p.ID())
			}
			b.runners.Go(func() {
				b.keepRunning(b.baseCtx, p.ID(), "running its session", func(ctx context.Context) { sr.RunSession(ctx, channel.Always) })
			})
		}
	}
}

// lead stands in e's election until ctx ends, and runs the channel's
// session (sr, nil for a channel without one) whenever this replica leads.
func (b *Bot) lead(ctx context.Context, e *election, sr channel.SessionRunner) {
	log := b.log.With("provider", e.provider, "replica", b.policy.instanceID)
	e.lease.Lead(ctx, func(holder string) {
		e.holder.Store(holder)
		log.Info("session: held by another replica; standing by", "leader", holder)
	}, func(err error) {
		e.holder.Store("unknown")
		log.Warn("session: leadership lost; the session stops here", "err", err)
	}, func(held context.Context) {
		_, token := e.lease.Held()
		e.holder.Store(b.policy.instanceID)
		log.Info("session: this replica leads it", "token", token)
		// Sends other replicas handed back are due: deliver them now.
		b.wakeSweeper()
		if sr == nil {
			<-held.Done()
			return
		}
		// A panic ends the session as a return does: the leadership is
		// given up, and the election runs it again.
		b.channelEnv(e.provider).Guard("running its session", func() error { sr.RunSession(held, e); return nil })
		if held.Err() == nil && ctx.Err() == nil {
			log.Warn("session: the channel ended its session; giving the leadership up")
		}
	})
}

// sessionProviders are the entries of cfg whose session is "leader", in
// config order.
func sessionProviders(cfg *config.Config) []config.Provider {
	var out []config.Provider
	for _, p := range cfg.Providers {
		if p.Session == channel.SessionLeader {
			out = append(out, p)
		}
	}
	return out
}
