package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestTrueWaitsForTheCondition(t *testing.T) {
	var n atomic.Int64
	if !True(time.Minute, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("True gave up on a condition that held at its third poll")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("polled %d times, want 3 (it stops when the condition holds)", got)
	}
}

func TestTrueGivesUpAtItsDeadline(t *testing.T) {
	polls := 0
	if True(200*time.Millisecond, func() bool { polls++; return false }) {
		t.Fatal("True reported a condition that never held")
	}
	if polls < 2 {
		t.Fatalf("polled %d times before its deadline, want at least 2", polls)
	}
}
