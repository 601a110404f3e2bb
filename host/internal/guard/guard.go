// Package guard keeps a panic in a channel's code from taking the process
// down: the host recovers it at each channel loop (KeepRunning, for Run and
// RunSession) and in each webhook handler (Recovering), and the channels
// recover it around each input they take (channel.Env.Guard, with the Env
// of Guard.Env), so that the input is skipped rather than taken again at
// every restart. Each is logged with the channel's id and counted in
// botrun_channel_panics_total{channel}.
//
// guard imports host/channel and host/internal/{clock,observe}; it never
// imports host. It reads time only through its clock.
package guard

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/clock"
	"github.com/botrun/botrun/host/internal/observe"
)

// Guard recovers and counts the panics of a bot's channels.
type Guard struct {
	// Log receives the panics and restarts.
	Log *slog.Logger
	// Observer returns the bot's observer, which counts the panics and
	// skipped inputs (nil while the bot is built: not counted).
	Observer func() *observe.Observer
	Clock    clock.Clock
}

// Env is the part of channel id's Env that recovering its panics and
// counting its skipped inputs need: its id, the log and the counters.
func (g *Guard) Env(id string) channel.Env {
	return channel.Env{ID: id, Logger: g.Log, Panicked: func() {
		if o := g.Observer(); o != nil {
			o.Panics.WithLabelValues(id).Inc()
		}
	}, Skipped: func(reason string) {
		if o := g.Observer(); o != nil {
			o.Skipped.WithLabelValues(id, reason).Inc()
		}
	}}
}

// KeepRunning runs channel id's loop until ctx ends. A loop that panics is
// started again after a backoff (1 s, doubling to a minute; reset after a
// minute of running); a loop that returns is done.
func (g *Guard) KeepRunning(ctx context.Context, id, what string, loop func(context.Context)) {
	env := g.Env(id)
	c := clock.Or(g.Clock)
	wait := time.Second
	for {
		started := c.Now()
		err := env.Guard(what, func() error { loop(ctx); return nil })
		if err == nil || ctx.Err() != nil {
			return
		}
		if c.Now().Sub(started) > time.Minute {
			wait = time.Second
		}
		g.Log.Warn("a channel's loop panicked: starting it again", "provider", id, "loop", what, "after", wait)
		t := c.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		wait = min(2*wait, time.Minute)
	}
}

// Route is a channel's routes on a mux of their own, to tell which channel
// a request of the bot's mux went to.
type Route struct {
	ID  string
	Mux *http.ServeMux
}

// Recovering serves h and recovers a panic in it: logged and counted for
// the channel whose route it was (owners), and answered 500 when nothing
// was written yet (else the connection is cut). 500, not a 4xx: the
// message was not journaled, and the channels' own redelivery policies,
// all bounded, may bring it back to a fixed version; nothing is lost.
func (g *Guard) Recovering(h http.Handler, owners []Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &panicWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			env := channel.Env{Logger: g.Log} // the bot's own routes: not a channel's
			if id := ownerOf(owners, r); id != "" {
				env = g.Env(id)
			}
			env.Recovered("serving "+r.Method+" "+r.Pattern, v)
			if pw.wrote {
				panic(http.ErrAbortHandler)
			}
			http.Error(pw, "botrun: the request failed and was not taken (see the bot's log)", http.StatusInternalServerError)
		}()
		h.ServeHTTP(pw, r)
	})
}

// ownerOf names the channel whose route served r ("" for the bot's own).
func ownerOf(owners []Route, r *http.Request) string {
	if r.Pattern == "" {
		return ""
	}
	for _, o := range owners {
		if _, p := o.Mux.Handler(r); p == r.Pattern {
			return o.ID
		}
	}
	return ""
}

// panicWriter notes whether the answer began.
type panicWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *panicWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *panicWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush lets a long poll flush through the wrapper.
func (w *panicWriter) Flush() {
	w.wrote = true
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the connection's writer.
func (w *panicWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
