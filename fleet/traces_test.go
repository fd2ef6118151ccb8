package fleet_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/tracing"
)

// submitTraced posts the demo run with a traceparent header ("" sends none).
func submitTraced(t *testing.T, f *fleettest.Fleet, traceparent string) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"template": "demo", "prompt": "Greet the user in a file", "variables": map[string]any{"topic": "greetings"}})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, f.URL+"/api/orchestrator/run-from-template", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	// Baggage a client sends is never read: it must not reach a span, a tool
	// or the sandbox.
	req.Header.Set("baggage", "api_key=sk-secret-in-baggage")
	resp, err := f.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	var out struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.RunID
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// runTrace is the spans of a run's trace: its submit span (found by the run
// id) and every span with its trace id.
func runTrace(spans tracetest.SpanStubs, runID string) (root tracetest.SpanStub, all []tracetest.SpanStub, ok bool) {
	for _, s := range spans {
		if v, found := attr(s, tracing.RunID); found && v.AsString() == runID && s.Name == "submit run" {
			root, ok = s, true
		}
	}
	if !ok {
		return root, nil, false
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() == root.SpanContext.TraceID() {
			all = append(all, s)
		}
	}
	return root, all, true
}

// The demo run (a supervisor that delegates to a writer: a start step, a turn,
// a resume, on the worker's tasks) is one trace: the API's submit span is its
// root (or the child of a valid client traceparent), every step is a child of
// it, every model call and tool call a child of its step; GenAI attributes are
// there, message contents are not. A malformed or oversized traceparent is
// ignored: the run gets a trace of its own.
func TestRunIsOneTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	const traceURL = "http://jaeger.test:16686/trace/{trace_id}"
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{SpanExporter: exp},
		Configure: func(c *config.Config) { c.Tracing.TraceURL = traceURL }})
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	cases := []struct {
		name, traceparent string
		joinsClient       bool
	}{
		{name: "no traceparent"},
		{name: "client traceparent", traceparent: "00-" + clientTrace + "-00f067aa0ba902b7-01", joinsClient: true},
		{name: "malformed traceparent", traceparent: "00-" + clientTrace + "-zz-01"},
		{name: "oversized traceparent", traceparent: "01-" + clientTrace + "-00f067aa0ba902b7-01-" + strings.Repeat("a", tracing.MaxTraceparent)},
	}
	ids := make([]string, len(cases))
	for i, tc := range cases {
		ids[i] = submitTraced(t, f, tc.traceparent)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := f.WaitTerminal(ids[i], 60*time.Second)
			require.Equal(t, "completed", run.Status)
			var root tracetest.SpanStub
			var spans []tracetest.SpanStub
			// A step's span ends just after the run's terminal event.
			require.Eventually(t, func() bool {
				var ok bool
				root, spans, ok = runTrace(exp.GetSpans(), ids[i])
				return ok && count(spans, "chat ") == 7 && count(spans, "invoke_agent ") >= 3
			}, 10*time.Second, 20*time.Millisecond)

			if tc.joinsClient {
				require.Equal(t, clientTrace, root.SpanContext.TraceID().String())
				require.Equal(t, "00f067aa0ba902b7", root.Parent.SpanID().String())
			} else {
				require.False(t, root.Parent.IsValid(), "the submit span is the root")
				require.NotEqual(t, clientTrace, root.SpanContext.TraceID().String())
			}
			require.Equal(t, trace.SpanKindServer, root.SpanKind)

			byID := map[trace.SpanID]tracetest.SpanStub{}
			for _, s := range spans {
				byID[s.SpanContext.SpanID()] = s
			}
			steps := map[string]int{}
			for _, s := range spans {
				if s.Name == root.Name {
					continue
				}
				parent, found := byID[s.Parent.SpanID()]
				require.True(t, found, "%s: its parent is a span of the run's trace", s.Name)
				op, _ := attr(s, tracing.GenAIOperationName)
				switch op.AsString() {
				case tracing.OpInvokeAgent:
					// Every step, whichever task and process runs it, is a
					// child of the submit span, read from the run's row.
					require.Equal(t, root.SpanContext.SpanID(), parent.SpanContext.SpanID(), s.Name)
					require.True(t, s.Parent.IsRemote())
					agent, _ := attr(s, tracing.GenAIAgentName)
					steps[agent.AsString()]++
					runID, _ := attr(s, tracing.RunID)
					require.Equal(t, ids[i], runID.AsString())
					if agent.AsString() == "writer" {
						d, ok := attr(s, tracing.DelegationID)
						require.True(t, ok)
						require.NotEmpty(t, d.AsString())
					}
				case tracing.OpChat:
					require.True(t, strings.HasPrefix(parent.Name, "invoke_agent "), "a model call is a child of its step")
					require.Equal(t, trace.SpanKindClient, s.SpanKind)
					for _, k := range []attribute.Key{tracing.GenAISystem, tracing.GenAIProviderName, tracing.GenAIRequestModel,
						tracing.GenAIInputTokens, tracing.GenAIOutputTokens, tracing.GenAIFinishReasons} {
						_, ok := attr(s, k)
						require.True(t, ok, "%s has %s", s.Name, k)
					}
					sys, _ := attr(s, tracing.GenAISystem)
					require.Equal(t, "script", sys.AsString())
				case tracing.OpExecuteTool:
					require.True(t, strings.HasPrefix(parent.Name, "invoke_agent "), "a tool call is a child of its step")
					name, _ := attr(s, tracing.GenAIToolName)
					outcome, _ := attr(s, tracing.ToolOutcome)
					tier, ok := attr(s, tracing.ToolTier)
					require.True(t, ok, "%s has a tier", s.Name)
					switch name.AsString() {
					case "delegate":
						require.Equal(t, "pending", outcome.AsString())
					case "write_file":
						require.Equal(t, "allowed", outcome.AsString())
						require.NotEmpty(t, tier.AsString())
						agent, _ := attr(parent, tracing.GenAIAgentName)
						require.Equal(t, "writer", agent.AsString())
					}
				default:
					t.Fatalf("unexpected span %q", s.Name)
				}
				require.NotEqual(t, codes.Error, s.Status.Code, s.Name)
				// No message content by default: neither the prompt, the
				// file's content, the answers nor the client's baggage.
				for _, kv := range s.Attributes {
					v := kv.Value.Emit()
					for _, secret := range []string{"Greet the user", "hello from the aetherium fleet", "wrote hello.txt", "sk-secret-in-baggage"} {
						require.NotContains(t, v, secret, "%s: %s", s.Name, kv.Key)
					}
				}
			}
			requireResumeLinksTurn(t, spans)
			require.GreaterOrEqual(t, steps["supervisor"], 2, "the start and the resume")
			require.GreaterOrEqual(t, steps["writer"], 1, "the delegated turn")
			require.Equal(t, 1, count(spans, "execute_tool write_file"))
			require.Equal(t, 1, count(spans, "execute_tool reply"))
			requireTraceIDs(t, f, ids[i], root.SpanContext.TraceID().String(), traceURL)
		})
	}
}

