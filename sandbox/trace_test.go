package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/tracing"
)

// Each command is a "sandbox exec" span, a child of the tool call's span on
// its context, with how it ended and never the command line (issue 42). The
// trace context and any baggage on the context never reach the command's
// environment. Off (no span on the context), nothing is recorded.
func TestExecIsTraced(t *testing.T) {
	t.Parallel()
	local, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		on      bool
		command string
		exit    int64
	}{
		{name: "on", on: true, command: "env; echo SECRET-CMD-ARG >/dev/null", exit: 0},
		{name: "failing command", on: true, command: "env; exit 3", exit: 3},
		{name: "off", command: "env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			p := tracing.Noop()
			if tc.on {
				p, err = tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
				require.NoError(t, err)
			}
			m, err := baggage.NewMember("api_key", "sk-baggage-secret")
			require.NoError(t, err)
			b, err := baggage.New(m)
			require.NoError(t, err)
			ctx, call := p.Start(baggage.ContextWithBaggage(context.Background(), b), "execute_tool run_shell")
			res, err := local.Exec(ctx, sandbox.Request{Project: "run-1", Workspace: t.TempDir(), Command: tc.command})
			call.End()
			require.NoError(t, err)
			require.NotContains(t, res.Output, "sk-baggage-secret", "baggage never reaches the sandbox")
			require.NotContains(t, strings.ToLower(res.Output), "traceparent", "nor the trace context")

			spans := exp.GetSpans()
			if !tc.on {
				require.Empty(t, spans)
				return
			}
			require.Len(t, spans, 2)
			exec := spans[0]
			require.Equal(t, tracing.SpanSandboxExec, exec.Name)
			require.Equal(t, call.SpanContext().SpanID(), exec.Parent.SpanID(), "a child of the tool call")
			got := map[attribute.Key]attribute.Value{}
			for _, kv := range exec.Attributes {
				got[kv.Key] = kv.Value
				require.NotContains(t, kv.Value.Emit(), "SECRET-CMD-ARG", "the command line is never recorded")
			}
			require.Equal(t, "local", got[tracing.SandboxExecutor].AsString())
			require.Equal(t, "run-1", got[tracing.RunID].AsString())
			require.Equal(t, tc.exit, got[tracing.SandboxExitCode].AsInt64())
			require.Positive(t, got[tracing.SandboxOutputBytes].AsInt64())
		})
	}
}
