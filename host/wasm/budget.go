package wasm

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/botrun/botrun/host/wasm/internal/hostfuncs"
)

// ErrHookBudget is wrapped by the error of a send hook refused or cut
// because the event's hook budget (Budget) is spent: the send is refused,
// never made without its hook.
var ErrHookBudget = errors.New("the event's send hooks ran out of their budget")

// Budget is what the send hooks of one event may use together: guest time
// (the handler's bot.handler_timeout, once more, shared by every hook the
// event's sends and broadcast chats run) and output (an event's output
// budget, shared likewise). Each hook call still gets at most its own
// deadline and a sixteenth of an event's output. A hook runs with a
// deadline of what is left and is charged what it used, so the event's
// hooks use at most the budget plus one deadline (bot.handler_timeout) for
// each hook that was running when it ran out: one for hooks run one at a
// time (a handler's before_send), at most the outbox's workers for a
// broadcast's after_send hooks. Once it is spent no hook runs (fail
// closed). A Budget is safe for concurrent use.
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
	return &Budget{time: d, bytes: hostfuncs.OutputBudgetBytes, lines: hostfuncs.OutputBudgetLines}
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

// take answers what one hook call may use: at most limit of the time left
// and, of the output left, at most bytes and lines; ok is false when no
// time is left. Nothing is reserved: spend charges what the call used.
// Calls that run at once (a broadcast's after_send hooks, on the sweeper's
// workers) each get up to what is left when they start, so together they
// may overdraw the budget by at most one deadline (limit) per call that ran
// at the same time; reserving instead would refuse every call that starts
// while another runs.
func (b *Budget) take(limit time.Duration, bytes, lines int) (d time.Duration, ob, ol int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.time <= 0 {
		return 0, 0, 0, false
	}
	return min(limit, b.time), min(bytes, b.bytes), min(lines, b.lines), true
}

// spend settles a hook call that used used of guest time, and its output;
// cut says whether its output was cut, and it answers whether that is the
// event's first cut.
func (b *Budget) spend(used time.Duration, bytes, lines int, cut bool) (firstCut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.time -= used
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
