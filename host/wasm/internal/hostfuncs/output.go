package hostfuncs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Output limits. What one event (or one instance's start) writes to the host
// log through stdout, stderr and the log host function shares one budget;
// past it, output is counted, not copied, and one "guest output truncated"
// line reports how much was dropped. The memory the host holds for guest
// output is one partial line per stream, whatever the guest writes.
const (
	// MaxOutputLine is the longest log line a guest makes: longer lines are
	// cut into lines of this size.
	MaxOutputLine = 8 << 10
	// OutputBudgetBytes is how many bytes of output one event may log.
	OutputBudgetBytes = 128 << 10
	// OutputBudgetLines is how many lines one event may log (empty lines and
	// the host's warnings about the guest included).
	OutputBudgetLines = 1024
)

// Output is an instance's output: its stdout and stderr (WASI's), which
// become log lines, and the budget they share with the log host function.
// An Output is used by one call at a time.
type Output struct {
	budget         *outputBudget
	stdout, stderr *guestOutput
}

// NewOutput is an instance's output, logged to logger.
func NewOutput(logger *slog.Logger) *Output {
	b := newOutputBudget()
	return &Output{
		budget: b,
		stdout: &guestOutput{logger: logger, stream: "stdout", budget: b},
		stderr: &guestOutput{logger: logger, stream: "stderr", budget: b, block: true},
	}
}

// Stdout is the guest's standard output.
func (o *Output) Stdout() io.Writer { return o.stdout }

// Stderr is the guest's standard error.
func (o *Output) Stderr() io.Writer { return o.stderr }

// Begin gives event the whole output budget and tags its lines.
func (o *Output) Begin(event string) {
	o.stdout.flush(event)
	o.stderr.flush(event)
	o.budget.reset()
}

// Limit gives the call begun a budget of bytes in lines instead.
func (o *Output) Limit(bytes, lines int) { o.budget.resetTo(bytes, lines) }

// Flush logs the call's partial lines.
func (o *Output) Flush() {
	o.stdout.flush("")
	o.stderr.flush("")
}

// End logs the call's partial lines and, if it went over budget, the one
// truncation line.
func (o *Output) End(logger *slog.Logger, event string) {
	o.Flush()
	o.Report(logger, event)
}

// Left is the budget's bytes and lines not spent yet, and whether any
// output was dropped.
func (o *Output) Left() (bytes, lines int, dropped bool) { return o.budget.left() }

// Report logs the one truncation line of a call that went over budget.
func (o *Output) Report(logger *slog.Logger, event string) { o.budget.report(logger, event) }

// outputBudget is an instance's output allowance for the event it runs. It is
// charged before anything is copied.
type outputBudget struct {
	mu      sync.Mutex
	bytes   int
	lines   int
	dropped int64
}

func newOutputBudget() *outputBudget {
	b := &outputBudget{}
	b.reset()
	return b
}

// reset gives a new event the whole budget.
func (b *outputBudget) reset() { b.resetTo(OutputBudgetBytes, OutputBudgetLines) }

// resetTo gives the next call a budget of bytes in lines.
func (b *outputBudget) resetTo(bytes, lines int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes, b.lines, b.dropped = bytes, lines, 0
}

// take admits up to n bytes and returns how many it admitted; the rest count
// as dropped. Nothing is admitted once the lines are spent.
func (b *outputBudget) take(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := min(n, b.bytes)
	if b.lines <= 0 {
		k = 0
	}
	b.bytes -= k
	b.dropped += int64(n - k)
	return k
}

// line spends one line of n admitted bytes; when none is left it returns
// false and the n bytes count as dropped.
func (b *outputBudget) line(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines <= 0 {
		b.dropped += int64(n)
		return false
	}
	b.lines--
	return true
}

// left is the budget's bytes and lines not spent yet, and whether any
// output was dropped.
func (b *outputBudget) left() (bytes, lines int, dropped bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes, b.lines, b.dropped > 0
}

// drop counts n bytes that never reach the log.
func (b *outputBudget) drop(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropped += int64(n)
}

// report logs the one truncation line of an event that went over budget.
func (b *outputBudget) report(logger *slog.Logger, event string) {
	b.mu.Lock()
	dropped := b.dropped
	b.mu.Unlock()
	if dropped == 0 {
		return
	}
	logger.LogAttrs(context.Background(), slog.LevelWarn,
		fmt.Sprintf("guest output truncated %d bytes: over the per-event budget of %d bytes and %d lines (stdout, stderr and log together)", dropped, OutputBudgetBytes, OutputBudgetLines),
		slog.String("event", event), slog.Int64("truncated_bytes", dropped))
}

// guestOutput turns a guest's stdout or stderr into log lines tagged with the
// module and the event being handled. A partial line is held (at most
// MaxOutputLine bytes) until a newline, the line limit or the end of the
// event. stdout's lines are INFO records, one a line; stderr's lines of a
// call are one WARN record at its end (a panic's trace is one record, not
// one a line), within the same budget.
type guestOutput struct {
	mu     sync.Mutex
	logger *slog.Logger
	stream string
	budget *outputBudget
	event  string
	buf    bytes.Buffer
	// block holds the call's lines for one record (stderr).
	block bool
	held  []string
}

// Write implements io.Writer for WASI fd_write. p is a view of guest memory;
// only what the budget admits is copied, and Write always reports all of p
// written so the guest carries on.
func (o *guestOutput) Write(p []byte) (int, error) {
	n := len(p)
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(p) > 0 {
		seg := p[:min(len(p), MaxOutputLine-o.buf.Len())]
		eol := false
		if i := bytes.IndexByte(seg, '\n'); i >= 0 {
			seg, eol = seg[:i+1], true
		}
		if k := o.budget.take(len(seg)); k < len(seg) {
			o.buf.Write(seg[:k])
			o.budget.drop(len(p) - len(seg))
			return n, nil
		}
		p = p[len(seg):]
		if eol {
			o.buf.Write(seg[:len(seg)-1])
			o.emit()
		} else if o.buf.Write(seg); o.buf.Len() == MaxOutputLine {
			o.emit()
		}
	}
	return n, nil
}

// flush logs a trailing partial line (and a block's record) and sets the
// event for the next lines.
func (o *guestOutput) flush(nextEvent string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.buf.Len() > 0 {
		o.emit()
	}
	if len(o.held) > 0 {
		attrs := []slog.Attr{slog.String("stream", o.stream), slog.String("event", o.event)}
		if len(o.held) > 1 {
			attrs = append(attrs, slog.String("more", strings.Join(o.held[1:], "\n")))
		}
		o.logger.LogAttrs(context.Background(), slog.LevelWarn, o.held[0], attrs...)
		o.held = nil
	}
	o.event = nextEvent
}

// emit logs the held line, if a line is left in the budget, and empties it.
func (o *guestOutput) emit() {
	if o.budget.line(o.buf.Len()) {
		if o.block {
			o.held = append(o.held, o.buf.String())
		} else {
			o.logger.LogAttrs(context.Background(), slog.LevelInfo, o.buf.String(),
				slog.String("stream", o.stream), slog.String("event", o.event))
		}
	}
	o.buf.Reset()
}
