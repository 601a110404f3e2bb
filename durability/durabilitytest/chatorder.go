package durabilitytest

import (
	"errors"
	"testing"

	"github.com/botrun/botrun/durability"
)

// runChatOrder checks a Coordinator's chat order: each chat's unfinished
// records oldest first, a record leaving it when done or dead, and a
// replayed one entering it again at the back.
func runChatOrder(t *testing.T, nb NewBackend) {
	b := nb(t)
	t.Cleanup(func() { b.Close() })
	c, ok := b.(durability.Coordinator)
	if !ok {
		t.Skip("the backend does not coordinate replicas")
	}
	j, err := c.OpenCoordinated(ctx, scopeA)
	if errors.Is(err, durability.ErrNoCoordination) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	order, ok := j.Inbox.(durability.ChatOrder)
	if !ok {
		t.Fatal("OpenCoordinated returned an inbox without a chat order")
	}
	oldest := func(want string) {
		t.Helper()
		rec, ok, err := order.OldestUnfinished(ctx, "web", "c/1")
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]string{true: rec.ID}[ok]; got != want {
			t.Fatalf("oldest unfinished of chat c/1: %q, want %q", got, want)
		}
	}
	oldest("")
	putIn(t, j, "web:1", "c/1", 100)
	putIn(t, j, "web:other", "c/10", 100) // another chat, whose name extends this one's
	putIn(t, j, "web:2", "c/1", 100)
	putIn(t, j, "web:3", "c/1", 100)
	oldest("web:1")
	l := lease("i1", 200, 1200)
	r1 := check(j.Inbox.Claim(ctx, "web:1", l))(t)
	oldest("web:1") // processing is unfinished
	noErr(t, j.Inbox.Complete(ctx, "web:1", r1.Token, durability.Completion{Now: 300}))
	oldest("web:2")
	r2 := check(j.Inbox.Claim(ctx, "web:2", l))(t)
	noErr(t, j.Inbox.Fail(ctx, "web:2", r2.Token, "boom", durability.FailOptions{Now: 300, RetryAt: 5000}))
	oldest("web:2") // a failed record still holds its place
	r2 = check(j.Inbox.Claim(ctx, "web:2", l))(t)
	noErr(t, j.Inbox.Fail(ctx, "web:2", r2.Token, "boom", durability.FailOptions{Now: 300, Dead: true}))
	oldest("web:3") // a dead letter does not hold the chat up
	noErr(t, j.Inbox.Replay(ctx, "web:1", 400))
	oldest("web:3") // a replay goes to the back
	r3 := check(j.Inbox.Claim(ctx, "web:3", l))(t)
	cs, ok := j.Inbox.(durability.CompleteSender)
	if ok {
		noErr(t, cs.CompleteWithSent(ctx, "web:3", r3.Token, durability.Completion{Now: 500}, nil))
	} else {
		noErr(t, j.Inbox.Complete(ctx, "web:3", r3.Token, durability.Completion{Now: 500}))
	}
	oldest("web:1")
	r1 = check(j.Inbox.Claim(ctx, "web:1", l))(t)
	noErr(t, j.Inbox.Complete(ctx, "web:1", r1.Token, durability.Completion{Now: 600}))
	oldest("")
}
