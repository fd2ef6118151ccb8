package fleet_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/tracing"
)

// One run's trace as a real receiver holds it (issue 42): the API in this
// process, the steps in two worker processes, each exporting over OTLP/HTTP
// to Jaeger. The run delegates two levels deep (the supervisor to a writer,
// the writer to a subagent); worker A is killed with -9 in the middle of the
// writer's turn and worker B takes the turn over. Read back from Jaeger's
// query API: one trace, rooted at the API's submit span; every step a child of
// it, from both processes; every model call and tool call a child of a step of
// the trace (but for the calls of the step the kill cut off, whose own span
// never ended: their parent is lost with worker A, and only worker A's spans
// may lack one); the writer's turn, redelivered, is a step of the same trace
// in worker B; GenAI attributes on every model call; no message content. Then
// the demo template on two worker processes: one trace, checked the same way.
func TestTracesInJaeger(t *testing.T) {
	t.Parallel()
	j := testinfra.RequireJaeger(t)
	cfg := fleettest.Config(t)
	cfg.Tracing.Enabled = true
	cfg.Tracing.Exporter = "otlp-http"
	cfg.Tracing.Endpoint = j.OTLP
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	cfg.Tracing.ServiceName = "aetherium-api-" + suffix
	f := fleettest.StartWith(t, cfg, fleettest.Options{NoWorker: true})

	dir := t.TempDir()
	bin, err := harness.Build(t.Context(), fleettest.RepoPath(t, "."), dir)
	require.NoError(t, err)
	workerCfg := filepath.Join(dir, "aetherium.yaml")
	require.NoError(t, harness.FleetConfig{RedisURL: cfg.RedisURL, DatabaseURL: cfg.DatabaseURL, Workspaces: cfg.Workspaces,
		Templates: cfg.Templates, Permissions: cfg.Security.PermissionsFile, TaskCheckInterval: 20 * time.Millisecond,
		StepLease: 3 * time.Second, ScriptLatency: 400 * time.Millisecond,
		Sections: map[string]map[string]any{"tracing": {"enabled": true, "exporter": "otlp-http", "endpoint": j.OTLP}},
	}.Write(workerCfg))
	start := func(name string) *harness.Proc {
		// Spans leave within 100 ms of ending: a kill -9 loses only the open ones.
		p, err := harness.StartWorker(bin, workerCfg, filepath.Join(dir, name+".log"),
			"OTEL_SERVICE_NAME=aetherium-"+name+"-"+suffix, "OTEL_BSP_SCHEDULE_DELAY=100")
		require.NoError(t, err, "start %s", name)
		t.Cleanup(p.Kill)
		return p
	}

	const content = "the launch code word is PELICAN"
	tm := team([]map[string]any{
		call("spawn_subagents", map[string]any{"tasks": []map[string]any{{"task": "read the brief", "tools": []string{"read_file"}}}}),
		call("write_file", map[string]any{"path": "brief.md", "content": content}),
		call("read_file", map[string]any{"path": "brief.md"}),
		call("read_file", map[string]any{"path": "brief.md"}),
		call("read_file", map[string]any{"path": "brief.md"}),
		{"say": "written"},
	}, nil)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"workspace", "orchestration"}}}
	tm["script"].(map[string]any)["agents"].(map[string]any)["writer-sub-1"] = []map[string]any{{"say": "the brief is short"}}

	a := start("worker-a")
	id := f.SubmitTeam(tm, "Write the brief")
	// Kill A in the middle of the writer's second step: the subagent has
	// answered, the writer has written brief.md, and three model turns of its
	// step are still to come.
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(cfg.Workspaces, id, "brief.md"))
		return err == nil
	}, 90*time.Second, 10*time.Millisecond, "the writer's step wrote brief.md on worker A")
	a.Kill()
	start("worker-b")
	run := f.WaitTerminal(id, 4*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	svc := func(name string) string { return "aetherium-" + name + "-" + suffix }
	tr, steps, orphans := requireJaegerTrace(t, f, j, id, []string{svc("api"), svc("worker-a"), svc("worker-b")}, svc("worker-a"),
		content, "Write the brief", "the brief is short")
	require.True(t, steps["boss"][svc("worker-a")], "the supervisor's first step ran on worker A: %v", steps)
	require.True(t, steps["writer-sub-1"] != nil, "the subagent's step (the second level) is in the trace: %v", steps)
	require.True(t, steps["writer"][svc("worker-a")] && steps["writer"][svc("worker-b")],
		"the writer's turn ran on A, was cut off, and its redelivery on B joined the same trace: %v", steps["writer"])
	t.Logf("two-level run: trace %s, %d spans; %d span(s) of the killed step without their parent", tr.TraceID, len(tr.Spans), orphans)

	// The demo template on the two workers left (B and a new one): one trace,
	// its supervisor's start and resume and the writer's turn among its steps.
	start("worker-c")
	demo := submitTraced(t, f, "")
	run = f.WaitTerminal(demo, 2*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)
	tr, steps, orphans = requireJaegerTrace(t, f, j, demo, []string{svc("api")}, "", "Greet the user", "hello from the aetherium fleet", "sk-secret-in-baggage")
	require.Zero(t, orphans)
	require.NotEmpty(t, steps["supervisor"], "the supervisor's steps: %v", steps)
	require.NotEmpty(t, steps["writer"], "the writer's turn: %v", steps)
	t.Logf("demo run: trace %s, %d spans, steps by agent and process %v", tr.TraceID, len(tr.Spans), steps)
}

