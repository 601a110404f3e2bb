// Package dispatch is the per-chat queue: it runs jobs (an inbound record's
// turn, a claimed send's delivery) one per chat at a time, many chats in
// parallel up to the worker count, chats served round-robin; admission
// reserves a place first, so at most a limit of jobs wait to start.
//
// dispatch imports abi, durability and the OpenTelemetry trace API; it
// never imports host. It does not know what a job does: the run function
// given to New does.
package dispatch

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// Job is one inbound record to handle, or one claimed send to deliver.
type Job struct {
	// ChatKey names the chat whose order the job keeps (ChatKey).
	ChatKey string
	// ID is the inbox record id (the outbox key of a send).
	ID string
	// Send is a due send the sweeper claimed.
	Send *durability.ClaimedSend
	// Claimed is set when the record is claimed already (by Admit or the
	// sweeper); its lease is extended from the start of its turn.
	Claimed *durability.InboxRecord
	// Event and Unjournaled are set for an event dispatched without a
	// record (fail_open).
	Event       *abi.Event
	Unjournaled bool
	// Live are the channel's own media references, for the first run in
	// the process that admitted the message; replays use the journaled
	// ones.
	Live []abi.Media
	// Trace is the admission's span, the parent of the turn's.
	Trace trace.SpanContext
}

// ChatKey is the queue key of chat on a channel.
func ChatKey(channelID, chat string) string { return channelID + "\x00" + chat }

// Dispatcher is the per-chat queue (see the package doc).
type Dispatcher struct {
	run   func(context.Context, Job)
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

type chatQueue struct {
	key  string
	jobs []Job
	// running is set while a worker runs one of its jobs.
	running bool
}

// New starts workers goroutines that run the jobs with run; at most limit
// jobs wait to start through Reserve.
func New(workers, limit int, run func(context.Context, Job)) *Dispatcher {
	d := &Dispatcher{run: run, limit: limit, chats: map[string]*chatQueue{}}
	d.cond = sync.NewCond(&d.mu)
	for range workers {
		d.wg.Go(d.work)
	}
	return d
}

// Idle reports whether no job is queued or running.
func (d *Dispatcher) Idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending == 0 && d.running == 0
}

// Queued returns how many jobs wait to start.
func (d *Dispatcher) Queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

// SetOnLow has onLow called whenever the queue falls to lowWater jobs.
func (d *Dispatcher) SetOnLow(lowWater int, onLow func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lowWater, d.onLow = lowWater, onLow
}

// Reserve takes a place for a job Admit is about to journal and submit. It
// reports false when limit jobs already wait to start (queued or reserved),
// or after Stop. SubmitReserved or Unreserve gives the place back.
func (d *Dispatcher) Reserve() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || d.pending+d.reserved >= d.limit {
		return false
	}
	d.reserved++
	return true
}

// Unreserve gives back a place Reserve took that no job will use.
func (d *Dispatcher) Unreserve() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved--
}

// SubmitReserved queues j in the place Reserve took for it. It reports
// false after Stop.
func (d *Dispatcher) SubmitReserved(j Job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved--
	return d.enqueue(j)
}

// Submit queues j behind the chat's earlier jobs, outside the admission
// limit (the sweeper and the operator's replays bound themselves). A claim of
// a record already waiting here (its lease expired while queued, and the
// sweeper claimed it again) replaces the waiting job's claim instead. It
// reports false after Stop.
func (d *Dispatcher) Submit(j Job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.chats[j.ChatKey]; ok && j.Claimed != nil && !d.stopped {
		// Only inbound records: a send is claimed again only once the
		// last claim's sends are all delivered.
		for i := range q.jobs {
			if w := &q.jobs[i]; w.ID == j.ID && w.Claimed != nil {
				if j.Claimed.Token > w.Claimed.Token {
					w.Claimed = j.Claimed
				}
				return true
			}
		}
	}
	return d.enqueue(j)
}

// TakeSend removes the queued job delivering the send key from its chat's
// queue and returns it, so the chat's running turn can deliver it first.
// Only a running chat's queue is taken from (the caller's own): a waiting
// queue stays as the ready list holds it.
func (d *Dispatcher) TakeSend(chatKey, key string) (Job, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q, ok := d.chats[chatKey]
	if !ok || !q.running {
		return Job{}, false
	}
	for i, j := range q.jobs {
		if j.Send != nil && j.ID == key {
			q.jobs = append(q.jobs[:i:i], q.jobs[i+1:]...)
			d.pending--
			return j, true
		}
	}
	return Job{}, false
}

func (d *Dispatcher) enqueue(j Job) bool {
	if d.stopped {
		return false
	}
	d.pending++
	q, ok := d.chats[j.ChatKey]
	if !ok {
		q = &chatQueue{key: j.ChatKey}
		d.chats[j.ChatKey] = q
		d.ready = append(d.ready, q)
		d.cond.Signal()
	}
	q.jobs = append(q.jobs, j)
	return true
}

func (d *Dispatcher) work() {
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

// Stop refuses new jobs, drops queued ones (their claims' leases expire and
// the records are reclaimed), and waits for running jobs to finish or ctx to
// end. It returns the queued jobs it dropped.
func (d *Dispatcher) Stop(ctx context.Context) (dropped []Job, err error) {
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
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		return dropped, nil
	case <-ctx.Done():
		return dropped, ctx.Err()
	}
}
