package turn

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/host/internal/answers"
	"github.com/botrun/botrun/host/internal/fetch"
	"github.com/botrun/botrun/host/wasm"
)

// API is one [[apis]] entry as a turn calls it.
type API struct {
	Caller *fetch.Caller
	// Journal commits each answer before the guest reads it (the entry's
	// journal key).
	Journal bool
}

// Fetch implements wasm.Fetcher: the n-th call of the event goes to its
// API under the Idempotency-Key "<event id>:fetch:<n>" (or the guest's
// key). With the API's journal on, an answer journaled for the same call
// with the same fingerprint is answered again without calling
// (fetch_replayed); another fingerprint is called anew (fetch_diverged);
// a replayed event's call with nothing journaled is called again under the
// same key (fetch_ambiguous: the crashed attempt may have made it). The
// answer, or the failure, is journaled before the guest reads it.
func (t *Turn) Fetch(ctx context.Context, req abi.FetchRequest) (res abi.FetchResponse, err error) {
	if t.tracer != nil {
		var span trace.Span
		ctx, span = t.tracer.Start(ctx, "botrun.fetch")
		defer func() { endFetchSpan(span, t.event.ID, req, res, err) }()
	}
	// Every call counts against bot.max_fetches, one to an API the config
	// does not name too (the dry run numbers them the same way).
	if t.fetches >= t.maxFetches {
		return abi.FetchResponse{}, fmt.Errorf("more than bot.max_fetches = %d API calls in one event: %w", t.maxFetches, wasm.ErrTooLarge)
	}
	t.fetches++
	n := t.fetches
	api, ok := t.apis[req.API]
	if !ok {
		return abi.FetchResponse{}, wasm.ErrNoAPI
	}
	if err := t.fence(); err != nil {
		return abi.FetchResponse{}, err
	}
	freq, fp := answers.Call(t.event.ID, n, req)
	journal := api.Journal && t.answers != nil
	if journal {
		a, found, err := t.answers.Get(ctx, t.event.ID, n)
		if err != nil {
			return abi.FetchResponse{}, err
		}
		if res, ok, err := a.Replay(fp); found && ok {
			t.metrics.FetchReplayed.Add(1)
			return res, err
		}
		switch {
		case found:
			t.metrics.FetchDiverged.Add(1)
			if req.Key == "" {
				// Another request than the journaled one: an API that
				// honours the key must not take it for the first.
				freq.Key = answers.DivergedKey(t.event.ID, n, fp)
			}
		case t.event.Attempt > 1:
			t.metrics.FetchAmbiguous.Add(1)
		}
	}
	start := time.Now()
	res, ferr := t.call(ctx, api.Caller, freq)
	took := time.Since(start)
	if ferr != nil {
		var failed *abi.FetchError
		if !errors.As(ferr, &failed) {
			return abi.FetchResponse{}, ferr
		}
	}
	if journal {
		// The answer lands only while the turn still holds its record: a
		// replica that lost it meanwhile must not overwrite the answer the
		// new owner journaled.
		if err := t.fence(); err != nil {
			return abi.FetchResponse{}, err
		}
		a := answers.Answer{Fingerprint: fp, At: t.sender.Now(), API: req.API, Method: cmp.Or(freq.Method, "GET"), Path: shownPath(req.Path),
			TookMs: took.Milliseconds()}
		if ferr != nil {
			a.Error = ferr.(*abi.FetchError)
		} else {
			a.Response = &res
		}
		if err := t.answers.Put(ctx, t.event.ID, n, a); err != nil {
			return abi.FetchResponse{}, err
		}
	}
	return res, ferr
}

// call makes one call within what is left of the event's bot.max_fetch_wait.
// Its error is an *abi.FetchError (no response), one wrapping
// abi.ErrBadPayload (a request the host refuses, nothing sent), or the
// turn's context's.
func (t *Turn) call(ctx context.Context, c *fetch.Caller, req fetch.Request) (abi.FetchResponse, error) {
	left := t.fetchWait - t.waited
	if left <= 0 {
		return abi.FetchResponse{}, &abi.FetchError{Reason: abi.FetchTimeout, Message: "the event's API calls used up bot.max_fetch_wait"}
	}
	cctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	start := time.Now()
	r, err := c.Do(cctx, req)
	took := time.Since(start)
	t.waited += took
	var failed *fetch.Error
	if err == nil || errors.As(err, &failed) || cctx.Err() != nil {
		t.metrics.FetchCalls.Add(1) // made (or tried): not refused before sending
		if t.fetchTime != nil {
			t.fetchTime(c.Name(), outcome(r.Status, failed, err), took)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, fetch.ErrBadPath), errors.Is(err, fetch.ErrBadRequest):
		// The message quotes the guest's path or header: at most 300
		// bytes of it reach the log.
		msg := err.Error()
		if len(msg) > 300 {
			msg = strings.ToValidUTF8(msg[:300], "") + "…"
		}
		return abi.FetchResponse{}, fmt.Errorf("%w: %s", abi.ErrBadPayload, msg)
	case errors.As(err, &failed):
		t.metrics.FetchFailed.Add(1)
		return abi.FetchResponse{}, &abi.FetchError{Reason: failed.Reason, Message: failed.Message}
	case ctx.Err() != nil:
		return abi.FetchResponse{}, err
	case cctx.Err() != nil:
		t.metrics.FetchFailed.Add(1)
		return abi.FetchResponse{}, &abi.FetchError{Reason: abi.FetchTimeout, Message: "the event's API calls used up bot.max_fetch_wait"}
	default:
		return abi.FetchResponse{}, err
	}
	res := abi.FetchResponse{Status: r.Status, Headers: r.Header}
	if utf8.Valid(r.Body) {
		res.Body = string(r.Body)
	} else {
		res.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
	}
	return res, nil
}

// outcome is a call's label in botrun_fetch_seconds: the response's status
// class (2xx...5xx), or the reason it got none (refused, connection,
// timeout, too-large).
func outcome(status int, failed *fetch.Error, err error) string {
	switch {
	case failed != nil:
		return failed.Reason
	case err != nil:
		return abi.FetchTimeout // the event's bot.max_fetch_wait ran out
	case status >= 100 && status < 600:
		return string(rune('0'+status/100)) + "xx"
	}
	return "other"
}

// endFetchSpan ends a call's span: the record, the API, the method and
// path (not the query, the headers or the bodies), and what it got.
func endFetchSpan(span trace.Span, record string, req abi.FetchRequest, res abi.FetchResponse, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	path := shownPath(req.Path)
	method := req.Method
	if method == "" {
		method = "GET"
	}
	span.SetAttributes(attribute.String("botrun.id", record), attribute.String("botrun.api", req.API),
		attribute.String("http.request.method", method), attribute.String("url.path", path))
	var failed *abi.FetchError
	switch {
	case err == nil:
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status), attribute.Bool("botrun.fetch.replayed", res.Replayed))
	case errors.As(err, &failed):
		span.SetAttributes(attribute.String("botrun.fetch.failed", failed.Reason))
		span.SetStatus(codes.Error, failed.Reason)
	default:
		span.SetStatus(codes.Error, "refused")
	}
}

// shownPath is a call's path as spans and the console show it: without
// its query, at most 256 bytes.
func shownPath(p string) string {
	p, _, _ = strings.Cut(p, "?")
	if len(p) > 256 {
		p = strings.ToValidUTF8(p[:256], "")
	}
	return p
}
