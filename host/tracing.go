package host

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/host/config"
)

// tracerName names the bot's spans' instrumentation scope.
const tracerName = "github.com/botrun/botrun/host"

// Span names of one inbound message's trace: the admission (root), its
// inbox journal write, the turn, the guest's handler run, each channel send
// and the completion.
const (
	spanAdmit    = "botrun.admit"
	spanJournal  = "botrun.journal"
	spanTurn     = "botrun.turn"
	spanGuest    = "botrun.guest"
	spanSend     = "botrun.send"
	spanComplete = "botrun.complete"
)

// tracing is the bot's tracer: nil tracer when [tracing] is off, so that a
// span costs nothing.
type tracing struct {
	tracer trace.Tracer
	// shutdown flushes and stops the exporter the bot built (nil for an
	// injected provider).
	shutdown func(context.Context) error
}

// newTracing builds the tracer: the injected provider, else an OTLP/HTTP
// exporter when [tracing] otlp_endpoint is set, else none.
func newTracing(cfg config.Tracing, injected trace.TracerProvider) (tracing, error) {
	if injected != nil {
		return tracing{tracer: injected.Tracer(tracerName)}, nil
	}
	if cfg.OTLPEndpoint == "" {
		return tracing{}, nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint))
	if err != nil {
		return tracing{}, fmt.Errorf("tracing.otlp_endpoint %q: %w", cfg.OTLPEndpoint, err)
	}
	ratio := 1.0
	if cfg.SampleRatio != nil {
		ratio = *cfg.SampleRatio
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))))
	return tracing{tracer: tp.Tracer(tracerName), shutdown: tp.Shutdown}, nil
}

// start starts a span named name under ctx's; off, it returns ctx and a
// no-op span without allocating.
func (tr tracing) start(ctx context.Context, name string) (context.Context, trace.Span) {
	if tr.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer.Start(ctx, name)
}

// startUnder starts a span named name whose parent is parent (a span of
// another goroutine, e.g. the admission's), on ctx.
func (tr tracing) startUnder(ctx context.Context, parent trace.SpanContext, name string) (context.Context, trace.Span) {
	if tr.tracer == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer.Start(trace.ContextWithSpanContext(ctx, parent), name)
}

// traceHandler adds the trace id of the span in a record's context (the
// turn's lines, its sends', the guest's own, all logged with their context)
// as trace_id.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// idAttr tags a recording span with the record's id and provider.
func idAttr(span trace.Span, id, providerID string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("botrun.id", id), attribute.String("botrun.provider", providerID))
	}
}

// fail marks a recording span failed with err.
func fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
