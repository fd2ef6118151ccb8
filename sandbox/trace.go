package sandbox

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/aetherium-engine/aetherium/tracing"
)

// startExec starts the span of one command (issue 42), a child of the tool
// call's span on ctx; off, a no-op. The command line is never an attribute: it
// is the model's arguments, which may hold secrets.
func startExec(ctx context.Context, kind string, req Request) (context.Context, trace.Span) {
	ctx, span := tracing.StartChild(ctx, tracing.SpanSandboxExec, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(tracing.SandboxExecutor.String(kind), tracing.RunID.String(req.Project), tracing.SandboxNetwork.Bool(req.Network))
	}
	return ctx, span
}

// endExec ends a command's span with how it ended. A command's own failure
// (its exit code, its timeout) is its result, not the sandbox's error.
func endExec(span trace.Span, res Result, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		tracing.Fail(span, err)
		return
	}
	span.SetAttributes(tracing.SandboxExitCode.Int(res.ExitCode), tracing.SandboxTimedOut.Bool(res.TimedOut),
		tracing.SandboxOutputBytes.Int64(res.OutputBytes))
}
