// Package sweep is the sweeper: every durability.poll (or when woken) it
// claims the due sends and the due or abandoned inbound records and queues
// them on the per-chat queue (dispatch), and it purges what retention
// lets go. Its first sweeps after a start reclaim the leases this instance
// held before it.
//
// sweep imports durability and host/internal/{clock,dispatch,lease}; it
// never imports host.
package sweep

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/dispatch"
	"github.com/botrun/botrun/host/internal/lease"
)

// Wake asks the sweeper for a sweep now; wakes sent while one is pending
// are merged.
type Wake chan struct{}

// NewWake returns a Wake.
func NewWake() Wake { return make(Wake, 1) }

// Notify asks for a sweep now, without waiting.
func (w Wake) Notify() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Config is what a Sweeper sweeps and how often.
type Config struct {
	Inbox  durability.InboxJournal
	Outbox durability.OutboxJournal
	Queue  *dispatch.Dispatcher
	Leases *lease.Leases
	// Instance is durability.instance_id; Boot is when this process
	// started.
	Instance string
	Boot     time.Time
	// Poll is durability.poll; Retention durability.retention (0: kept).
	Poll, Retention time.Duration
	// InboxLease and OutboxLease are the records' lease lengths.
	InboxLease, OutboxLease time.Duration
	// Workers is bot.workers.
	Workers int
	Wake    Wake
	Log     *slog.Logger
	Clock   clock.Clock
}

// Sweeper is the sweep loop (see the package doc).
type Sweeper struct {
	c        Config
	stopping atomic.Bool
	done     chan struct{}
	// sendsOut counts the claimed sends of the last outbox claim that the
	// workers have not delivered yet; sendsFull is set when that claim was
	// full, inboxBacklog when the last inbound claim was.
	sendsOut     atomic.Int64
	sendsFull    atomic.Bool
	inboxBacklog atomic.Bool
	// sweeps counts the sweeps Run has finished.
	sweeps atomic.Int64
	// also is what the retention purge deletes beside the journals.
	also []Purger
	// started is the monotonic reading (Clock.Elapsed) when New ran: how
	// long this process has swept, which no step of the wall clock moves.
	started time.Duration
	// horizon is the time the retention purge judges age by.
	horizon *clock.Horizon
}

// Sweeps is how many sweeps Run has finished: a test that checks nothing
// more happens waits for a few more sweeps, not for a while.
func (s *Sweeper) Sweeps() int64 { return s.sweeps.Load() }

// New returns a sweeper of c; Run runs it.
func New(c Config) *Sweeper {
	c.Clock = clock.Or(c.Clock)
	s := &Sweeper{c: c, done: make(chan struct{}), started: c.Clock.Elapsed(), horizon: clock.NewHorizon(c.Clock, c.Retention)}
	c.Queue.SetOnLow(s.Batch()/4, s.queueLow)
	return s
}

// Wake asks for a sweep now (an enqueue, a replay, a stop).
func (s *Sweeper) Wake() { s.c.Wake.Notify() }

// Stop makes the loop return at its next turn (Wake it to make that now);
// Done is closed once it has.
func (s *Sweeper) Stop() { s.stopping.Store(true) }

// Done is closed when Run has returned.
func (s *Sweeper) Done() <-chan struct{} { return s.done }

// Run sweeps every durability.poll: due sends, ambiguous sends, due and
// abandoned inbound records, and the retention purge, until Stop or ctx
// ends. Its first sweep also reclaims the leases this instance id held
// before this start; so do the next ones until those leases would have
// expired anyway (a claim that skips a row locked at that moment gets it
// on the next sweep, not a lease later).
func (s *Sweeper) Run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.c.Poll)
	defer t.Stop()
	// The purge runs every minute (or retention, if shorter) of monotonic
	// time: a wall clock stepped back does not hold it off.
	lastPurge := time.Duration(-1 << 62)
	for first := true; ; first = false {
		if s.stopping.Load() {
			return
		}
		s.sweep(ctx, first)
		s.sweeps.Add(1)
		if s.c.Retention > 0 && s.c.Clock.Elapsed()-lastPurge > min(s.c.Retention, time.Minute) {
			s.Purge(ctx)
			lastPurge = s.c.Clock.Elapsed()
		}
		select {
		case <-t.C:
		case <-s.c.Wake:
		case <-ctx.Done():
			return
		}
	}
}

// Batch is the most inbound records one sweep claims: enough that a
// restart with a backlog refills the queue in few sweeps, few enough that the
// claimed records start well within their lease.
func (s *Sweeper) Batch() int { return max(4*s.c.Workers, 256) }

// reclaimBatch is the most records a reclaiming sweep claims at once.
const reclaimBatch = 20000

// sendClaim is the most due sends one sweep claims: at most half the
// workers, so sends to a slow channel leave the other half to inbound
// messages, and at most 100.
func (s *Sweeper) sendClaim() int { return min(max(s.c.Workers/2, 1), 100) }

// SendDelivered notes that a worker finished a claimed send: once the
// claim's sends are all delivered, a full claim sweeps again now, as more
// may be due.
func (s *Sweeper) SendDelivered() {
	if s.sendsOut.Add(-1) == 0 && s.sendsFull.Load() {
		s.Wake()
	}
}

