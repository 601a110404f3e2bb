package hostfuncs

import (
	"context"
	"log/slog"

	"github.com/botrun/botrun/abi"
)

// Call is the state of one guest call (an event's botrun_on_event or a send
// hook), reached by the host functions through the call's context
// (WithCall). The engine sets the exported fields before the call and reads
// its outcome (Failure, LastError, Rewrite) after it.
type Call struct {
	// Logger is the module's logger; Log adds EventID on first use.
	Logger *slog.Logger
	// EventID tags the call's log lines: the event's id, or the hook's
	// export and the send's key.
	EventID string
	// Payload is what event_read answers: the event, or the hook's
	// SendHook, as JSON.
	Payload []byte
	// ReceivedAt is what now_ms answers: the event's (or the send's) time.
	ReceivedAt int64
	// Env answers the event's host calls; a hook has none.
	Env Env
	// Output is the instance's output: guest log lines and the host's
	// warnings about the guest spend its budget.
	Output *Output
	// Deadline is the guest's clock, paused while a host call waits.
	Deadline Deadline
	// Slot, when set, is the instance's place among the module's running
	// instances: a host call that waits long (an API call) gives it up
	// (Pause) and takes one back (Resume, waiting while all are busy), so
	// a waiting guest keeps no other from computing.
	Slot Deadline
	// Hook is the send hook export this call runs ("" for an event): a
	// hook reads its SendHook with event_read and may log, but the event's
	// functions answer it as outside an event.
	Hook string

	lg        *slog.Logger
	result    []byte
	hasResult bool
	lastError string
	// hostErr is the first host failure; it turns the call into a fault.
	hostErr error
	// rewrite is the send as botrun_before_send rewrote it.
	rewrite *abi.SendRequest
}

// Deadline is the clock of the guest's deadline: a host call that waits on
// the world (a send retried inline, a media download) pauses it.
type Deadline interface {
	Pause()
	Resume()
}

// Failure is the call's first host failure (an Env call that failed), nil
// when there was none: it turns the call into a fault.
func (c *Call) Failure() error { return c.hostErr }

// LastError is the last line the guest logged at error level, if any.
func (c *Call) LastError() string { return c.lastError }

// Rewrite is the send as botrun_before_send rewrote it; nil when unchanged.
func (c *Call) Rewrite() *abi.SendRequest { return c.rewrite }

// wait runs a host call that waits on a channel (a send retried inline, a
// media download) with the guest's deadline paused. The host bounds those
// waits itself: outbox.inline_max, bot.max_sends, one download per media.
func (c *Call) wait(f func()) {
	c.Deadline.Pause()
	defer c.Deadline.Resume()
	f()
}

// waitIdle is wait for a call that may take seconds (an API call): the
// guest also gives up its compute slot meanwhile.
func (c *Call) waitIdle(f func()) {
	c.wait(func() {
		if c.Slot != nil {
			c.Slot.Pause()
			defer c.Slot.Resume()
		}
		f()
	})
}

type callKey struct{}

// Log is the call's logger, tagged with the event.
func (c *Call) Log() *slog.Logger {
	if c.lg == nil {
		c.lg = c.Logger.With(slog.String("event", c.EventID))
	}
	return c.lg
}

// warn logs a warning about the guest's doing, if the event's output budget
// has a line left: a guest cannot flood the log through the host either.
func (c *Call) warn(msg string, args ...any) {
	if c.Output == nil || c.Output.budget.line(0) {
		c.Log().Warn(msg, args...)
	}
}

// WithCall makes c the call the host functions called with the returned
// context answer for.
func WithCall(ctx context.Context, c *Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callOf(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// eventOf is the call of the event running, nil outside one: during a send
// hook too, so a hook neither sends nor touches state.
func eventOf(ctx context.Context) *Call {
	if c := callOf(ctx); c != nil && c.Hook == "" {
		return c
	}
	return nil
}
