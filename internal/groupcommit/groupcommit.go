// Package groupcommit is the group committer the durable stores share: one
// writer goroutine takes the first pending request, drains whatever else is
// queued (up to a batch size), and hands the batch to the store's run
// function, which commits it as one transaction (one fsync, one round trip) and
// answers each request. Requests queued before Close are still run.
package groupcommit

import (
	"errors"
	"sync"
)

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("groupcommit: closed")

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
					c.run([]R{r})
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
		c.run(batch)
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