func (s *Sweeper) sweep(ctx context.Context, first bool) {
	// The first lease after a start also reclaims what this instance id
	// leased before Boot (a previous run of it). Measured on the monotonic
	// clock, and never while the wall clock stands before Boot: a clock
	// stepped back across the start would make this run's own leases look
	// older than Boot, and reclaiming them again and again would charge
	// messages in flight as crashes until they were dead-lettered.
	var reclaim *durability.Reclaim
	if (first || s.c.Clock.Elapsed()-s.started < max(s.c.InboxLease, s.c.OutboxLease)) && s.c.Clock.Now().UnixMilli() >= s.c.Boot.UnixMilli() {
		reclaim = &durability.Reclaim{Owner: s.c.Instance, Before: s.c.Boot.UnixMilli()}
	}
	// Due sends are delivered by the workers, each behind its chat's
	// earlier jobs, so a slow channel never delays the sweep loop, which
	// goes on claiming inbound records; a claim takes at most half the
	// workers' worth of sends. A new claim waits until the last one's sends
	// are delivered, which keeps a chat's sends in order across sweeps.
	if s.sendsOut.Load() == 0 {
		limit := s.sendClaim()
		claimed, err := s.c.Outbox.ClaimDue(ctx, durability.ClaimOptions{Lease: s.c.Leases.Lease(s.c.OutboxLease), Limit: limit, Reclaim: reclaim})
		if err != nil && ctx.Err() == nil {
			s.c.Log.Error("sweep: claiming due sends failed", "err", err)
		}
		s.sendsOut.Store(int64(len(claimed)))
		s.sendsFull.Store(len(claimed) == limit)
		for i := range claimed {
			c := &claimed[i]
			// Stopping: the lease expires and the send is reclaimed.
			s.c.Queue.Submit(dispatch.Job{ChatKey: dispatch.ChatKey(c.Record.Provider, c.Record.Chat), ID: c.Record.Key, Send: c})
		}
	}
	room := s.Batch() - s.c.Queue.Queued()
	if reclaim != nil {
		// A restart's first sweeps take the whole backlog this instance
		// left, oldest first, so each chat's messages are queued in order.
		room = max(room, reclaimBatch)
	}
	if room <= 0 || s.stopping.Load() {
		return
	}
	now := s.c.Clock.Now()
	l := s.c.Leases.Lease(s.c.InboxLease)
	recs, err := s.c.Inbox.ClaimDue(ctx, durability.ClaimOptions{
		Lease: l,
		Limit: room,
		// Every pending record: admission journals a record already
		// claimed (processing), so a pending one is an operator's replay
		// (botrun replay from another process), due now.
		PendingBefore: now.UnixMilli() + 1,
		Reclaim:       reclaim,
	})
	if err != nil && ctx.Err() == nil {
		s.c.Log.Error("sweep: claiming due inbound records failed", "err", err)
	}
	// A full claim may leave more due: the dispatcher wakes the sweeper
	// when its queue runs low, instead of a backlog waiting a poll per
	// batch.
	s.inboxBacklog.Store(len(recs) == room)
	for i := range recs {
		rec := &recs[i]
		// Stopping: the lease expires and the record is reclaimed.
		s.c.Queue.Submit(dispatch.Job{ChatKey: dispatch.ChatKey(rec.Provider, rec.Chat), ID: rec.ID, Claimed: rec})
	}
}

// queueLow is called by the dispatcher when its queue runs low.
func (s *Sweeper) queueLow() {
	if s.inboxBacklog.Load() {
		s.Wake()
	}
}

// Purger is more the retention purge deletes: what was kept before before
// (Unix milliseconds) beside the journals (the API calls' answers).
type Purger interface {
	Purge(ctx context.Context, before int64) (int, error)
}

// PurgeToo adds p to the retention purge. Call it before Run.
func (s *Sweeper) PurgeToo(p Purger) { s.also = append(s.also, p) }

// Purge deletes the done inbound and sent outbound records completed more
// than durability.retention ago; dead letters stay for the operator (botrun
// purge --dead, POST /admin/purge-dead).
//
// "Ago" is measured on a clock.Horizon: a wall clock stepped forward never
// purges early. (Purged early, a record whose request a channel still
// accepts, once the clock is stepped back within the request's signature
// window, would be admitted again as new and answered twice.)
func (s *Sweeper) Purge(ctx context.Context) {
	before := s.horizon.Now().Add(-s.c.Retention).UnixMilli()
	in, err1 := s.c.Inbox.Purge(ctx, before)
	out, err2 := s.c.Outbox.Purge(ctx, before)
	errs, more := []error{err1, err2}, 0
	for _, p := range s.also {
		n, err := p.Purge(ctx, before)
		errs, more = append(errs, err), more+n
	}
	if err := errors.Join(errs...); err != nil && ctx.Err() == nil {
		s.c.Log.Error("retention purge failed", "err", err)
		return
	}
	if in+out+more > 0 {
		s.c.Log.Info("retention purge", "done_inbox", in, "sent_outbox", out, "answers", more)
	}
}
