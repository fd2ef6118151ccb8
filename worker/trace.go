package worker

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
)

// The worker's spans (issue 42). Every step — a supervisor step, a delegated
// turn, a resume — is a child of its run's submit span, read from the run's
// stored trace context, whichever worker process takes the task; its model
// calls and tool calls are children of the step. Message contents are never
// recorded. Off (nil tracing), each start is a nil check.

// startStep starts the span of one step of a session.
func (w *Worker) startStep(ctx context.Context, in stepInput) (context.Context, trace.Span) {
	if !w.tracing.Enabled() {
		return w.tracing.Start(ctx, "")
	}
	attrs := []attribute.KeyValue{
		tracing.GenAIOperationName.String(tracing.OpInvokeAgent), tracing.GenAIAgentName.String(in.node.Name),
		tracing.Role.String(in.role), tracing.RunID.String(in.run.ID),
	}
	if in.delegation != nil {
		attrs = append(attrs, tracing.DelegationID.String(in.delegation.ID))
	}
	return w.tracing.StartRemote(ctx, in.run.TraceContext, tracing.OpInvokeAgent+" "+in.node.Name,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// startModelCall starts the span of one model call, with the GenAI semantic
// conventions' request attributes.
func (w *Worker) startModelCall(ctx context.Context, provider string, model llm.ModelConfig) (context.Context, trace.Span) {
	if !w.tracing.Enabled() {
		return w.tracing.Start(ctx, "")
	}
	attrs := []attribute.KeyValue{
		tracing.GenAIOperationName.String(tracing.OpChat),
		tracing.GenAIProviderName.String(provider), tracing.GenAISystem.String(provider),
		tracing.GenAIRequestModel.String(model.Model),
	}
	if model.MaxTokens > 0 {
		attrs = append(attrs, tracing.GenAIRequestMaxTokens.Int(model.MaxTokens))
	}
	return w.tracing.Start(ctx, tracing.OpChat+" "+model.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endModelCall ends a model call's span with its usage and finish reason.
func endModelCall(span trace.Span, resp llm.Response, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		tracing.Fail(span, err)
		return
	}
	reason := "stop"
	if len(resp.Message.ToolCalls) > 0 {
		reason = "tool_calls"
	}
	span.SetAttributes(
		tracing.GenAIInputTokens.Int64(int64(resp.Usage.InputTokens)), tracing.GenAIOutputTokens.Int64(int64(resp.Usage.OutputTokens)),
		tracing.GenAIFinishReasons.StringSlice([]string{reason}),
	)
	if resp.Model != "" {
		span.SetAttributes(tracing.GenAIResponseModel.String(resp.Model))
	}
	if resp.Provider != "" {
		span.SetAttributes(tracing.GenAIProviderName.String(resp.Provider))
	}
}

// startToolCall starts the span of one tool call.
func (w *Worker) startToolCall(ctx context.Context, call llm.ToolCall) (context.Context, trace.Span) {
	if !w.tracing.Enabled() {
		return w.tracing.Start(ctx, "")
	}
	attrs := []attribute.KeyValue{
		tracing.GenAIOperationName.String(tracing.OpExecuteTool),
		tracing.GenAIToolName.String(call.Name), tracing.GenAIToolCallID.String(call.ID),
	}
	if spec, ok := w.router.Registry().Spec(call.Name); ok {
		attrs = append(attrs, tracing.ToolTier.String(spec.Tier.String()))
	}
	return w.tracing.Start(ctx, tracing.OpExecuteTool+" "+call.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endToolCall ends a tool call's span with its outcome (allowed, denied,
// error, unknown, or pending while it waits) and the gate layer that refused
// it. A refusal is an outcome, not an error of the fleet's: only errors and
// infrastructure failures set the span's status.
func endToolCall(span trace.Span, pending bool, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if pending {
		span.SetAttributes(tracing.ToolOutcome.String("pending"))
		return
	}
	outcome, layer := tools.Classify(err)
	span.SetAttributes(tracing.ToolOutcome.String(string(outcome)))
	if layer != "" {
		span.SetAttributes(tracing.ToolDenyLayer.String(layer))
	}
	var d *tools.Denied
	if err != nil && !errors.As(err, &d) {
		tracing.Fail(span, err)
	}
}

// linkDelegations links a step's span to the spans of the delegated turns
// whose results it reads (issue 42): those of the session's pending calls,
// finished — a supervisor's resume reads them, and they ran as other steps,
// maybe in other processes. Each link names its delegation. The session's
// earlier delegations, whose results an earlier step read (and saved), are
// not linked again: a session that delegates n times has n resumes, each
// linking its own turns, not 1 + 2 + … + n links. A resume delivered again
// (its first attempt failed or its process died before the save) links the
// same turns from its new span: each attempt read them.
func linkDelegations(span trace.Span, byCall map[string][]store.Delegation, pending []llm.ToolCall) {
	if !span.IsRecording() {
		return
	}
	for _, call := range pending {
		for _, d := range byCall[call.ID] {
			if l, ok := tracing.Link(d.TraceContext, tracing.DelegationID.String(d.ID), tracing.GenAIAgentName.String(d.Agent)); ok {
				span.AddLink(l)
			}
		}
	}
}

// captureContent puts a model call's messages and answer on its span, masked
// (tracing.capture_content: Deps.RedactContent set), then capped at
// tracing.MaxContentBytes each. Off, nothing: message
// contents are never recorded unmasked.
func (w *Worker) captureContent(span trace.Span, req llm.Request, resp llm.Response, err error) {
	if w.redact == nil || !span.IsRecording() {
		return
	}
	if in, merr := json.Marshal(req.Messages); merr == nil {
		span.SetAttributes(tracing.GenAIInputMessages.String(tracing.CapContent(w.redact(string(in)))))
	}
	if err != nil {
		return
	}
	if out, merr := json.Marshal([]llm.Message{resp.Message}); merr == nil {
		span.SetAttributes(tracing.GenAIOutputMessages.String(tracing.CapContent(w.redact(string(out)))))
	}
}
