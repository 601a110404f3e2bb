package host

import (
	"context"
	"fmt"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/kvlease"
	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/lease"
)

// buildLeaders sets up an election for each provider whose session is
// "leader", and refuses what cannot work: a leader-only session without a
// Kv on a backend several processes share, or a channel whose own
// background work runs on every replica.
func (b *Bot) buildLeaders() error {
	b.leaders = lease.Elections{}
	for _, pc := range b.cfg.Channels {
		p, ok := b.providers[pc.ID]
		if !ok || pc.Session != config.SessionLeader {
			continue
		}
		if _, runs := p.(channel.Runner); runs {
			if _, session := p.(channel.SessionRunner); !session {
				return fmt.Errorf("%s: provider %q (%s): session = %q: this channel's background work runs on every replica and cannot follow a leader; leave session out", b.cfg.File, pc.ID, pc.Type, config.SessionLeader)
			}
		}
		e := &lease.Election{Channel: pc.ID, Owner: b.policy.instanceID}
		switch {
		case b.kv != nil:
			key := channel.Env{ID: pc.ID, KeyPrefix: Scope(b.cfg).ID() + "/"}.SessionKey()
			e.Lease = kvlease.New(b.kv, key, b.policy.instanceID, pc.SessionLease.D())
		case b.cfg.Durability.Shared:
			return fmt.Errorf("%s: provider %q: session = %q needs a backend that keeps a Kv to elect the leader in; this %s backend keeps none", b.cfg.File, pc.ID, config.SessionLeader, b.cfg.Durability.Backend)
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
		case e != nil && e.Lease != nil:
			b.runners.Go(func() { b.lead(b.baseCtx, e, sr) })
		case ok:
			if e != nil {
				b.log.Info("session: the backend is this process's alone: it leads the session", "provider", p.ID())
			}
			b.runners.Go(func() {
				b.guard.KeepRunning(b.baseCtx, p.ID(), "running its session", func(ctx context.Context) { sr.RunSession(ctx, lease.Always) })
			})
		}
	}
}

// lead stands in e's election until ctx ends, and runs the channel's
// session (sr, nil for a channel without one) whenever this replica leads.
func (b *Bot) lead(ctx context.Context, e *lease.Election, sr channel.SessionRunner) {
	log := b.log.With("provider", e.Channel, "replica", b.policy.instanceID)
	e.Lease.Lead(ctx, func(holder string) {
		e.SawHolder(holder)
		log.Info("session: held by another replica; standing by", "leader", holder)
	}, func(err error) {
		e.SawHolder("unknown")
		log.Warn("session: leadership lost; the session stops here", "err", err)
	}, func(held context.Context) {
		_, token := e.Lease.Held()
		e.SawHolder(b.policy.instanceID)
		log.Info("session: this replica leads it", "token", token)
		// Sends other replicas handed back are due: deliver them now.
		b.wake.Notify()
		if sr == nil {
			<-held.Done()
			return
		}
		// A panic ends the session as a return does: the leadership is
		// given up, and the election runs it again.
		b.guard.Env(e.Channel).Guard("running its session", func() error { sr.RunSession(held, e); return nil })
		if held.Err() == nil && ctx.Err() == nil {
			log.Warn("session: the channel ended its session; giving the leadership up")
		}
	})
}

// sessionProviders are the entries of cfg whose session is "leader", in
// config order.
func sessionProviders(cfg *config.Config) []config.Channel {
	var out []config.Channel
	for _, p := range cfg.Channels {
		if p.Session == config.SessionLeader {
			out = append(out, p)
		}
	}
	return out
}
