package store_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/store"
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
