package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// --follow says where a run stands in its key's line, and when it is admitted.
func TestDescribeAdmissionEvents(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.Local)
	for _, c := range []struct {
		typ, data, want string
	}{
		{"run.queued", `{"team":"demo","priority":3}`, "priority 3"},
		{"run.queued", `{"team":"demo","priority":5,"position":2,"run_limit":4}`, "priority 5, waiting for its key's run limit (4): position 2"},
		{"run.admitted", `{"priority":3}`, "a run of its key ended: admitted"},
	} {
		got := describe(sseEvent{Type: c.typ, Data: json.RawMessage(c.data), Time: at})
		require.Contains(t, got, c.typ, c.data)
		require.Contains(t, got, c.want, c.data)
	}
}
