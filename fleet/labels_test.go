package fleet_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// Label values that come from a submitted team or from the model are bounded: a huge
// model name is refused at submission, an unknown one is counted as "other", and a
// hallucinated tool as "unknown".
func TestUserValuesDoNotBecomeLabelValues(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})

	huge := team([]map[string]any{{"say": "x"}}, map[string]any{"model": map[string]any{"provider": "script", "model": strings.Repeat("m", 2000)}})
	var out struct{ Error string }
	code, raw := f.Do("POST", "/api/orchestrator/run", map[string]any{"team": huge, "prompt": "x"}, &out)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
	require.Contains(t, out.Error, "model.model")

	custom := team([]map[string]any{call("teleport_to_mars_4711", map[string]any{}), {"say": "x"}},
		map[string]any{"model": map[string]any{"provider": "script", "model": "someones-private-model-4711"}})
	id := f.SubmitTeam(custom, "x")
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)

	rec := httptest.NewRecorder()
	f.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	require.NotContains(t, body, "someones-private-model-4711")
	require.NotContains(t, body, "teleport_to_mars_4711")
	require.Contains(t, body, `model="other"`)
	require.Contains(t, body, `tool="unknown"`)
}

// A delegation's hops are timed: enqueue → handler start per queue and task type
// (aetherium_task_queue_wait_seconds), handler start → first model call per role
// (aetherium_step_first_model_call_seconds).
func TestHopTimingsAreObserved(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	id := f.SubmitTeam(team([]map[string]any{{"say": "written"}}, nil), "x")
	require.Equal(t, "completed", f.WaitTerminal(id, 60*time.Second).Status)

	rec := httptest.NewRecorder()
	f.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`aetherium_task_queue_wait_seconds_count{queue="supervisor",type="run:supervise"}`,
		`aetherium_task_queue_wait_seconds_count{queue="workers",type="agent:turn"}`,
		`aetherium_step_first_model_call_seconds_count{role="supervisor"}`,
		`aetherium_step_first_model_call_seconds_count{role="worker"}`,
	} {
		require.Contains(t, body, want)
	}
}
