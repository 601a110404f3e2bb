package channel

import (
	"context"
	"errors"
)

// The values of a [[channels]] entry's session key: which replicas run the
// channel's transport.
const (
	// SessionEvery: every replica runs the channel's transport (the
	// default, except for a LeaderOnly type).
	SessionEvery = "every"
	// SessionLeader: one replica, elected leader through the backend,
	// runs it; the others neither send on it nor admit its messages.
	SessionLeader = "leader"
)

// SessionRunner is implemented by a channel whose transport is a session
// the host starts and stops (a socket, a long poll): RunSession runs it
// until ctx ends, then stops using the transport and returns. With the
// entry's session = "leader" the host calls it only on the replica elected
// leader, with a ctx that ends as soon as that replica stops being the
// leader (its lease lost or the bot stopping), and calls it again each
// time the replica is elected; with "every" it calls it once, on every
// replica, for as long as the bot runs. A RunSession that returns before
// ctx ends gives the leadership up.
//
// fence is the hold on the session: check it right before an act only its
// holder may do (journaling a message the transport received, a send, an
// edit). A process frozen past its lease (SIGSTOP, a long pause) learns
// there that it lost the hold, before its ctx ends.
type SessionRunner interface {
	RunSession(ctx context.Context, fence Fence)
}

// Fence is one process's hold on a channel's session.
type Fence interface {
	// Held reports whether the hold still stands by this process's clock,
	// and its fencing token, greater than every earlier holder's (0 when
	// the session is not elected: session = "every", or a single process).
	Held() (held bool, token int64)
}

// Always is the Fence of a session no election guards: always held, token 0.
var Always Fence = always{}

type always struct{}

func (always) Held() (bool, int64) { return true, 0 }

// ErrNotLeader is wrapped by the error of a send, or an admission, on a
// channel whose session is "leader" in a replica that is not its leader:
// nothing was sent or journaled, and the leader does it. The host hands
// such a send back to the outbox without charging an attempt; messages and
// metrics call it ProviderNotLeader.
var ErrNotLeader = errors.New("ProviderNotLeader")

// SessionKey is the Kv key of the lease that elects the leader of the
// entry's session ("<KeyPrefix>session/<id>"). A tool that must not run
// beside the session (pairing a device) holds the same lease.
func (e Env) SessionKey() string { return e.KeyPrefix + "session/" + e.ID }
