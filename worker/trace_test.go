package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
)

func spanAttr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A tool call's span says how the call ended and which gate layer refused
// it; a refusal is an outcome, only the fleet's errors set the span's status.
func TestToolCallSpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		pending        bool
		err            error
		outcome, layer string
		failed         bool
	}{
		{name: "allowed", outcome: "allowed"},
		{name: "pending", pending: true, outcome: "pending"},
		{name: "denied by the capability layer", err: &tools.Denied{Layer: "capability", Reason: "not in the catalog"}, outcome: "denied", layer: "capability"},
		{name: "denied by a rule", err: &tools.Denied{Layer: "rules", Reason: "always_deny"}, outcome: "denied", layer: "rules"},
		{name: "outcome unknown", err: tools.ErrOutcomeUnknown, outcome: "unknown", failed: true},
		{name: "error", err: errors.New("disk on fire"), outcome: "error", failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
			require.NoError(t, err)
			w := &Worker{tracing: p, router: tools.NewRouter(tools.NewRegistry())}
			_, span := w.startToolCall(context.Background(), llm.ToolCall{ID: "c1", Name: "write_file"})
			endToolCall(span, tc.pending, tc.err)
			spans := exp.GetSpans()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, "execute_tool write_file", s.Name)
			require.Equal(t, "write_file", spanAttr(s, tracing.GenAIToolName))
			require.Equal(t, "c1", spanAttr(s, tracing.GenAIToolCallID))
			require.Equal(t, tc.outcome, spanAttr(s, tracing.ToolOutcome))
			require.Equal(t, tc.layer, spanAttr(s, tracing.ToolDenyLayer))
			if tc.failed {
				require.Equal(t, codes.Error, s.Status.Code)
			} else {
				require.NotEqual(t, codes.Error, s.Status.Code)
			}
		})
	}
}

// A failed model call's span carries the error; tracing off, the spans are
// no-ops and the context is left alone.
func TestModelCallSpan(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
	require.NoError(t, err)
	w := &Worker{tracing: p}
	_, span := w.startModelCall(context.Background(), "openai", llm.ModelConfig{Model: "gpt-x", MaxTokens: 100})
	endModelCall(span, llm.Response{}, errors.New("overloaded"))
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, codes.Error, spans[0].Status.Code)
	require.Equal(t, "gpt-x", spanAttr(spans[0], tracing.GenAIRequestModel))
	require.Equal(t, "100", spanAttr(spans[0], tracing.GenAIRequestMaxTokens))

	off := &Worker{}
	ctx := context.Background()
	got, span := off.startStep(ctx, stepInput{run: store.Run{TraceContext: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	require.Equal(t, ctx, got)
	require.False(t, span.IsRecording())
	got, span = off.startModelCall(ctx, "script", llm.ModelConfig{Model: "", MaxTokens: 0})
	require.Equal(t, ctx, got)
	endModelCall(span, llm.Response{}, nil)
	got, span = off.startToolCall(ctx, llm.ToolCall{ID: "c", Name: "reply"})
	require.Equal(t, ctx, got)
	endToolCall(span, false, nil)
}

// A post-run task (run:finish-image) is a span of its run's trace: a child of
// the submit span the run stored.
func TestPostRunSpanJoinsTheRunsTrace(t *testing.T) {
	t.Parallel()
	r := postRunSetup(t)
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
	require.NoError(t, err)
	r.w.tracing = p
	ctx := context.Background()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id := uuid.NewString()
	require.NoError(t, r.st.CreateRun(ctx, store.Run{ID: id, Prompt: "draw", Team: json.RawMessage(`{}`), TraceContext: parent}))
	_, _, err = r.st.FinishRun(ctx, id, store.RunCompleted, "ok", "", "")
	require.NoError(t, err)
	require.NoError(t, r.handleFinishImage(ctx, queue.FinishImageTask(id)))
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "post_run finish_image", spans[0].Name)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", spans[0].Parent.SpanID().String())
	require.Equal(t, id, spanAttr(spans[0], tracing.RunID))
	require.Equal(t, queue.TypeFinishImage, spanAttr(spans[0], tracing.TaskType))
}

// A step links the delegated turns whose results it reads — those of the
// session's pending calls — and not the earlier ones an earlier resume read:
// a supervisor that delegated three times in a row has three resumes of one
// link each, not 1 + 2 + 3.
func TestResumeLinksOnlyItsTurns(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
	require.NoError(t, err)
	turn := func(span string) string { return "00-4bf92f3577b34da6a3ce929d0e0e4736-" + span + "-01" }
	byCall := map[string][]store.Delegation{
		"c1": {{ID: "d1", Agent: "echo", TraceContext: turn("00000000000000a1")}},
		"c2": {{ID: "d2", Agent: "echo", TraceContext: turn("00000000000000a2")}},
		"c3": {{ID: "d3a", Agent: "a", TraceContext: turn("00000000000000a3")}, {ID: "d3b", Agent: "b", TraceContext: turn("00000000000000b3")},
			{ID: "d3c", Agent: "c"}}, // not finished: no trace context yet
	}
	for _, tc := range []struct {
		name    string
		pending []llm.ToolCall
		want    []string
	}{
		{name: "no pending call", want: nil},
		{name: "the second delegate call", pending: []llm.ToolCall{{ID: "c2", Name: "delegate"}}, want: []string{"d2"}},
		{name: "a fan-out", pending: []llm.ToolCall{{ID: "c3", Name: "spawn_subagents"}}, want: []string{"d3a", "d3b"}},
		{name: "a call that delegated nothing", pending: []llm.ToolCall{{ID: "c9", Name: "todo"}}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, span := p.Start(context.Background(), "invoke_agent supervisor")
			linkDelegations(span, byCall, tc.pending)
			span.End()
			spans := exp.GetSpans()
			exp.Reset()
			require.Len(t, spans, 1)
			var got []string
			for _, l := range spans[0].Links {
				for _, kv := range l.Attributes {
					if kv.Key == tracing.DelegationID {
						got = append(got, kv.Value.AsString())
					}
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// Captured content is masked, then capped at tracing.MaxContentBytes: a
// huge context does not become a huge span, and a secret at the cut is
// masked before it (masking a cut half would miss it).
func TestCapturedContentIsCapped(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
	require.NoError(t, err)
	const secret = "SECRET-TOKEN-123456"
	w := &Worker{tracing: p, redact: func(s string) string { return strings.ReplaceAll(s, secret, "[REDACTED]") }}
	// Secrets around the cut, one straddling it: masked first, none appears,
	// not even in part.
	huge := strings.Repeat("x", tracing.MaxContentBytes-200) + strings.Repeat(secret+" ", 30) + strings.Repeat("y", 1<<20)
	_, span := p.Start(context.Background(), "chat m")
	w.captureContent(span, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: huge}}},
		llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "short answer"}}, nil)
	span.End()
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	in := spanAttr(spans[0], tracing.GenAIInputMessages)
	out := spanAttr(spans[0], tracing.GenAIOutputMessages)
	require.Less(t, len(in), tracing.MaxContentBytes+64, "the input is capped")
	require.Contains(t, in, "…[truncated: ")
	require.NotContains(t, in, "SECRET-TOKEN")
	require.Contains(t, in, "[REDACTED]")
	require.Contains(t, out, "short answer")
	require.NotContains(t, out, "truncated", "a short answer is whole")
}
