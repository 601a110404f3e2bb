package channel_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/channel"
)

// Guard turns a panic into an error wrapping ErrPanicked, counts it, and
// logs the channel and the stack but not a panic value that may hold the
// input; a deliberate http.ErrAbortHandler goes through.
func TestGuardRecoversCountsAndHidesTheValue(t *testing.T) {
	var log bytes.Buffer
	panics := 0
	env := channel.Env{ID: "mail", Logger: slog.New(slog.NewTextHandler(&log, nil)), Panicked: func() { panics++ }}
	err := env.Guard("parsing a message", func() error { panic("secret body text") })
	if !errors.Is(err, channel.ErrPanicked) || panics != 1 {
		t.Fatalf("Guard = %v, %d counted", err, panics)
	}
	if out := log.String() + err.Error(); strings.Contains(out, "secret body text") || !strings.Contains(log.String(), "provider=mail") || !strings.Contains(log.String(), "panics_test.go") {
		t.Errorf("the log and the error show the panic's value, or miss the channel or the stack:\n%s\n%v", log.String(), err)
	}
	var m map[string]int
	if err := env.Guard("writing", func() error { m["x"] = 1; return nil }); !errors.Is(err, channel.ErrPanicked) || !strings.Contains(err.Error(), "nil map") {
		t.Errorf("a runtime error: %v", err)
	}
	if err := env.Guard("ok", func() error { return errors.New("plain") }); err == nil || errors.Is(err, channel.ErrPanicked) || panics != 2 {
		t.Errorf("a plain error: %v (%d counted)", err, panics)
	}
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("http.ErrAbortHandler was not panicked again: %v", v)
		}
	}()
	env.Guard("aborting", func() error { panic(http.ErrAbortHandler) })
}
