package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/metrics"
)

// A latency observed inside a sampled span carries the span's trace as its
// exemplar (issue 42: a slow bucket links to a run's trace), served in the
// OpenMetrics format a Prometheus scraper asks for; without a span, or with
// an unsampled one, the observation has none.
func TestLatencyExemplarsNameTheTrace(t *testing.T) {
	t.Parallel()
	m := setup(t)
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tid, err := trace.TraceIDFromHex(traceID)
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex(spanID)
	require.NoError(t, err)
	sampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))

	metrics.ObserveTraced(sampled, m.LLMLatency.WithLabelValues("script", "traced"), 0.2)
	metrics.ObserveTraced(unsampled, m.LLMLatency.WithLabelValues("script", "unsampled"), 0.2)
	metrics.ObserveTraced(context.Background(), m.ToolDuration.WithLabelValues("write_file"), 0.01)

	exemplars := map[string]map[string]string{}
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			var model string
			for _, l := range metric.GetLabel() {
				if l.GetName() == "model" || l.GetName() == "tool" {
					model = l.GetValue()
				}
			}
			for _, b := range metric.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					labels := map[string]string{}
					for _, l := range e.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					exemplars[model] = labels
				}
			}
		}
	}
	require.Equal(t, map[string]map[string]string{"traced": {"trace_id": traceID, "span_id": spanID}}, exemplars)

	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, resp.Header.Get("Content-Type"), "application/openmetrics-text")
	// The exemplar's labels come from a map: either order.
	var line string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, " # {") {
			require.Empty(t, line, "one exemplar only")
			line = l
		}
	}
	require.Contains(t, line, `aetherium_llm_request_duration_seconds_bucket{model="traced"`)
	require.Contains(t, line, `trace_id="`+traceID+`"`)
	require.Contains(t, line, `span_id="`+spanID+`"`)
	require.Contains(t, line, `"} 0.2 `)
}
