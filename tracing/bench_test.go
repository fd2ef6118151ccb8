package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/tracing"
)

// cpuTime is the process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkToolCallSpan is the cost of one traced tool call as the worker
// makes it (worker/trace.go: a span with the execute_tool attributes, its
// outcome set at the end) exported over OTLP/HTTP by the batch processor to a
// receiver that drops it. ns/op is the caller's share; cpu-ns/span is the
// whole process's CPU per span, the batch processor's export and the
// receiver's read included (issue 42: the overhead of tracing on).
func BenchmarkToolCallSpan(b *testing.B) {
	var exports atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		exports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	ctx := context.Background()
	p, err := tracing.New(ctx, tracing.Config{Enabled: true, Endpoint: srv.URL, ServiceName: "bench"}.WithDefaults())
	require.NoError(b, err)
	defer func() { _ = p.Shutdown(ctx) }()
	step, stepSpan := p.StartRemote(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "invoke_agent writer")
	defer stepSpan.End()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		_, span := p.Start(step, tracing.OpExecuteTool+" todo", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
			tracing.GenAIOperationName.String(tracing.OpExecuteTool), tracing.GenAIToolName.String("todo"),
			tracing.GenAIToolCallID.String("call_0123456789abcdef"), tracing.ToolTier.String("Safe")))
		span.SetAttributes(tracing.ToolOutcome.String("allowed"))
		span.End()
	}
	require.NoError(b, p.ForceFlush(ctx))
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/span")
	if exports.Load() == 0 {
		b.Fatal("no export reached the receiver")
	}
}
