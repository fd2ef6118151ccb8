package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
)

// listedEvent is an event of GET /api/runs/:id/events?format=json.
type listedEvent struct {
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	Agent string          `json:"agent"`
	Data  json.RawMessage `json:"data"`
}

type listedPage struct {
	Events    []listedEvent `json:"events"`
	NextAfter int64         `json:"next_after"`
	Terminal  bool          `json:"terminal"`
}

// A finished run's events as a JSON list, page by page, are the events its
// stream sends, and every page (each event's data included, by its type's
// schema) matches the OpenAPI document (f.Do checks it); terminal turns true
// with the page that reaches the terminal event.
func TestEventListPagesTheStoredEvents(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{})
	run := f.SubmitTeam(map[string]any{
		"name": "lister", "model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "prompt": "plan and reply", "mcp_servers": []string{"orchestration", "planning", "comms"}},
		"script": map[string]any{"agents": map[string]any{"boss": []map[string]any{
			{"calls": []map[string]any{{"tool": "report_progress", "args": map[string]any{"percent": 50, "message": "half"}}}},
			{"calls": []map[string]any{{"tool": "notify_user", "args": map[string]any{"message": "nearly", "level": "info"}}}},
			{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "done"}}}},
		}}},
	}, "list me")
	require.Equal(t, "completed", f.WaitTerminal(run, 60*time.Second).Status)
	streamed := f.Follow(run, 0, 30*time.Second)

	var listed []listedEvent
	after, pages := int64(0), 0
	for {
		var page listedPage
		code, raw := f.Do("GET", fmt.Sprintf("/api/runs/%s/events?format=json&after=%d&limit=2", run, after), nil, &page)
		require.Equal(t, 200, code, string(raw))
		pages++
		listed = append(listed, page.Events...)
		reached := false
		for _, e := range page.Events {
			require.Greater(t, e.ID, after, "oldest first, after after=")
			reached = reached || e.Type == "run.completed"
		}
		if len(page.Events) > 0 {
			require.Equal(t, page.Events[len(page.Events)-1].ID, page.NextAfter)
		} else {
			require.Equal(t, after, page.NextAfter, "an empty page keeps after=")
		}
		if reached {
			require.True(t, page.Terminal, "the page with the terminal event says so")
		}
		if !page.Terminal {
			require.False(t, reached)
		}
		after = page.NextAfter
		if len(page.Events) < 2 {
			require.True(t, page.Terminal, "the last page of a finished run is past its terminal event")
			break
		}
	}
	require.Greater(t, pages, 2, "limit=2 pages the run's events")
	require.Len(t, listed, len(streamed))
	types := map[string]bool{}
	for i, e := range streamed {
		require.Equal(t, e.ID, listed[i].ID)
		require.Equal(t, e.Type, listed[i].Type)
		require.Equal(t, e.Agent, listed[i].Agent)
		require.JSONEq(t, string(e.Data), string(listed[i].Data))
		types[e.Type] = true
	}
	for _, want := range []string{"run.queued", "run.started", "agent.message", "tool.call", "progress", "notification", "run.completed"} {
		require.True(t, types[want], "the run recorded no %s event: %v", want, types)
	}

	// The default page holds them all; a page past the end is empty, still terminal.
	var all listedPage
	code, _ := f.Do("GET", "/api/runs/"+run+"/events?format=json", nil, &all)
	require.Equal(t, 200, code)
	require.Len(t, all.Events, len(streamed))
	require.True(t, all.Terminal)
	var past listedPage
	code, _ = f.Do("GET", fmt.Sprintf("/api/runs/%s/events?format=json&after=%d", run, all.NextAfter), nil, &past)
	require.Equal(t, 200, code)
	require.Empty(t, past.Events)
	require.Equal(t, all.NextAfter, past.NextAfter)
	require.True(t, past.Terminal)
}

func TestEventListRefusesBadPaging(t *testing.T) {
	t.Parallel()
	f := setup(t)
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	cases := []struct {
		name, query, field string
		code               int
	}{
		{"a queued run's first events", "?format=json", "", 200},
		{"the largest page", "?format=json&limit=5000", "", 200},
		{"a page too large", "?format=json&limit=5001", "limit", 400},
		{"an empty page size", "?format=json&limit=0", "limit", 400},
		{"a negative after", "?format=json&after=-1", "after", 400},
		{"an after that is no id", "?format=json&after=x", "after", 400},
		{"a format other than json", "?format=xml", "format", 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out struct {
				listedPage
				Field string `json:"field"`
			}
			code, raw := f.Do("GET", "/api/runs/"+run+"/events"+tc.query, nil, &out)
			require.Equal(t, tc.code, code, string(raw))
			require.Equal(t, tc.field, out.Field)
			if code == 200 {
				require.NotEmpty(t, out.Events, "run.queued is stored")
				require.Equal(t, "run.queued", out.Events[0].Type)
				require.False(t, out.Terminal)
			}
		})
	}
}

// Before its supervisor made a plan, a run's plan is null (as documented),
// then the plan.
func TestPlanIsNullBeforeTheSupervisorMadeOne(t *testing.T) {
	t.Parallel()
	f := setup(t)
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	code, raw := f.Do("GET", "/api/runs/"+run+"/plan", nil, nil)
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"plan":null}`, string(raw))
	_, err := f.Store.CreatePlan(t.Context(), run, "greet", []string{"say hello"})
	require.NoError(t, err)
	var got struct {
		Plan *struct {
			Goal  string            `json:"goal"`
			Steps []json.RawMessage `json:"steps"`
		} `json:"plan"`
	}
	code, raw = f.Do("GET", "/api/runs/"+run+"/plan", nil, &got)
	require.Equal(t, 200, code, string(raw))
	require.NotNil(t, got.Plan)
	require.Equal(t, "greet", got.Plan.Goal)
	require.Len(t, got.Plan.Steps, 1)
}