func count(spans []tracetest.SpanStub, prefix string) int {
	n := 0
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			n++
		}
	}
	return n
}

// requireTraceIDs checks what the API shows of a run's trace: its view links
// to it by the configured template, the events its spans wrote (the submit's
// run.queued, every step's) and its audit rows carry its trace id.
func requireTraceIDs(t *testing.T, f *fleettest.Fleet, runID, traceID, traceURL string) {
	t.Helper()
	var run struct {
		TraceURL string `json:"trace_url"`
	}
	status, _ := f.Do(http.MethodGet, "/api/runs/"+runID, nil, &run)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, strings.ReplaceAll(traceURL, "{trace_id}", traceID), run.TraceURL)

	var page struct {
		Events []struct {
			Type    string `json:"type"`
			TraceID string `json:"trace_id"`
		} `json:"events"`
	}
	status, _ = f.Do(http.MethodGet, "/api/runs/"+runID+"/events?format=json&limit=500", nil, &page)
	require.Equal(t, http.StatusOK, status)
	traced := map[string]bool{}
	for _, e := range page.Events {
		if e.TraceID != "" {
			require.Equal(t, traceID, e.TraceID, e.Type)
			traced[e.Type] = true
		}
	}
	for _, typ := range []string{"run.queued", "run.started", "agent.message", "tool.call", "delegation.finished", "run.completed"} {
		require.True(t, traced[typ], "a %s event carries the run's trace id (traced: %v)", typ, traced)
	}

	var audit struct {
		Audit []struct {
			Tool    string `json:"tool"`
			TraceID string `json:"trace_id"`
		} `json:"audit"`
	}
	status, _ = f.Do(http.MethodGet, "/api/runs/"+runID+"/audit", nil, &audit)
	require.Equal(t, http.StatusOK, status)
	require.NotEmpty(t, audit.Audit)
	for _, r := range audit.Audit {
		require.Equal(t, traceID, r.TraceID, r.Tool)
	}
}

