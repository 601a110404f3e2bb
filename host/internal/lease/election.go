package lease

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/kvlease"
)

// Election is this replica's standing for one provider whose session is
// "leader": a lease in the backend's Kv under the bot's scope
// (channel.Env.SessionKey), held under durability.instance_id, whose
// holder runs the channel's transport session and alone sends and admits
// on it.
type Election struct {
	// Channel is the channel's id.
	Channel string
	// Owner is this replica: durability.instance_id.
	Owner string
	// Lease is nil on a backend without a Kv that one process uses: that
	// process is always the leader.
	Lease *kvlease.Lease
	// holder is the last other holder seen while waiting, for messages.
	holder atomic.Value
}

// SawHolder notes the session's holder as this replica last saw it.
func (e *Election) SawHolder(holder string) { e.holder.Store(holder) }

// Held implements channel.Fence.
func (e *Election) Held() (bool, int64) {
	if e.Lease == nil {
		return true, 0
	}
	return e.Lease.Held()
}

// ErrNotLeader is wrapped by the error of a send, or an admission, on a
// channel whose session is "leader" in a replica that is not its leader:
// nothing was sent or journaled, and the leader does it. The host hands
// such a send back to the outbox without charging an attempt; messages and
// metrics call it ProviderNotLeader.
var ErrNotLeader = errors.New("ProviderNotLeader")

// Always is the channel.Fence of a session no election guards: always
// held, token 0.
var Always channel.Fence = always{}

type always struct{}

func (always) Held() (bool, int64) { return true, 0 }

// refusal is the ProviderNotLeader error of this replica.
func (e *Election) refusal() error {
	leader, _ := e.holder.Load().(string)
	if leader == "" {
		leader = "none elected yet"
	}
	return fmt.Errorf("%w: provider %q: this replica (%s) does not lead its session (leader: %s); the leader delivers it", ErrNotLeader, e.Channel, e.Owner, leader)
}

// Elections are this replica's elections, by provider id: one per provider
// whose session is "leader".
type Elections map[string]*Election

// Refuse returns a ProviderNotLeader error when providerID's session is
// "leader" and this replica does not hold it now, else nil. It is checked
// right before the transport is used (a send, an admission): a replica
// frozen past its lease learns here that it lost it.
func (l Elections) Refuse(providerID string) error {
	e, ok := l[providerID]
	if !ok {
		return nil
	}
	if held, _ := e.Held(); held {
		return nil
	}
	return e.refusal()
}
