package hostfuncs

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestOutputCutsLinesAndReportsTheDropOnce checks the output of one call
// without a guest: a line longer than MaxOutputLine is cut into lines of
// that size, output past the budget is counted, not logged, and End logs
// one truncation line with the exact count; the next call has its whole
// budget again.
func TestOutputCutsLinesAndReportsTheDropOnce(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	o := NewOutput(logger)

	o.Begin("ev1")
	long := strings.Repeat("x", MaxOutputLine+10)
	fmt.Fprintln(o.Stdout(), long)
	o.End(logger, "ev1")
	if n := strings.Count(log.String(), "\n"); n != 2 {
		t.Fatalf("a line of %d bytes logged as %d lines, want 2:\n%s", len(long), n, log.String())
	}
	if strings.Contains(log.String(), "truncated") {
		t.Fatalf("output within the budget reported as truncated:\n%s", log.String())
	}

	log.Reset()
	o.Begin("ev2")
	total := 0
	for range OutputBudgetBytes/MaxOutputLine + 4 {
		n, err := o.Stderr().Write([]byte(strings.Repeat("y", MaxOutputLine-1) + "\n"))
		if err != nil || n != MaxOutputLine {
			t.Fatalf("Write = %d, %v; want all of it written", n, err)
		}
		total += n
	}
	o.End(logger, "ev2")
	want := fmt.Sprintf("guest output truncated %d bytes", total-OutputBudgetBytes)
	if got := strings.Count(log.String(), "guest output truncated"); got != 1 || !strings.Contains(log.String(), want) {
		t.Errorf("%d truncation lines, want one with %q:\n%.2000s", got, want, log.String())
	}

	log.Reset()
	o.Begin("ev3")
	fmt.Fprintln(o.Stdout(), "hello")
	o.End(logger, "ev3")
	if !strings.Contains(log.String(), "msg=hello") || !strings.Contains(log.String(), "event=ev3") || strings.Contains(log.String(), "truncated") {
		t.Errorf("the next call's output:\n%s\nwant its line logged with its event and no truncation", log.String())
	}
}

// TestStderrIsOneRecordPerCall: what a call writes to stderr (a panic's
// message and trace) is one WARN record at its end, its first line the
// message and the rest in "more"; stdout stays one INFO record a line.
func TestStderrIsOneRecordPerCall(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	o := NewOutput(logger)
	o.Begin("ev1")
	fmt.Fprint(o.Stderr(), "panic: boom\n\ngoroutine 1 [running]:\nmain.handle()\n")
	fmt.Fprintln(o.Stdout(), "out 1")
	fmt.Fprintln(o.Stdout(), "out 2")
	o.End(logger, "ev1")
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3 (two stdout lines, one stderr block):\n%s", len(lines), log.String())
	}
	last := lines[2]
	if !strings.Contains(last, "level=WARN") || !strings.Contains(last, `msg="panic: boom"`) || !strings.Contains(last, `more="\ngoroutine 1 [running]:\nmain.handle()"`) || !strings.Contains(last, "event=ev1") {
		t.Fatalf("the stderr record: %s", last)
	}
	if !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "msg=\"out 1\"") {
		t.Fatalf("a stdout record: %s", lines[0])
	}
}
