package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/botrun/botrun/host/config"
)

// newTracerProvider builds the OTLP/HTTP exporter [tracing] otlp_endpoint
// names, sampled by sample_ratio, for host.Options.TracerProvider; shutdown
// flushes and stops it. Without an endpoint: no provider (the bot traces
// nothing) and a shutdown that does nothing.
func newTracerProvider(cfg config.Tracing) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if cfg.OTLPEndpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing.otlp_endpoint %q: %w", cfg.OTLPEndpoint, err)
	}
	ratio := 1.0
	if cfg.SampleRatio != nil {
		ratio = *cfg.SampleRatio
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))))
	return sdk, sdk.Shutdown, nil
}
