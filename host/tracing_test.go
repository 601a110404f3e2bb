package host

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/botrun/botrun/abi"
	"github.com/botrun/botrun/durability/memory"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/internal/observe"
	"github.com/botrun/botrun/host/wasm"
)

// TestTracingOneTracePerMessage checks a message makes one trace whose
// spans nest admission → journal, admission → turn → guest → each send, and
// turn → completion, and that the turn's log lines carry its trace id.
func TestTracingOneTracePerMessage(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	var logs syncBuffer
	// The handler sends twice, then fails: its error is logged by the turn.
	guest := native(func(ctx context.Context, ev abi.Event, env wasm.Env) error {
		for _, text := range []string{"one", "two"} {
			if _, err := env.Send(ctx, abi.SendRequest{Chat: ev.Chat, Text: text}); err != nil {
				return err
			}
		}
		return &wasm.HandlerError{Message: "done on purpose"}
	})
	// The channel fails the first send once: the sender logs the retry.
	ch := newChannel()
	ch.fail = func(call int, _ channel.Outbound) error {
		if call == 1 {
			return errors.New("busy, try again")
		}
		return nil
	}
	b, err := New(context.Background(), testConfig(t, ""), Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Backend: memory.New(), Guest: guest, Channels: []channel.Channel{ch}, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	defer b.Stop(context.Background())
	if _, err := b.Admit(context.Background(), "web", channel.Message{ID: "m1", Chat: "c1", From: "u", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	byName := map[string][]tracetest.SpanStub{}
	// The turn's span ends last on the worker; the admission's when Admit
	// returns, which may be later still.
	if !waitFor(2*time.Minute, func() bool {
		byName = map[string][]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byName[s.Name] = append(byName[s.Name], s)
		}
		return len(byName[observe.SpanTurn]) > 0 && len(byName[observe.SpanAdmit]) > 0
	}) {
		t.Fatalf("no turn span after 2 minutes; spans: %v", byName)
	}
	want := map[string]int{observe.SpanAdmit: 1, observe.SpanJournal: 1, observe.SpanTurn: 1, observe.SpanGuest: 1, observe.SpanSend: 2, observe.SpanComplete: 1}
	for name, n := range want {
		if len(byName[name]) != n {
			t.Fatalf("%d %s spans, want %d (spans: %v)", len(byName[name]), name, n, byName)
		}
	}
	if n := len(exp.GetSpans()); n != 7 {
		t.Errorf("%d spans, want 7: %v", n, byName)
	}
	root := byName[observe.SpanAdmit][0]
	traceID := root.SpanContext.TraceID()
	if root.Parent.IsValid() {
		t.Errorf("the admission span has a parent: %v", root.Parent)
	}
	parentOf := map[string]string{observe.SpanJournal: observe.SpanAdmit, observe.SpanTurn: observe.SpanAdmit, observe.SpanGuest: observe.SpanTurn, observe.SpanSend: observe.SpanGuest, observe.SpanComplete: observe.SpanTurn}
	for name, parent := range parentOf {
		for _, s := range byName[name] {
			if s.SpanContext.TraceID() != traceID {
				t.Errorf("%s is in trace %s, want %s", name, s.SpanContext.TraceID(), traceID)
			}
			if s.Parent.SpanID() != byName[parent][0].SpanContext.SpanID() {
				t.Errorf("%s's parent is %s, want the %s span", name, s.Parent.SpanID(), parent)
			}
		}
	}
	// The turn's own line and the sender's, each with the trace id once.
	for _, msg := range []string{"handler returned an error", "send failed; will retry"} {
		var found bool
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec["msg"].(string), msg) {
				found = true
				if rec["trace_id"] != traceID.String() || strings.Count(line, `"trace_id"`) != 1 {
					t.Errorf("the turn's log line has trace_id %v, want %s once: %s", rec["trace_id"], traceID, line)
				}
			}
		}
		if !found {
			t.Errorf("no log line %q of the turn:\n%s", msg, logs.String())
		}
	}
}

// TestTracingOff checks that without [tracing] the bot has no tracer: its
// spans are no-ops and its logs carry no trace id.
func TestTracingOff(t *testing.T) {
	b, err := New(context.Background(), testConfig(t, ""), Options{Logger: discard, Backend: memory.New(),
		Guest: native(func(context.Context, abi.Event, wasm.Env) error { return nil }), Channels: []channel.Channel{newChannel()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	if b.tr.On() {
		t.Fatalf("tracing is on without [tracing] otlp_endpoint")
	}
	ctx, span := b.tr.Start(context.Background(), observe.SpanAdmit)
	if span.IsRecording() || span.SpanContext().IsValid() || ctx != context.Background() {
		t.Fatalf("an off tracer made a span: %v", span.SpanContext())
	}
	if n := testing.AllocsPerRun(100, func() {
		_, s := b.tr.Start(ctx, observe.SpanTurn)
		observe.IDAttr(s, "id", "web")
		s.End()
	}); n != 0 {
		t.Fatalf("an off span allocates %v times", n)
	}
}
