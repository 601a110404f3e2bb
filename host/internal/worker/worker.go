package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/internal/rules"
	"github.com/botrun/botrun/host/internal/send"
	"github.com/botrun/botrun/host/internal/sweep"
	"github.com/botrun/botrun/host/internal/turn"
	"github.com/botrun/botrun/host/wasm"
)

// Guest runs the bot's logic for one event (host.Guest).
type Guest interface {
	// Handle runs ev against env and returns the digest of the code that
	// ran it.
	Handle(ctx context.Context, ev abi.Event, env wasm.Env) (ran string, err error)
	// Digest identifies the code that runs the next event.
	Digest() string
}

// Coordination is what serializes each chat's turns across the replicas
// that share the backend ([durability] coordination): a chat's turn is a
// lease with a fencing token in the backend's Kv (Turns), and the replica
// holding it runs the chat's unfinished records oldest first (Order),
// whichever replica admitted them.
type Coordination struct {
	Order durability.ChatOrder
	Turns *lease.ChatTurns
}

// Policy is the inbox policy turns follow.
type Policy struct {
	// Instance is this replica's id, the owner of its claims.
	Instance string
	// Lease is an inbox record's lease; Poll how soon a parked record is
	// due again.
	Lease, Poll time.Duration
	// MaxAttempts is durability.inbox.max_attempts; Backoff the wait
	// before a retry.
	MaxAttempts int
	Backoff     rules.Backoff
}

// Config is what a Worker runs turns with.
type Config struct {
	Inbox durability.InboxJournal
	// Coord is nil without [durability] coordination.
	Coord    *Coordination
	Leases   *lease.Leases
	Sender   *send.Sender
	Turn     turn.Config
	Guest    Guest
	Channels map[string]channel.Channel
	Policy   Policy
	Tracer   observe.Tracer
	Observer *observe.Observer
	Counters *observe.Counters
	Alerts   *observe.Alerts
	Wake     sweep.Wake
	// Stopping reports whether the bot is stopping (a coordinated record
	// then parks for another replica instead of running).
	Stopping func() bool
	// Base is the context turns run under; it ends when the bot is
	// abandoned.
	Base context.Context
	// Boot is when this process started (its claims since are its own).
	Boot  time.Time
	Clock clock.Clock
	Log   *slog.Logger
}

// Worker runs the jobs a dispatcher hands its workers.
type Worker struct {
	c Config
}

// New returns a worker over c.
func New(c Config) *Worker {
	c.Clock = clock.Or(c.Clock)
	return &Worker{c: c}
}

// Handle runs one job on a dispatcher's worker: a claimed send goes to the
// sender, an inbound record gets its turn.
func (w *Worker) Handle(_ context.Context, j dispatch.Job) {
	if j.Send != nil {
		w.c.Sender.DeliverQueued(*j.Send)
		return
	}
	w.takeTurn(j)
}

// ParkDropped gives back, with coordination, the claimed records of jobs a
// stopping dispatcher dropped, due now: another replica runs them at once,
// not once their leases expire.
func (w *Worker) ParkDropped(ctx context.Context, dropped []dispatch.Job) {
	if w.c.Coord == nil {
		return
	}
	for _, j := range dropped {
		if j.Claimed != nil {
			w.park(ctx, j.Claimed, w.nowMs())
		}
	}
}

func (w *Worker) nowMs() int64 { return clock.UnixMilli(w.c.Clock) }
