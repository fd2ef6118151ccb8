package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Every documented operation answers one success through Do, so each success
// schema of the document is checked against a real answer at least once (with
// rows in the lists, not only empty ones). A route added to the table without a
// step here fails the coverage check at the end.
func TestEveryOperationAnswersAsDocumented(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}
	}})
	ctx := context.Background()
	run := f.Submit("demo", "x", map[string]any{"topic": "t"})
	approval := func(n int, kind string) string {
		view := `{"commands":["ls"]}`
		if kind == store.KindQuestion {
			view = `{"question":"Which one?","choices":["a","b"]}`
		}
		a, _, err := f.Store.RequestApproval(ctx, store.Approval{
			ID: fmt.Sprintf("apr_tour%d_%s", n, strings.ReplaceAll(run, "-", "")[:16]), RunID: run, SessionID: queue.SupervisorSession(run).String(),
			CallID: fmt.Sprint("call-", n), Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "tour", Kind: kind,
			Args: json.RawMessage(`{"command":"ls"}`), View: json.RawMessage(view),
		}, time.Hour)
		require.NoError(t, err)
		return a.ID
	}
	approveMe, denyMe, editMe, askMe := approval(1, store.KindCall), approval(2, store.KindCall), approval(3, store.KindCall), approval(4, store.KindQuestion)
	var granted store.Approval
	_, err := f.Store.InsertDelegation(ctx, store.Delegation{ID: "del-tour-" + run[:8], RunID: run, ParentSession: queue.SupervisorSession(run).String(),
		ToolCallID: "call-9", Agent: "writer", Task: "write", Tools: []string{"write_file"}})
	require.NoError(t, err)
	sessID := queue.SupervisorSession(run).String()
	_, _, err = f.Store.AcquireSession(ctx, store.Session{ID: sessID, RunID: run, Agent: "lead", Role: "supervisor",
		Messages: []llm.Message{{Role: llm.RoleSystem, Content: "lead"}, {Role: llm.RoleUser, Content: "x"}}}, "tour", time.Minute)
	require.NoError(t, err)
	result := "ok"
	require.NoError(t, f.Store.InsertAudit(ctx, []store.AuditRow{{CallKey: "k-" + run, At: time.Now(), RunID: run, Team: "demo", Agent: "lead", Role: "supervisor",
		Tool: "todo", Tier: "standard", Allowed: true, Decision: "allowed", Args: json.RawMessage(`{}`), Result: &result, Summary: "todo"}}))
	require.NoError(t, f.Store.InsertEgress(ctx, store.EgressConnection{RunID: run, Agent: "writer", Method: "CONNECT", Host: "example.com", Port: 443, Allowed: false, Reason: "not allowed"}))
	_, err = f.Leases.Acquire(ctx, "comfyui", run)
	require.NoError(t, err)
	ws := f.Workspaces.Dir(run)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "docs", "a.md"), []byte("# a\n"), 0o644))

	var memory struct {
		ID int64 `json:"id"`
	}
	var hook struct {
		ID string `json:"id"`
	}
	var schedule struct {
		ID string `json:"id"`
	}
	steps := []struct {
		method string
		path   func() string
		body   any
		code   int
		out    any
	}{
		{"GET", fixed("/healthz"), nil, 200, nil},
		{"GET", fixed("/readyz"), nil, 200, nil},
		{"GET", fixed("/metrics"), nil, 200, nil},
		{"GET", fixed("/api/openapi.json"), nil, 200, nil},
		{"POST", fixed("/api/orchestrator/run"), map[string]any{"prompt": "x", "team": inlineTeam("tour-team")}, 202, nil},
		{"POST", fixed("/api/orchestrator/run-from-template"), map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}}, 202, nil},
		{"GET", fixed("/api/runs?limit=1"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/delegations"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/costs"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/sessions"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/sessions/" + sessID + "/history?limit=1"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/audit"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/egress"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/plan"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/files"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/file?path=docs/a.md"), nil, 200, nil},
		{"GET", fixed("/api/audit?limit=5"), nil, 200, nil},
		{"GET", fixed("/api/templates/demo"), nil, 200, nil},
		{"GET", fixed("/api/approvals?status=pending"), nil, 200, nil},
		{"GET", fixed("/api/approvals/" + approveMe), nil, 200, nil},
		{"POST", fixed("/api/approvals/" + approveMe + "/approve"), map[string]any{"reason": "fine", "grant": map[string]any{"scope": "run", "match": "exact", "ttl": "30m"}}, 200, &granted},
		{"POST", fixed("/api/approvals/" + denyMe + "/deny"), nil, 200, nil},
		{"POST", fixed("/api/approvals/" + editMe + "/edit"), map[string]any{"args": map[string]any{"command": "ls -l"}}, 200, nil},
		{"POST", fixed("/api/approvals/" + askMe + "/answer"), map[string]any{"answer": "b"}, 200, nil},
		{"GET", fixed("/api/approvals?decided=true&kind=call"), nil, 200, nil},
		{"GET", fixed("/api/grants"), nil, 200, nil},
		{"POST", func() string { return "/api/grants/" + granted.GrantID + "/confirm" }, nil, 200, nil},
		{"POST", func() string { return "/api/grants/" + granted.GrantID + "/revoke" }, nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/request"), nil, 200, nil},
		{"POST", fixed("/api/runs/" + run + "/retry"), nil, 202, nil},
		{"POST", fixed("/api/runs/" + run + "/replay"), nil, 409, nil},                   // not finished yet
		{"POST", fixed("/api/runs/" + run + "/promote"), nil, 409, nil},                  // not a staging run
		{"POST", fixed("/api/runs/" + run + "/fork"), map[string]any{"at": 1}, 409, nil}, // not finished yet
		{"POST", fixed("/api/runs/" + run + "/cancel"), nil, 200, nil},
		// The run is over, so its stream replays to the terminal event and ends.
		{"GET", fixed("/api/runs/" + run + "/events"), nil, 200, nil},
		{"GET", fixed("/api/runs/" + run + "/events?last_event_id=999999999"), nil, 204, nil},
		{"GET", fixed("/api/runs/" + run + "/events?format=json&after=0&limit=2"), nil, 200, nil},
		{"GET", fixed("/api/tools/mcp-schemas?servers=workspace"), nil, 200, nil},
		{"GET", fixed("/api/tools/mcp-schemas"), nil, 200, nil},
		{"GET", fixed("/api/templates"), nil, 200, nil},
		{"GET", fixed("/api/leases?events=5"), nil, 200, nil},
		{"GET", fixed("/api/fleet"), nil, 200, nil},
		{"POST", fixed("/api/monitoring/session"), nil, 204, nil},
		{"DELETE", fixed("/api/monitoring/session"), nil, 204, nil},
		{"POST", fixed("/api/schedules"), map[string]any{"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Paris", "template": "demo",
			"prompt": "x", "variables": map[string]any{"topic": "t"}, "jitter": "1m", "overlap": "queue_one", "catch_up": "all", "catch_up_limit": 3}, 201, &schedule},
		{"GET", fixed("/api/schedules"), nil, 200, nil},
		{"GET", func() string { return "/api/schedules/" + schedule.ID + "?next=3" }, nil, 200, nil},
		{"PATCH", func() string { return "/api/schedules/" + schedule.ID }, map[string]any{"prompt": "y", "catch_up": "last"}, 200, nil},
		{"POST", func() string { return "/api/schedules/" + schedule.ID + "/pause" }, nil, 200, nil},
		{"POST", func() string { return "/api/schedules/" + schedule.ID + "/resume" }, nil, 200, nil},
		{"GET", func() string { return "/api/schedules/" + schedule.ID + "/fires?limit=5" }, nil, 200, nil},
		{"DELETE", func() string { return "/api/schedules/" + schedule.ID }, nil, 204, nil},
		{"POST", fixed("/api/projects"), map[string]any{"slug": "tour", "name": "Tour"}, 201, nil},
		{"GET", fixed("/api/projects"), nil, 200, nil},
		{"GET", fixed("/api/projects/tour"), nil, 200, nil},
		{"GET", fixed("/api/projects/tour/costs?since=2026-01-01"), nil, 200, nil},
		{"POST", fixed("/api/projects/tour/memory"), map[string]any{"content": "remember", "agent": "writer"}, 201, &memory},
		{"GET", fixed("/api/projects/tour/memory"), nil, 200, nil},
		{"DELETE", func() string { return fmt.Sprint("/api/projects/tour/memory/", memory.ID) }, nil, 204, nil},
		{"DELETE", fixed("/api/projects/tour?confirm=tour"), nil, 204, nil},
		{"POST", fixed("/api/hooks"), map[string]any{"name": "tour", "scheme": "github", "template": "demo", "prompt": "x {{.topic}}",
			"variables": map[string]string{"topic": "/issue/title"}}, 201, &hook},
		{"GET", fixed("/api/hooks"), nil, 200, nil},
		{"GET", func() string { return "/api/hooks/" + hook.ID }, nil, 200, nil},
		{"POST", func() string { return "/hooks/" + hook.ID }, map[string]any{"issue": map[string]any{"title": "unsigned"}}, 401, nil},
		{"GET", func() string { return "/api/hooks/" + hook.ID + "/deliveries" }, nil, 200, nil},
		{"POST", func() string { return "/api/hooks/" + hook.ID + "/rotate" }, nil, 200, nil},
		{"DELETE", func() string { return "/api/hooks/" + hook.ID }, nil, 204, nil},
	}
	doc := fleettest.OpenAPI(t)
	covered := map[string]bool{}
	for _, s := range steps {
		path := s.path()
		code, raw := f.Do(s.method, path, s.body, s.out) // Do checks the answer against the document
		// Readiness may say 503 while Redis is slow to answer its 2 s ping (CI's
		// load did it once); a probe asks again, and so does the tour.
		for tries := 0; path == "/readyz" && code == 503 && tries < 10; tries++ {
			time.Sleep(500 * time.Millisecond)
			code, raw = f.Do(s.method, path, s.body, s.out)
		}
		require.Equal(t, s.code, code, "%s %s: %s", s.method, path, raw)
		route, _, err := doc.Router.FindRoute(httptest.NewRequest(s.method, path, nil))
		require.NoError(t, err, "%s %s", s.method, path)
		covered[s.method+" "+route.Path] = true
	}
	for path, item := range doc.Doc.Paths.Map() {
		for method := range item.Operations() {
			require.True(t, covered[method+" "+path], "no step answers %s %s: add one", method, path)
		}
	}
}

func fixed(path string) func() string { return func() string { return path } }
