package wasm

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrHookBudget is wrapped by the error of a send hook refused or cut
// because the event's hook budget (Budget) is spent: the send is refused,
// never made without its hook.
var ErrHookBudget = errors.New("the event's send hooks ran out of their budget")

// Budget is what the send hooks of one event may use together: guest time
// (the handler's bot.handler_timeout, once more, shared by every hook the
// event's sends and broadcast chats run) and output (an event's output
// budget, shared likewise). Each hook call still gets at most its own
// deadline and a sixteenth of an event's output. A Budget is safe for
// concurrent use.
type Budget struct {
	mu           sync.Mutex
	time         time.Duration
	bytes, lines int
	// truncated is set once a hook's output was cut: the one truncation
	// line of the event is logged then, not once per hook.
	truncated bool
}

// NewBudget gives an event's hooks d of guest time and an event's output.
func NewBudget(d time.Duration) *Budget {
	return &Budget{time: d, bytes: outputBudgetBytes, lines: outputBudgetLines}
}

type budgetKey struct{}

// WithBudget makes the send hooks called with the returned context draw on
// b (see Budget).
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

func budgetOf(ctx context.Context) *Budget {
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	return b
}

// take reserves what one hook call may use: at most limit of the time
// left (taken from the budget until spend gives back what the call did not
// use, so calls running at once cannot overdraw it), and of the output left
// at most bytes and lines; ok is false when no time is left.
func (b *Budget) take(limit time.Duration, bytes, lines int) (d time.Duration, ob, ol int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.time <= 0 {
		return 0, 0, 0, false
	}
	d = min(limit, b.time)
	b.time -= d
	return d, min(bytes, b.bytes), min(lines, b.lines), true
}

// spend settles a hook call that reserved the guest time reserved and used
// used of it, and its output; cut says whether its output was cut, and it
// answers whether that is the event's first cut.
func (b *Budget) spend(reserved, used time.Duration, bytes, lines int, cut bool) (firstCut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.time += max(reserved-used, 0)
	b.bytes, b.lines = max(b.bytes-bytes, 0), max(b.lines-lines, 0)
	firstCut = cut && !b.truncated
	b.truncated = b.truncated || cut
	return firstCut
}

// exhaust spends the time left: a hook ran until the budget's end.
func (b *Budget) exhaust() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.time = 0
}
