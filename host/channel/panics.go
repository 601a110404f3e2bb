package channel

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
)

// ErrPanicked is wrapped by the error Guard returns for a panic it
// recovered.
var ErrPanicked = errors.New("panicked")

// Guard runs f, work of the channel's that what names ("parsing a
// message"), and recovers a panic in it: an input no code path expected
// then costs that input, not the process. The panic is logged with the
// channel's id, what and the stack, counted (Env.Panicked), and returned
// as an error wrapping ErrPanicked; the caller skips, refuses or
// dead-letters the input as for any final error. The panic's value is
// logged only when it is a runtime error (a fixed text): another value may
// hold the input. http.ErrAbortHandler, a handler aborting on purpose, is
// panicked again.
func (e Env) Guard(what string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = e.Recovered(what, v)
		}
	}()
	return f()
}

// Recovered logs and counts v, a panic's value that recover returned, as
// Guard does, and returns its error. Call it from the deferred function
// that recovered v: the stack logged is then the panic's.
func (e Env) Recovered(what string, v any) error {
	if v == http.ErrAbortHandler {
		panic(v)
	}
	cause := fmt.Sprintf("a panic of type %T", v)
	if re, ok := v.(runtime.Error); ok {
		cause = re.Error()
	}
	e.Log().Error("a channel panicked: recovered, the process goes on", "provider", e.ID,
		"while", what, "panic", cause, "stack", string(debug.Stack()))
	if e.Panicked != nil {
		e.Panicked()
	}
	return fmt.Errorf("%s: %w while %s (%s)", e.ID, ErrPanicked, what, cause)
}
