package host

import (
	"context"
	"sync"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability"
)

// dispatcher runs jobs with per-chat ordering: one job per chat at a time, many
// chats in parallel up to the worker count, chats served round-robin.
type dispatcher struct {
	run func(context.Context, job)

	mu      sync.Mutex
	cond    *sync.Cond
	chats   map[string]*chatQueue
	ready   []*chatQueue
	stopped bool
	pending int // queued jobs not yet started
	running int // jobs in a handler now
	wg      sync.WaitGroup
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

// job is one inbound record to handle.
type job struct {
	chatKey string
	// id is the inbox record id.
	id string
	// claimed and hb are set when the record is claimed already (by Admit or
	// the sweeper).
	claimed *durability.InboxRecord
	hb      *heartbeat
	// event and unjournaled are set for an event dispatched without a record
	// (fail_open).
	event       *abi.Event
	unjournaled bool
	// live are the channel's own media references, for the first run in the
	// process that admitted the message; replays use the journaled ones.
	live []abi.Media
}

type chatQueue struct {
	key  string
	jobs []job
}

func newDispatcher(workers int, run func(context.Context, job)) *dispatcher {
	d := &dispatcher{run: run, chats: map[string]*chatQueue{}}
	d.cond = sync.NewCond(&d.mu)
	for range workers {
		d.wg.Go(d.work)
	}
	return d
}

// submit queues j behind the chat's earlier jobs. It reports false after stop.
func (d *dispatcher) submit(j job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
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
		d.mu.Unlock()
		d.run(context.Background(), j)
		d.mu.Lock()
		d.running--
		if len(q.jobs) > 0 {
			d.ready = append(d.ready, q)
			d.cond.Signal()
		} else {
			delete(d.chats, q.key)
		}
	}
}

// stop refuses new jobs, drops queued ones, and waits for running jobs to
// finish or ctx to end. It reports how many queued jobs were dropped.
func (d *dispatcher) stop(ctx context.Context) (dropped int, err error) {
	d.mu.Lock()
	d.stopped = true
	for _, q := range d.chats {
		dropped += len(q.jobs)
		for _, j := range q.jobs {
			if j.hb != nil {
				j.hb.release() // the claim's lease expires; the record is reclaimed
			}
		}
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
