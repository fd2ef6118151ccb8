package tracing_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/tracing"
)

const validParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  tracing.Config
		bad  string
	}{
		{name: "zero", cfg: tracing.Config{}},
		{name: "grpc", cfg: tracing.Config{Enabled: true, Exporter: tracing.ExporterGRPC, Endpoint: "https://collector:4317", SampleRatio: 0.5}},
		{name: "unknown exporter", cfg: tracing.Config{Exporter: "zipkin"}, bad: "exporter"},
		{name: "endpoint without scheme", cfg: tracing.Config{Endpoint: "collector:4318"}, bad: "endpoint"},
		{name: "ratio over one", cfg: tracing.Config{SampleRatio: 1.5}, bad: "sample ratio"},
		{name: "negative timeout", cfg: tracing.Config{ShutdownTimeout: -1}, bad: "shutdown timeout"},
		{name: "trace url", cfg: tracing.Config{TraceURL: "http://jaeger:16686/trace/{trace_id}"}},
		{name: "trace url without scheme", cfg: tracing.Config{TraceURL: "jaeger:16686/trace/{trace_id}"}, bad: "trace_url"},
		{name: "trace url without placeholder", cfg: tracing.Config{TraceURL: "http://jaeger:16686/search"}, bad: "{trace_id}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.bad == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.bad)
		})
	}
	d := tracing.Config{}.WithDefaults()
	require.Equal(t, tracing.DefaultExporter, d.Exporter)
	require.Equal(t, tracing.DefaultServiceName, d.ServiceName)
	require.Equal(t, tracing.DefaultShutdownTimeout, d.ShutdownTimeout)
	require.False(t, d.Enabled, "tracing is off by default")
}

func TestOffIsNoop(t *testing.T) {
	t.Parallel()
	p, err := tracing.New(context.Background(), tracing.Config{})
	require.NoError(t, err)
	require.False(t, p.Enabled())
	ctx := context.Background()
	got, span := p.StartRemote(ctx, validParent, "x")
	require.Equal(t, ctx, got, "off, the context is not touched")
	require.False(t, span.IsRecording())
	span.End()
	require.Empty(t, tracing.Traceparent(got))
	require.NoError(t, p.Shutdown(ctx))
	require.NoError(t, p.ForceFlush(ctx))
	_, span = p.TracerProvider().Tracer("t").Start(ctx, "y")
	require.False(t, span.IsRecording())
}

func TestRemote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, traceparent string
		parented          bool
	}{
		{name: "valid", traceparent: validParent, parented: true},
		{name: "empty", traceparent: ""},
		{name: "malformed", traceparent: "00-not-a-trace-01"},
		{name: "zero trace id", traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{name: "upper case", traceparent: strings.ToUpper(validParent)},
		{name: "version ff", traceparent: "ff" + validParent[2:]},
		{name: "version 00 with extra field", traceparent: validParent + "-extra"},
		{name: "oversized", traceparent: "01" + validParent[2:] + "-" + strings.Repeat("a", tracing.MaxTraceparent)},
		{name: "injection", traceparent: validParent + "\r\nbaggage: secret=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
			require.NoError(t, err)
			_, span := p.StartRemote(context.Background(), tc.traceparent, "submit")
			span.End()
			spans := exp.GetSpans()
			require.Len(t, spans, 1)
			if tc.parented {
				require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext.TraceID().String())
				require.Equal(t, "00f067aa0ba902b7", spans[0].Parent.SpanID().String())
				require.True(t, spans[0].Parent.IsRemote())
				return
			}
			require.False(t, spans[0].Parent.IsValid(), "ignored: a new root")
			require.NotEqual(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext.TraceID().String())
		})
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
	require.NoError(t, err)
	ctx, root := p.Start(context.Background(), "root")
	tp := tracing.Traceparent(ctx)
	require.Len(t, tp, 55)
	_, child := p.StartRemote(context.Background(), tp, "child")
	child.End()
	tracing.Fail(root, context.Canceled)
	root.End()
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	require.Equal(t, spans[1].SpanContext.TraceID(), spans[0].SpanContext.TraceID())
	require.Equal(t, spans[1].SpanContext.SpanID(), spans[0].Parent.SpanID())
	require.Equal(t, codes.Error, spans[1].Status.Code)
	require.NoError(t, p.Shutdown(context.Background()))
}

// The propagator is tracecontext only: baggage a client sends is neither read
// nor written, so it cannot travel on to a tool's outbound request.
func TestNoBaggage(t *testing.T) {
	t.Parallel()
	in := propagation.MapCarrier{"traceparent": validParent, "baggage": "token=secret"}
	ctx := tracing.Propagator().Extract(context.Background(), in)
	require.Zero(t, baggage.FromContext(ctx).Len())
	m, err := baggage.NewMember("token", "secret")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	out := propagation.MapCarrier{}
	tracing.Propagator().Inject(baggage.ContextWithBaggage(ctx, b), out)
	require.NotContains(t, out, "baggage")
	require.NotContains(t, tracing.Propagator().Fields(), "baggage")
}

func TestLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil))).With("k", "v")
	log.InfoContext(context.Background(), "no span")
	require.NotContains(t, buf.String(), "trace_id")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "span")
	require.Contains(t, buf.String(), "trace_id=01000000000000000000000000000000 span_id=0200000000000000")
}

// A run links to its trace only with a template and a valid stored
// traceparent; the trace id is read from the traceparent as Remote reads it.
func TestTraceLink(t *testing.T) {
	t.Parallel()
	cfg := tracing.Config{TraceURL: "http://jaeger:16686/trace/{trace_id}"}
	for _, tc := range []struct {
		name, traceparent, template, want string
	}{
		{name: "valid", traceparent: validParent, template: cfg.TraceURL, want: "http://jaeger:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "no template", traceparent: validParent},
		{name: "tracing was off", template: cfg.TraceURL},
		{name: "malformed", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-zz-01", template: cfg.TraceURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tracing.TraceLink(tc.template, tc.traceparent))
		})
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	require.Empty(t, tracing.TraceID(context.Background()), "no span, no trace id")
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(tracetest.NewInMemoryExporter()))
	require.NoError(t, err)
	ctx, span := p.StartRemote(context.Background(), validParent, "x")
	defer span.End()
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", tracing.TraceID(ctx))
	require.Equal(t, tracing.TraceID(ctx), tracing.TraceIDOf(tracing.Traceparent(ctx)))
	off, _ := tracing.Noop().Start(context.Background(), "y")
	require.Empty(t, tracing.TraceID(off), "off: no trace id")
}

// Captured content is capped at MaxContentBytes, at a character boundary,
// with a marker saying how much was cut; shorter content is left as it is.
func TestCapContent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      string
		capped  bool
		keepLen int
	}{
		{name: "empty", in: ""},
		{name: "short", in: "hello"},
		{name: "exactly the limit", in: strings.Repeat("a", tracing.MaxContentBytes)},
		{name: "one byte over", in: strings.Repeat("a", tracing.MaxContentBytes+1), capped: true, keepLen: tracing.MaxContentBytes},
		{name: "a megabyte", in: strings.Repeat("b", 1<<20), capped: true, keepLen: tracing.MaxContentBytes},
		// "é" is two bytes: the limit falls inside one, which is cut whole.
		{name: "cut inside a character", in: "x" + strings.Repeat("é", tracing.MaxContentBytes), capped: true, keepLen: tracing.MaxContentBytes - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tracing.CapContent(tc.in)
			require.True(t, utf8.ValidString(got))
			if !tc.capped {
				require.Equal(t, tc.in, got)
				return
			}
			require.Equal(t, tc.in[:tc.keepLen], got[:tc.keepLen])
			require.Equal(t, fmt.Sprintf("…[truncated: %d of %d bytes]", len(tc.in)-tc.keepLen, len(tc.in)), got[tc.keepLen:])
			require.Less(t, len(got), tracing.MaxContentBytes+64)
		})
	}
}

// tracing.endpoint is the collector's base URL, as the docs and
// OTEL_EXPORTER_OTLP_ENDPOINT give it: the OTLP/HTTP exporter posts to its
// /v1/traces (a bare URL posted to "/", which a real collector answers 404); a
// URL with a path of its own is kept as it is.
func TestHTTPEndpointPostsToTheTracesPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ suffix, want string }{
		{"", "/v1/traces"},
		{"/", "/v1/traces"},
		{"/custom/traces", "/custom/traces"},
	} {
		t.Run("endpoint"+tc.suffix, func(t *testing.T) {
			t.Parallel()
			paths := make(chan string, 10)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				paths <- r.URL.Path
				w.Header().Set("Content-Type", "application/x-protobuf")
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(srv.Close)
			p, err := tracing.New(t.Context(), tracing.Config{Enabled: true, Exporter: tracing.ExporterHTTP, Endpoint: srv.URL + tc.suffix}.WithDefaults())
			require.NoError(t, err)
			_, span := p.Start(t.Context(), "one")
			span.End()
			require.NoError(t, p.Shutdown(t.Context()), "the span is exported on shutdown")
			require.Equal(t, tc.want, <-paths)
		})
	}
	_, err := tracing.New(t.Context(), tracing.Config{Enabled: true, Exporter: tracing.ExporterHTTP, Endpoint: "http://"}.WithDefaults())
	require.ErrorContains(t, err, "tracing.endpoint")
}
