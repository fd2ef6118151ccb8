package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tracing"
)

// A run keeps the trace context it was created with (issue 42), through both
// of CreateRunOnce's inserts: the lone statement and the counted transaction.
func TestRunTraceContext(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name        string
		trace       string
		maxInFlight int
	}{
		{name: "one statement", trace: tp},
		{name: "counted transaction", trace: tp, maxInFlight: 10},
		{name: "tracing off", trace: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.NewString()
			admitted, _, err := e.st.CreateRunOnce(e.ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "trace-" + tc.name,
				TraceContext: tc.trace}, tc.maxInFlight, nil)
			require.NoError(t, err)
			require.True(t, admitted)
			r, err := e.st.GetRun(e.ctx, id)
			require.NoError(t, err)
			require.Equal(t, tc.trace, r.TraceContext)
		})
	}
}

// Run events and audit rows record the trace of the span that wrote them
// (issue 42), whichever statement writes them, and nothing without a span
// (tracing off); an audit row's own trace id wins over the writer's.
func TestEventsAndAuditRecordTraceID(t *testing.T) {
	t.Parallel()
	e := setupAdmission(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanCtx := tracing.Remote(e.ctx, "00-"+traceID+"-00f067aa0ba902b7-01")
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		own   string // the audit row's own trace id
		want  string
		wantA string
	}{
		{name: "tracing off", ctx: e.ctx},
		{name: "in a span", ctx: spanCtx, want: traceID, wantA: traceID},
		{name: "audit row's own trace", ctx: e.ctx, own: "0af7651916cd43dd8448eb211c80319c", wantA: "0af7651916cd43dd8448eb211c80319c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.NewString()
			_, _, err := e.st.CreateRunOnce(e.ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Owner: "trace-events"}, 0, nil)
			require.NoError(t, err)
			_, inserted, err := e.st.AppendEvent(tc.ctx, id, "one", "run.progress", "", map[string]any{"n": 1})
			require.NoError(t, err)
			require.True(t, inserted)
			_, err = e.st.AppendEvents(tc.ctx, id, []store.NewEvent{{Key: "two", Type: "run.progress", Data: map[string]any{"n": 2}}})
			require.NoError(t, err)
			evs, err := e.st.EventsAfter(e.ctx, id, 0, 10)
			require.NoError(t, err)
			require.Len(t, evs, 2)
			for _, ev := range evs {
				require.Equal(t, tc.want, ev.TraceID, ev.Type)
				got, err := e.st.GetEvent(e.ctx, ev.ID)
				require.NoError(t, err)
				require.Equal(t, tc.want, got.TraceID)
			}
			require.NoError(t, e.st.InsertAudit(tc.ctx, []store.AuditRow{{CallKey: id + ":c1", At: time.Now(), RunID: id, Tool: "read_file",
				Decision: "allowed", Allowed: true, TraceID: tc.own}}))
			rows, err := e.st.RunAudit(e.ctx, id, 10)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, tc.wantA, rows[0].TraceID)
		})
	}
}
