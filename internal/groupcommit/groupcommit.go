// Package groupcommit is the group committer the durable stores share: one
// writer goroutine takes the first pending request, drains whatever else is
// queued (up to a batch size), and hands the batch to the store's run
// function, which commits it as one transaction (one fsync, one round trip) and
// answers each request. Requests queued before Close are still run.
package groupcommit

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Observer is told of every batch a committer ran: its size and how long
// run took (the commit's latency).
type Observer func(size int, took time.Duration)

// observers are the Observers of every committer in the process.
var observers atomic.Pointer[[]*Observer]

// Observe tells o of every batch any committer of this process runs, until
// the returned function is called. An observer must be cheap: it runs on
// the writer goroutine after each commit.
func Observe(o Observer) (stop func()) {
	p := &o
	update(func(list []*Observer) []*Observer { return append(list, p) })
	return func() {
		update(func(list []*Observer) []*Observer {
			out := make([]*Observer, 0, len(list))
			for _, q := range list {
				if q != p {
					out = append(out, q)
				}
			}
			return out
		})
	}
}

// update replaces the observer list by f's copy of it.
func update(f func([]*Observer) []*Observer) {
	for {
		old := observers.Load()
		var list []*Observer
		if old != nil {
			list = *old
		}
		next := f(append([]*Observer(nil), list...))
		if observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// commit runs one batch and tells the observers.
func (c *Committer[R]) commit(batch []R) {
	obs := observers.Load()
	if obs == nil || len(*obs) == 0 {
		c.run(batch)
		return
	}
	start := time.Now()
	c.run(batch)
	Report(len(batch), time.Since(start))
}

// Report tells the observers of a batch of size writes committed in took by
// a writer that batches on its own (the file journal).
func Report(size int, took time.Duration) {
	obs := observers.Load()
	if obs == nil {
		return
	}
	for _, o := range *obs {
		(*o)(size, took)
	}
}

// Committer batches requests of type R for one writer.
type Committer[R any] struct {
	run  func([]R)
	reqs chan R
	stop chan struct{}
	done chan struct{}

	mu     sync.RWMutex
	closed bool
}

// New starts a writer that calls run with batches of at most maxBatch.
func New[R any](maxBatch int, run func(batch []R)) *Committer[R] {
	c := &Committer[R]{run: run, reqs: make(chan R, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	go c.writer(max(maxBatch, 1))
	return c
}

// Submit queues r for the next batch; run answers it.
func (c *Committer[R]) Submit(r R) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.reqs <- r
	return nil
}

func (c *Committer[R]) writer(maxBatch int) {
	defer close(c.done)
	batch := make([]R, 0, maxBatch)
	for {
		select {
		case r := <-c.reqs:
			batch = append(batch[:0], r)
		case <-c.stop:
			// No new request arrives after Close: run the ones still queued.
			for {
				select {
				case r := <-c.reqs:
					c.commit([]R{r})
				default:
					return
				}
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		c.commit(batch)
	}
}

// Close stops the writer once the queued requests have run.
func (c *Committer[R]) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
}
