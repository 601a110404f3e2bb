package channel

import "context"

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

// SessionKey is the Kv key of the lease that elects the leader of the
// entry's session ("<KeyPrefix>session/<id>"). A tool that must not run
// beside the session (pairing a device) holds the same lease.
func (e Env) SessionKey() string { return e.KeyPrefix + "session/" + e.ID }
