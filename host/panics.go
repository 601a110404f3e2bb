package host

import (
	"context"
	"net/http"
	"time"

	"github.com/botrun/botrun/host/channel"
)

// A panic in a channel's code never takes the process down: the host
// recovers it at each channel loop (Run, RunSession) and in each webhook
// handler, and the channels recover it around each input they take
// (channel.Env.Guard), so that the input is skipped rather than taken
// again at every restart. Each is logged with the channel's id and counted
// in botrun_channel_panics_total{channel}.

// channelEnv is the part of a channel's Env that recovering its panics and
// counting its skipped inputs need: its id, the log and the counters.
func (b *Bot) channelEnv(id string) channel.Env {
	return channel.Env{ID: id, Logger: b.log, Panicked: func() {
		if b.obs != nil {
			b.obs.Panics.WithLabelValues(id).Inc()
		}
	}, Skipped: func(reason string) {
		if b.obs != nil {
			b.obs.Skipped.WithLabelValues(id, reason).Inc()
		}
	}}
}

// keepRunning runs a channel's loop until ctx ends. A loop that panics is
// started again after a backoff (1 s, doubling to a minute; reset after a
// minute of running); a loop that returns is done.
func (b *Bot) keepRunning(ctx context.Context, id, what string, loop func(context.Context)) {
	env := b.channelEnv(id)
	wait := time.Second
	for {
		started := time.Now()
		err := env.Guard(what, func() error { loop(ctx); return nil })
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Since(started) > time.Minute {
			wait = time.Second
		}
		b.log.Warn("a channel's loop panicked: starting it again", "provider", id, "loop", what, "after", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// routeOwner is a channel's routes on a mux of their own, to tell which
// channel a request of the bot's mux went to.
type routeOwner struct {
	id  string
	mux *http.ServeMux
}

// recovering serves h and recovers a panic in it: logged and counted for
// the channel whose route it was (owners), and answered 500 when nothing
// was written yet (else the connection is cut). 500, not a 4xx: the
// message was not journaled, and the channels' own redelivery policies,
// all bounded, may bring it back to a fixed version; nothing is lost.
func (b *Bot) recovering(h http.Handler, owners []routeOwner) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &panicWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			env := channel.Env{Logger: b.log} // the bot's own routes: not a channel's
			if id := ownerOf(owners, r); id != "" {
				env = b.channelEnv(id)
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
func ownerOf(owners []routeOwner, r *http.Request) string {
	if r.Pattern == "" {
		return ""
	}
	for _, o := range owners {
		if _, p := o.mux.Handler(r); p == r.Pattern {
			return o.id
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
