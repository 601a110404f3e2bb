package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/waitfor"
)

// TestDispatcherRefreshesQueuedClaim: the sweeper's new claim of a record
// already waiting in its chat's queue (its lease expired there) replaces the
// waiting job's claim rather than queueing the record twice.
func TestDispatcherRefreshesQueuedClaim(t *testing.T) {
	release := make(chan struct{})
	ran := make(chan Job, 10)
	d := New(1, 10, func(_ context.Context, j Job) {
		if j.ID == "a" {
			<-release
		}
		ran <- j
	})
	defer d.Stop(context.Background())
	d.Submit(Job{ChatKey: "c", ID: "a"})
	if !waitfor.True(60*time.Second, func() bool { return d.Queued() == 0 && !d.Idle() }) {
		t.Fatal("the first job never started")
	}
	d.Submit(Job{ChatKey: "c", ID: "b", Claimed: &durability.InboxRecord{ID: "b", Token: 1}})
	d.Submit(Job{ChatKey: "c", ID: "b", Claimed: &durability.InboxRecord{ID: "b", Token: 2}})
	if n := d.Queued(); n != 1 {
		t.Fatalf("%d jobs queued after the record was claimed again, want 1", n)
	}
	close(release)
	if j := <-ran; j.ID != "a" {
		t.Fatalf("ran %s first", j.ID)
	}
	if j := <-ran; j.ID != "b" || j.Claimed.Token != 2 {
		t.Fatalf("ran %s with token %d, want b with the new claim's token 2", j.ID, j.Claimed.Token)
	}
}

// TestTakeSendOnlyFromTheRunningQueue: a turn may take a queued send out of
// its own chat's queue, never out of another chat's waiting queue (which
// would leave the ready list an empty queue to run).
func TestTakeSendOnlyFromTheRunningQueue(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var took, tookOther bool
	var d *Dispatcher
	d = New(1, 100, func(_ context.Context, j Job) {
		if j.ID != "turn" {
			return
		}
		close(started)
		<-release
		_, took = d.TakeSend("a", "send-a")
		_, tookOther = d.TakeSend("b", "send-b")
	})
	send := &durability.ClaimedSend{}
	d.Submit(Job{ChatKey: "a", ID: "turn"})
	<-started
	d.Submit(Job{ChatKey: "a", ID: "send-a", Send: send})
	d.Submit(Job{ChatKey: "b", ID: "send-b", Send: send})
	close(release)
	if !waitfor.True(time.Minute, d.Idle) {
		t.Fatal("the dispatcher did not drain")
	}
	if !took || tookOther {
		t.Fatalf("took own chat's send %v (want true), another chat's %v (want false)", took, tookOther)
	}
	d.Stop(context.Background())
}
