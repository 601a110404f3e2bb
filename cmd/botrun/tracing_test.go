package main

import (
	"context"
	"testing"
	"time"

	"github.com/botrun/botrun/host/config"
)

// TestTracingConfigured builds the OTLP/HTTP exporter [tracing]
// otlp_endpoint names, sampled by sample_ratio; without one, no provider.
func TestTracingConfigured(t *testing.T) {
	ratio := 0.5
	tp, shutdown, err := newTracerProvider(config.Tracing{OTLPEndpoint: "http://127.0.0.1:4318/v1/traces", SampleRatio: &ratio})
	if err != nil {
		t.Fatal(err)
	}
	if tp == nil || shutdown == nil {
		t.Fatalf("[tracing] otlp_endpoint set, but no tracer or exporter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown with no span to export: %v", err)
	}
	if tp, _, err := newTracerProvider(config.Tracing{}); tp != nil || err != nil {
		t.Fatalf("no otlp_endpoint: provider %v, err %v; want none", tp, err)
	}
}