// requireJaegerTrace reads run id's trace from Jaeger once it holds spans of
// every one of services and the run's last call (its supervisor's reply), and
// checks it: rooted at the API's submit span; every step (invoke_agent) a
// child of the root; every model and tool call a child of a step of its own
// process — but for the spans of killed, whose step a kill -9 cut short (never
// ended, never exported): those are counted as orphans; GenAI attributes on
// every model call; none of secrets in any tag. steps maps each agent to the
// services that ran a step of it.
func requireJaegerTrace(t *testing.T, f *fleettest.Fleet, j testinfra.Jaeger, id string, services []string, killed string, secrets ...string) (tr testinfra.JaegerTrace, steps map[string]map[string]bool, orphans int) {
	t.Helper()
	var page struct {
		Events []struct {
			TraceID string `json:"trace_id"`
		} `json:"events"`
	}
	code, _ := f.Do(http.MethodGet, "/api/runs/"+id+"/events?format=json&limit=500", nil, &page)
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, page.Events)
	traceID := page.Events[0].TraceID
	require.Len(t, traceID, 32, "the run's events carry its trace id")
	// Every process's spans arrive (the API's with its batch, up to 5 s).
	require.Eventually(t, func() bool {
		got, found, err := j.Trace(t.Context(), traceID)
		if err != nil || !found {
			return false
		}
		tr = got
		seen := map[string]bool{}
		for _, s := range tr.Spans {
			seen[tr.Service(s)] = true
		}
		for _, name := range services {
			if !seen[name] {
				return false
			}
		}
		return finished(tr) && parented(tr, killed)
	}, 60*time.Second, 250*time.Millisecond, "spans of %v reach Jaeger, every call's step with them", services)

	spans := map[string]testinfra.JaegerSpan{}
	var root testinfra.JaegerSpan
	for _, s := range tr.Spans {
		require.Equal(t, traceID, s.TraceID)
		spans[s.SpanID] = s
		if s.OperationName == "submit run" {
			root = s
		}
	}
	require.NotEmpty(t, root.SpanID, "the API's submit span is in the trace")
	require.Empty(t, root.Parent(), "it is the root")
	require.Equal(t, services[0], tr.Service(root))

	steps = map[string]map[string]bool{}
	for _, s := range tr.Spans {
		if s.SpanID == root.SpanID {
			continue
		}
		op, _ := s.Tag(string(tracing.GenAIOperationName))
		parent, hasParent := spans[s.Parent()]
		switch op {
		case tracing.OpInvokeAgent:
			require.Equal(t, root.SpanID, s.Parent(), "%s: a step is a child of the submit span", s.OperationName)
			agent, _ := s.Tag(string(tracing.GenAIAgentName))
			if steps[agent] == nil {
				steps[agent] = map[string]bool{}
			}
			steps[agent][tr.Service(s)] = true
		case tracing.OpChat, tracing.OpExecuteTool:
			if !hasParent {
				require.Equal(t, killed, tr.Service(s), "%s: only the killed worker's spans may lack their parent", s.OperationName)
				orphans++
				continue
			}
			require.True(t, strings.HasPrefix(parent.OperationName, "invoke_agent "), "%s: a child of a step, not of %s", s.OperationName, parent.OperationName)
			require.Equal(t, tr.Service(parent), tr.Service(s), "%s: a call's span comes from its step's process", s.OperationName)
			if op == tracing.OpChat {
				for _, k := range []string{string(tracing.GenAISystem), string(tracing.GenAIRequestModel), string(tracing.GenAIInputTokens),
					string(tracing.GenAIOutputTokens), string(tracing.GenAIFinishReasons)} {
					_, ok := s.Tag(k)
					require.True(t, ok, "%s has %s", s.OperationName, k)
				}
			}
		default:
			require.True(t, hasParent, "%s: its parent is in the trace", s.OperationName)
		}
		for _, tag := range s.Tags {
			v := fmt.Sprint(tag.Value)
			for _, secret := range secrets {
				require.NotContains(t, v, secret, "%s: %s holds message content", s.OperationName, tag.Key)
			}
		}
	}
	return tr, steps, orphans
}

// finished is whether the trace holds the run's last model call: its
// supervisor's reply.
// parented reports whether every model and tool call's span, but for
// killed's, has its step's span in tr. A process exports in batches: a step's
// span ends after its calls' and may reach Jaeger a batch later (the last step
// of the supervisor ends after its reply, which finished waits for).
func parented(tr testinfra.JaegerTrace, killed string) bool {
	ids := map[string]bool{}
	for _, s := range tr.Spans {
		ids[s.SpanID] = true
	}
	for _, s := range tr.Spans {
		op, _ := s.Tag(string(tracing.GenAIOperationName))
		if (op == tracing.OpChat || op == tracing.OpExecuteTool) && !ids[s.Parent()] && tr.Service(s) != killed {
			return false
		}
	}
	return true
}

func finished(tr testinfra.JaegerTrace) bool {
	for _, s := range tr.Spans {
		if s.OperationName == "execute_tool reply" {
			return true
		}
	}
	return false
}
