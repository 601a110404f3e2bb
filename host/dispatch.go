package host

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// dispatcher runs jobs with per-chat ordering: one job per chat at a time, many
// chats in parallel up to the worker count, chats served round-robin. Admission
// reserves a place first: at most limit jobs wait to start.
type dispatcher struct {
	run   func(context.Context, job)
	limit int

	mu       sync.Mutex
	cond     *sync.Cond
	chats    map[string]*chatQueue
	ready    []*chatQueue
	stopped  bool
	pending  int // queued jobs not yet started
	reserved int // places taken by admissions not yet submitted
	running  int // jobs in a handler now
	// onLow, when set, is called as the queue falls to lowWater jobs.
	onLow    func()
	lowWater int
	wg       sync.WaitGroup
}

// idle reports whether no job is queued or running.
func (d *dispatcher) idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending == 0 && d.running == 0
}

// queued returns how many jobs wait to start.
func (d *dispatcher) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

// handle runs one job on a worker: a claimed send goes to the sender, an
// inbound record gets its turn.
func (b *Bot) handle(_ context.Context, j job) {
	if j.send != nil {
		b.sender.deliverClaimed(b.baseCtx, *j.send)
		if b.sendsOut.Add(-1) == 0 && b.sendsFull.Load() {
			b.wakeSweeper() // more may be due
		}
		return
	}
	b.takeTurn(j)
}

// job is one inbound record to handle, or one claimed send to deliver.
type job struct {
	chatKey string
	// id is the inbox record id (the outbox key of a send).
	id string
	// send is a due send the sweeper claimed.
	send *durability.ClaimedSend
	// claimed is set when the record is claimed already (by Admit or the
	// sweeper); its lease is extended from the start of its turn.
	claimed *durability.InboxRecord
	// event and unjournaled are set for an event dispatched without a record
	// (fail_open).
	event       *abi.Event
	unjournaled bool
	// live are the channel's own media references, for the first run in the
	// process that admitted the message; replays use the journaled ones.
	live []abi.Media
	// trace is the admission's span, the parent of the turn's.
	trace trace.SpanContext
}

type chatQueue struct {
	key  string
	jobs []job
	// running is set while a worker runs one of its jobs.
	running bool
}

func newDispatcher(workers, limit int, run func(context.Context, job)) *dispatcher {
	d := &dispatcher{run: run, limit: limit, chats: map[string]*chatQueue{}}
	d.cond = sync.NewCond(&d.mu)
	for range workers {
		d.wg.Go(d.work)
	}
	return d
}

// setOnLow has onLow called whenever the queue falls to lowWater jobs.
func (d *dispatcher) setOnLow(lowWater int, onLow func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lowWater, d.onLow = lowWater, onLow
}

// reserve takes a place for a job Admit is about to journal and submit. It
// reports false when limit jobs already wait to start (queued or reserved),
// or after stop. submitReserved or unreserve gives the place back.
func (d *dispatcher) reserve() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.pending+d.reserved >= d.limit {
		return false
	}
	d.reserved++
	return true
}

// unreserve gives back a place reserve took that no job will use.
func (d *dispatcher) unreserve() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved--
}

// submitReserved queues j in the place reserve took for it. It reports false
// after stop.
func (d *dispatcher) submitReserved(j job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved--
	return d.enqueue(j)
}

// submit queues j behind the chat's earlier jobs, outside the admission
// limit (the sweeper and the operator's replays bound themselves). A claim of
// a record already waiting here (its lease expired while queued, and the
// sweeper claimed it again) replaces the waiting job's claim instead. It
// reports false after stop.
func (d *dispatcher) submit(j job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.chats[j.chatKey]; ok && j.claimed != nil && !d.stopped {
		// Only inbound records: a send is claimed again only once the
		// last claim's sends are all delivered.
		for i := range q.jobs {
			if w := &q.jobs[i]; w.id == j.id && w.claimed != nil {
				if j.claimed.Token > w.claimed.Token {
					w.claimed = j.claimed
				}
				return true
			}
		}
	}
	return d.enqueue(j)
}

// takeSend removes the queued job delivering the send key from its chat's
// queue and returns it, so the chat's running turn can deliver it first.
// Only a running chat's queue is taken from (the caller's own): a waiting
// queue stays as the ready list holds it.
func (d *dispatcher) takeSend(chatKey, key string) (job, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q, ok := d.chats[chatKey]
	if !ok || !q.running {
		return job{}, false
	}
	for i, j := range q.jobs {
		if j.send != nil && j.id == key {
			q.jobs = append(q.jobs[:i:i], q.jobs[i+1:]...)
			d.pending--
			return j, true
		}
	}
	return job{}, false
}

func (d *dispatcher) enqueue(j job) bool {
	if d.stopped {
		return false
	}
	d.pending++
	q, ok := d.chats[j.chatKey]
	if !ok {
		q = &chatQueue{key: j.chatKey}
		d.chats[j.chatKey] = q
		d.ready = append(d.ready, q)
		d.cond.Signal()
	}
	q.jobs = append(q.jobs, j)
	return true
}

func (d *dispatcher) work() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		for len(d.ready) == 0 && !d.stopped {
			d.cond.Wait()
		}
		if d.stopped {
			return
		}
		q := d.ready[0]
		d.ready = d.ready[1:]
		j := q.jobs[0]
		q.jobs = q.jobs[1:]
		d.pending--
		d.running++
		q.running = true
		low := d.onLow != nil && d.pending == d.lowWater
		d.mu.Unlock()
		if low {
			d.onLow()
		}
		d.run(context.Background(), j)
		d.mu.Lock()
		q.running = false
		d.running--
		if len(q.jobs) > 0 {
			d.ready = append(d.ready, q)
			d.cond.Signal()
		} else {
			delete(d.chats, q.key)
		}
	}
}

// stop refuses new jobs, drops queued ones (their claims' leases expire and
// the records are reclaimed), and waits for running jobs to finish or ctx to
// end. It returns the queued jobs it dropped.
func (d *dispatcher) stop(ctx context.Context) (dropped []job, err error) {
	d.mu.Lock()
	d.stopped = true
	for _, q := range d.chats {
		dropped = append(dropped, q.jobs...)
		q.jobs = nil
	}
	d.pending = 0
	d.ready = nil
	d.cond.Broadcast()
	d.mu.Unlock()
	if !waitGroup(ctx, &d.wg) {
		return dropped, ctx.Err()
	}
	return dropped, nil
}
