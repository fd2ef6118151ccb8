package fleettest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// Every event a real run stores is of a declared type and its data matches
// that type's schema in the OpenAPI document (StreamEvent, a union on type):
// a run that delegates, reports progress, notifies, is refused a tool, waits
// for an approval that a person grants, and replies. The events are read
// three ways: from the store (all of them, checked here against the union
// schema), over the stream and as the JSON list (both through the checking
// client, which validates every event it reads).
func TestStoredEventsMatchTheirDeclaredSchemas(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF}})
	run := f.SubmitTeam(map[string]any{
		"name": "every-event", "model": map[string]any{"provider": "script"},
		"allowed_domains": []string{"127.0.0.1"},
		"supervisor":      map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration", "comms"}},
		"workers":         []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"research", "comms"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "notify_user", "args": map[string]any{"message": "starting", "level": "info"}}}},
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "fetch the paper"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "the paper is in"}}}},
			},
			"writer": []map[string]any{
				{"calls": []map[string]any{{"tool": "report_progress", "args": map[string]any{"percent": 10, "message": "looking"}}}},
				// Not in the writer's catalog: refused by the capability layer.
				{"calls": []map[string]any{{"tool": "run_shell", "args": map[string]any{"command": "ls"}}}},
				{"calls": []map[string]any{{"tool": "download_pdf", "args": map[string]any{"url": "http://127.0.0.1:1/paper.pdf"}}}},
				{"say": "downloaded"},
			},
		}},
	}, "fetch the paper")
	var apr string
	require.Eventually(t, func() bool {
		var out struct {
			Approvals []struct {
				ID string `json:"id"`
			} `json:"approvals"`
		}
		code, raw := f.Do("GET", "/api/approvals?status=pending&run_id="+run, nil, &out)
		require.Equal(t, http.StatusOK, code, string(raw))
		if len(out.Approvals) > 0 {
			apr = out.Approvals[0].ID
		}
		return apr != ""
	}, 60*time.Second, 30*time.Millisecond, "no pending approval appeared")
	code, raw := f.Do("POST", "/api/approvals/"+apr+"/approve", map[string]any{"reason": "fine"}, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Equal(t, "completed", f.WaitTerminal(run, 60*time.Second).Status)

	streamed := f.Follow(run, 0, 30*time.Second) // checked event by event
	var page struct {
		Events []json.RawMessage `json:"events"`
	}
	code, raw = f.Do("GET", "/api/runs/"+run+"/events?format=json&limit=5000", nil, &page) // checked as a whole
	require.Equal(t, http.StatusOK, code, string(raw))
	require.Len(t, page.Events, len(streamed))

	union := fleettest.OpenAPI(t).Doc.Components.Schemas["StreamEvent"]
	require.NotNil(t, union, "the document has no StreamEvent")
	require.NotNil(t, union.Value.Discriminator, "StreamEvent is not discriminated")
	stored, err := f.Store.EventsAfter(context.Background(), run, 0, 10000)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range stored {
		require.NoError(t, events.CheckType(e.Type), "stored event %d", e.ID)
		doc := map[string]any{"id": e.ID, "run_id": e.RunID, "type": e.Type, "agent": e.Agent, "time": e.CreatedAt.Format(time.RFC3339Nano)}
		var data any
		require.NoError(t, json.Unmarshal(e.Data, &data))
		doc["data"] = data
		var v any
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &v))
		require.NoError(t, union.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()),
			"stored %s event %s does not match its schema", e.Type, e.Data)
		seen[e.Type] = true
	}
	for _, want := range []string{events.RunQueued, events.RunStarted, events.ModelAnswered, events.ToolCall, events.Notification,
		events.Delegated, events.TurnStarted, events.Progress, events.ApprovalRequested, events.ApprovalDecided,
		events.DelegationFinished, events.RunCompleted} {
		require.True(t, seen[want], "the run stored no %s event (it stored %v)", want, seen)
	}

	// What the union refuses: a stored event whose data lost a field of its type.
	var bad map[string]any
	b, err := json.Marshal(map[string]any{"id": 1, "run_id": run, "type": events.ToolCall, "agent": "w", "time": time.Now().Format(time.RFC3339Nano),
		"data": events.ProgressData{Percent: 1, Message: "x"}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &bad))
	require.Error(t, union.Value.VisitJSON(bad, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()))
}
