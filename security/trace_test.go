package security_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tracing"
)

// A held call's wait is traced (issue 42): the asking call's span gets an
// "approval requested" event when it parks; when the call resumes with the
// decision, an "approval wait" span from the request to the decision is a
// child of the resumed call's span, linked to the asking one; the audit row
// carries the trace id. Off, the same calls record nothing.
func TestApprovalWaitIsTraced(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	for _, tc := range []struct {
		name string
		on   bool
	}{{name: "on", on: true}, {name: "off"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exp := tracetest.NewInMemoryExporter()
			p := tracing.Noop()
			if tc.on {
				var err error
				p, err = tracing.New(context.Background(), tracing.Config{}, tracing.WithSpanExporter(exp))
				require.NoError(t, err)
			}
			s := e.session(t)
			call := tools.Call{ID: "c1", Name: "download_pdf", Args: json.RawMessage(`{"url":"http://127.0.0.1:9/report.pdf"}`), Session: s}

			askCtx, ask := p.Start(context.Background(), "execute_tool download_pdf")
			res, err := e.router.Dispatch(askCtx, call)
			ask.End()
			require.NoError(t, err)
			require.True(t, res.Pending)
			decided, err := e.approvals.Decide(context.Background(), security.ApprovalID(s.SessionID, "c1"), true, "alice", "")
			require.NoError(t, err)

			resumeCtx, resume := p.Start(context.Background(), "execute_tool download_pdf")
			res, err = e.router.Dispatch(resumeCtx, call)
			resume.End()
			require.NoError(t, err)
			require.False(t, res.Pending)
			require.NotNil(t, res.Audit)

			spans := exp.GetSpans()
			if !tc.on {
				require.Empty(t, spans)
				require.Empty(t, res.Audit.TraceID)
				return
			}
			require.Equal(t, tracing.TraceID(resumeCtx), res.Audit.TraceID)
			var asked, wait, resumed tracetest.SpanStub
			for _, sp := range spans {
				switch {
				case sp.Name == tracing.SpanApprovalWait:
					wait = sp
				case sp.SpanContext.SpanID() == ask.SpanContext().SpanID():
					asked = sp
				case sp.SpanContext.SpanID() == resume.SpanContext().SpanID():
					resumed = sp
				}
			}
			require.Len(t, asked.Events, 1)
			require.Equal(t, tracing.EventApprovalRequested, asked.Events[0].Name)
			require.Empty(t, resumed.Events, "the resumed call does not park")

			require.Equal(t, tracing.SpanApprovalWait, wait.Name, "the wait is a span")
			require.Equal(t, resumed.SpanContext.SpanID(), wait.Parent.SpanID(), "a child of the resumed call")
			require.Len(t, wait.Links, 1)
			require.Equal(t, asked.SpanContext.SpanID(), wait.Links[0].SpanContext.SpanID(), "linked to the call that asked")
			require.Equal(t, decided.DecidedAt.UnixMicro(), wait.EndTime.UnixMicro(), "ends at the decision")
			appr, err := e.st.GetApproval(context.Background(), decided.ID)
			require.NoError(t, err)
			require.Equal(t, appr.CreatedAt.UnixMicro(), wait.StartTime.UnixMicro(), "starts at the request")
			status, ok := attrOf(wait, tracing.ApprovalStatus)
			require.True(t, ok)
			require.Equal(t, store.ApprovalApproved, status)
		})
	}
}

func attrOf(s tracetest.SpanStub, key attribute.Key) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}