// requireResumeLinksTurn checks that the supervisor's resume links to the
// delegated turn's step whose result it reads, naming the delegation.
func requireResumeLinksTurn(t *testing.T, spans []tracetest.SpanStub) {
	t.Helper()
	turns := map[trace.SpanID]string{}
	for _, s := range spans {
		if agent, _ := attr(s, tracing.GenAIAgentName); agent.AsString() == "writer" && strings.HasPrefix(s.Name, "invoke_agent ") {
			d, _ := attr(s, tracing.DelegationID)
			turns[s.SpanContext.SpanID()] = d.AsString()
		}
	}
	linked := 0
	for _, s := range spans {
		if agent, _ := attr(s, tracing.GenAIAgentName); agent.AsString() != "supervisor" || !strings.HasPrefix(s.Name, "invoke_agent ") {
			continue
		}
		for _, l := range s.Links {
			d, ok := turns[l.SpanContext.SpanID()]
			require.True(t, ok, "a supervisor step links only to a turn's step")
			var named string
			for _, kv := range l.Attributes {
				if kv.Key == tracing.DelegationID {
					named = kv.Value.AsString()
				}
			}
			require.Equal(t, d, named, "the link names the turn's delegation")
			linked++
		}
	}
	require.Equal(t, 1, linked, "the resume links the one delegated turn")
}

// With tracing.capture_content on, a model call's span carries its messages
// and answer, masked by the audit trail's DLP redaction: a secret in the
// prompt appears masked, the rest as written. (Off, TestRunIsOneTrace checks
// that no content is on any span.)
func TestCapturedContentIsMasked(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{SpanExporter: exp},
		Configure: func(c *config.Config) { c.Tracing.CaptureContent = true }})
	const secret = "ghp_" + "R8fK2mQx7ZpL4vN9tW3yB6cH1jD5sG0aE2uX"
	id := f.Submit("demo", "Greet the user in a file; the deploy token is "+secret, map[string]any{"topic": "greetings"})
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)
	var chats []tracetest.SpanStub
	require.Eventually(t, func() bool {
		_, spans, ok := runTrace(exp.GetSpans(), id)
		chats = chats[:0]
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "chat ") {
				chats = append(chats, s)
			}
		}
		return ok && len(chats) == 7
	}, 10*time.Second, 20*time.Millisecond)
	prompted := 0
	for _, s := range chats {
		in, ok := attr(s, tracing.GenAIInputMessages)
		require.True(t, ok, "%s carries its messages", s.Name)
		_, ok = attr(s, tracing.GenAIOutputMessages)
		require.True(t, ok, "%s carries its answer", s.Name)
		for _, kv := range s.Attributes {
			require.NotContains(t, kv.Value.Emit(), secret, "%s: %s", s.Name, kv.Key)
		}
		if strings.Contains(in.AsString(), "the deploy token is") {
			prompted++
			require.Contains(t, in.AsString(), "REDACTED", "the secret is masked where it stood")
		}
	}
	require.Positive(t, prompted, "the supervisor's calls carry the prompt")
}
