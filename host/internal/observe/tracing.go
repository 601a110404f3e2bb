package observe

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the bot's spans' instrumentation scope.
const tracerName = "github.com/botrun/botrun/host"

// Span names of one inbound message's trace: the admission (root), its
// inbox journal write, the turn, the guest's handler run, each channel send
// and the completion.
const (
	SpanAdmit    = "botrun.admit"
	SpanJournal  = "botrun.journal"
	SpanTurn     = "botrun.turn"
	SpanGuest    = "botrun.guest"
	SpanSend     = "botrun.send"
	SpanComplete = "botrun.complete"
)

// Tracer is the bot's tracer: off (the zero Tracer) without a provider, so
// that a span costs nothing.
type Tracer struct{ tracer trace.Tracer }

// NewTracer traces to tp; nil is off. The provider is the caller's to shut
// down (botrun builds the OTLP exporter of [tracing] otlp_endpoint).
func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{tracer: tp.Tracer(tracerName)}
}

// Tracer is the OpenTelemetry tracer (nil: tracing off), for a package
// that starts its own spans.
func (tr Tracer) Tracer() trace.Tracer { return tr.tracer }

// On reports whether spans are recorded.
func (tr Tracer) On() bool { return tr.tracer != nil }

// Start starts a span named name under ctx's; off, it returns ctx and a
// no-op span without allocating.
func (tr Tracer) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if tr.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer.Start(ctx, name)
}

// StartUnder starts a span named name whose parent is parent (a span of
// another goroutine, e.g. the admission's), on ctx.
func (tr Tracer) StartUnder(ctx context.Context, parent trace.SpanContext, name string) (context.Context, trace.Span) {
	if tr.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer.Start(trace.ContextWithSpanContext(ctx, parent), name)
}

// TraceHandler adds the trace id of the span in a record's context (the
// turn's lines, its sends', the guest's own, all logged with their context)
// as trace_id.
type TraceHandler struct{ slog.Handler }

// Handle logs r with its trace id.
func (h TraceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs is the handler's, still adding trace ids.
func (h TraceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return TraceHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup is the handler's, still adding trace ids.
func (h TraceHandler) WithGroup(name string) slog.Handler {
	return TraceHandler{h.Handler.WithGroup(name)}
}

// IDAttr tags a recording span with the record's id and provider.
func IDAttr(span trace.Span, id, providerID string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("botrun.id", id), attribute.String("botrun.provider", providerID))
	}
}

// Fail marks a recording span failed with err.
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
