package groupcommit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestBatchesAndAnswersEveryRequest(t *testing.T) {
	type req struct {
		n    int
		done chan int
	}
	var mu sync.Mutex
	var sizes []int
	c := New(8, func(batch []req) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		for _, r := range batch {
			r.done <- r.n * 2
		}
	})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			r := req{n: i, done: make(chan int, 1)}
			if err := c.Submit(r); err != nil {
				t.Error(err)
				return
			}
			if got := <-r.done; got != i*2 {
				t.Errorf("request %d answered %d", i, got)
			}
		})
	}
	wg.Wait()
	c.Close()
	total := 0
	for _, s := range sizes {
		if s < 1 || s > 8 {
			t.Fatalf("batch of %d", s)
		}
		total += s
	}
	if total != 200 {
		t.Fatalf("ran %d requests, want 200", total)
	}
	if err := c.Submit(req{done: make(chan int, 1)}); err != ErrClosed {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestObserve tells an observer of every batch run, until it stops.
func TestObserve(t *testing.T) {
	var batches, requests atomic.Int64
	stop := Observe(func(size int, took time.Duration) {
		batches.Add(1)
		requests.Add(int64(size))
	})
	done := make(chan struct{}, 100)
	c := New(4, func(batch []int) {
		for range batch {
			done <- struct{}{}
		}
	})
	for i := range 10 {
		if err := c.Submit(i); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		<-done
	}
	c.Close()
	if requests.Load() != 10 || batches.Load() < 3 {
		t.Fatalf("observed %d requests in %d batches, want 10 in at least 3 (batches of 4)", requests.Load(), batches.Load())
	}
	stop()
	c = New(4, func(batch []int) {})
	c.Submit(1)
	c.Close()
	if requests.Load() != 10 {
		t.Fatalf("observed %d requests after stop, want 10", requests.Load())
	}
}
