package groupcommit

import (
	"sync"
	"testing"
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
