package research_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
)

// An agent's outbound call to a third-party site carries none of the fleet's
// trace headers (docs/traces.md): a traceparent would leak the run's trace id,
// baggage whatever secret a client put in it. The tool runs inside a recording
// span with baggage on its context, as a traced step's tool call does.
func TestOutboundCallsCarryNoTraceHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><head><title>t</title></head><body><p>page</p></body></html>")
	}))
	t.Cleanup(srv.Close)
	reg := tools.NewRegistry()
	research.Register(reg, egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), research.Config{}, nil)
	router := tools.NewRouter(reg)

	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(tracetest.NewInMemoryExporter()))
	require.NoError(t, err)
	m, err := baggage.NewMember("api_key", "sk-baggage-secret")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	ctx, span := p.Start(baggage.ContextWithBaggage(context.Background(), b), "execute_tool")
	defer span.End()
	require.True(t, span.SpanContext().IsValid())

	for _, tc := range []struct {
		tool string
		args any
	}{
		{tool: "http_request", args: research.RequestArgs{Method: "GET", URL: srv.URL + "/a"}},
		{tool: "http_health_check", args: map[string]any{"url": srv.URL + "/b"}},
		{tool: "web_fetch", args: research.FetchArgs{URL: srv.URL + "/c"}},
	} {
		raw, err := json.Marshal(tc.args)
		require.NoError(t, err)
		caller := &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: "r", SessionID: "s", Agent: "a",
			Access: tools.Access{Tools: []string{tc.tool}}}
		_, err = router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: tc.tool, Args: raw})
		require.NoError(t, err, tc.tool)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3)
	for _, h := range seen {
		for _, k := range []string{"Traceparent", "Tracestate", "Baggage"} {
			require.Empty(t, h.Values(k), "%s on an outbound request", k)
		}
		for k, vs := range h {
			for _, v := range vs {
				require.NotContains(t, v, "sk-baggage-secret", k)
				require.NotContains(t, v, span.SpanContext().TraceID().String(), k)
			}
		}
	}
}
