package fleet_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tracing"
)

// twoLevelTeam is a delegation two levels deep: the supervisor delegates to
// "lead", which delegates to "helper", which writes a file and answers; the lead
// answers, the supervisor replies.
func twoLevelTeam() templates.Template {
	return templates.Template{
		Name: "trace-two-level", Description: "supervisor → lead → helper", Model: llm.ModelConfig{Provider: "script"},
		Supervisor: templates.Node{Name: "supervisor", Prompt: "Delegate, then reply.", MCPServers: []string{"orchestration"}},
		Workers: []templates.Node{
			{Name: "lead", Prompt: "Delegate the writing.", MCPServers: []string{"orchestration"}},
			{Name: "helper", Prompt: "Write files.", MCPServers: []string{"workspace"}, Tools: []string{"write_file"}},
		},
		Budget: templates.Budget{MaxTokens: 1 << 30},
		Script: script.Script{Agents: map[string][]script.Turn{
			"supervisor": {
				{Calls: []script.Call{{Tool: "delegate", Args: map[string]any{"agent": "lead", "task": "Have the notes written"}}}},
				{Calls: []script.Call{{Tool: "reply", Args: map[string]any{"message": "the notes are written"}}}},
			},
			"lead": {
				{Calls: []script.Call{{Tool: "delegate", Args: map[string]any{"agent": "helper", "task": "Write notes.txt"}}}},
				{Say: "lead: the helper wrote notes.txt"},
			},
			"helper": {
				{Calls: []script.Call{{Tool: "write_file", Args: map[string]any{"path": "notes.txt", "content": "confidential notes of the helper"}}}},
				{Say: "helper: notes.txt written"},
			},
		}},
	}
}

// The traces as a real receiver gets them. The API runs in the test process,
// the steps in two worker processes of bin/aetherium (worker-a, worker-b), all
// three exporting OTLP/HTTP to the Jaeger scripts/services.sh started; every
// assertion reads Jaeger's query API (GET /api/traces/<id>).
//
// The two-level run (supervisor → lead → helper) starts on worker A, which is
// killed (SIGKILL) in the middle of the helper's turn; worker B takes the
// redelivered turn and the rest of the run. Its trace is one trace: every step
// a child of the API's submit span (whichever process ran it), the helper's
// turn there once — B's delivery, a child of the same submit span — and each
// resume links the turn it reads. Then the demo run, on worker B: one trace too.
// Both: every model call and tool call a child of its step, the GenAI
// attributes on every model call, no message content on any span.
func TestTracesInJaeger(t *testing.T) {
	t.Parallel()
	jaeger := testinfra.RequireJaeger(t)
	ctx := t.Context()
	// Unique service names: Jaeger is shared by every test and run on the machine.
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	svcAPI, svcA, svcB := "api-"+suffix, "worker-a-"+suffix, "worker-b-"+suffix

	cfg := fleettest.Config(t)
	cfg.Tracing.Enabled = true
	cfg.Tracing.Endpoint = jaeger.OTLP
	cfg.Tracing.ServiceName = svcAPI
	cfg.Tracing.TraceURL = jaeger.Query + "/trace/{trace_id}"
	f := fleettest.StartWith(t, cfg, fleettest.Options{NoWorker: true})

	dir := t.TempDir()
	bin, err := harness.Build(ctx, fleettest.RepoPath(t, "."), dir)
	require.NoError(t, err)
	startWorker := func(name, service string, latency time.Duration) *harness.Proc {
		path := filepath.Join(dir, name+".yaml")
		require.NoError(t, harness.FleetConfig{RedisURL: cfg.RedisURL, DatabaseURL: cfg.DatabaseURL, Workspaces: cfg.Workspaces,
			Templates: cfg.Templates, Permissions: cfg.Security.PermissionsFile, TaskCheckInterval: 20 * time.Millisecond,
			ScriptLatency: latency, StepLease: 2 * time.Second, ShutdownTimeout: 2 * time.Second,
			Sections: map[string]map[string]any{"tracing": {"enabled": true, "endpoint": jaeger.OTLP, "service_name": service}},
		}.Write(path))
		// The batch exporter sends within 50 ms of a span's end (a kill -9 loses
		// only what is younger).
		p, err := harness.StartWorker(bin, path, filepath.Join(dir, name+".log"), "OTEL_BSP_SCHEDULE_DELAY=50")
		require.NoError(t, err, "start %s", name)
		t.Cleanup(p.Kill)
		return p
	}

	// Worker A's model answers take a second: the kill lands inside the
	// helper's first model call.
	a := startWorker("worker-a", svcA, time.Second)
	twoLevel := f.SubmitTeam(twoLevelTeam(), "Have the notes written")
	require.Eventually(t, func() bool {
		var n int
		return f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE run_id = $1 AND agent = 'helper'`, twoLevel).Scan(&n) == nil && n > 0
	}, 60*time.Second, 5*time.Millisecond, "the helper's turn starts on worker A")
	a.Kill()
	// asynq's recoverer hands a task back once its lease (30 s, renewed by the
	// living process) has been expired for 30 s; the test ages the dead
	// process's leases instead of waiting that minute, and worker B's recoverer
	// (which runs as it starts) redelivers the turn.
	for _, q := range queue.Queues() {
		key := "asynq:{" + q + "}:lease"
		ids, err := f.Redis.ZRange(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		for _, id := range ids {
			require.NoError(t, f.Redis.ZAddXX(ctx, key, redis.Z{Score: 0, Member: id}).Err())
		}
	}
	startWorker("worker-b", svcB, 0)
	run := f.WaitTerminal(twoLevel, 90*time.Second)
	require.Equal(t, "completed", run.Status)

	demo := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
	require.Equal(t, "completed", f.WaitTerminal(demo, 60*time.Second).Status)
	require.NoError(t, f.Tracing.ForceFlush(ctx), "the API's submit spans")

	secrets := []string{"Have the notes written", "confidential notes", "helper: notes.txt written", "lead: the helper",
		"Greet the user", "hello from the aetherium fleet", "wrote hello.txt"}

	t.Run("two-level run across two processes, one killed mid-turn", func(t *testing.T) {
		tr := jaegerRun(t, f, jaeger, twoLevel, map[string]int{"supervisor": 2, "lead": 2, "helper": 2})
		steps := requireOneTrace(t, tr, svcAPI, secrets)
		require.Len(t, steps["helper"], 1, "the helper's turn is in the trace once: the killed delivery's span never ended")
		require.Equal(t, svcB, tr.Service(steps["helper"][0]), "worker B ran the redelivered turn")
		services := map[string]bool{}
		for _, s := range tr.Spans {
			services[tr.Service(s)] = true
		}
		require.True(t, services[svcA] && services[svcB], "the trace spans both worker processes: %v", services)
		require.Equal(t, svcA, tr.Service(first(steps["supervisor"])), "the supervisor's first step ran on worker A")
		// Each resume links the turn whose result it reads: the lead's resume
		// the helper's turn (B's), the supervisor's resume the lead's last step.
		requireLinked(t, tr, steps["lead"], steps["helper"][0], "helper")
		requireLinked(t, tr, steps["supervisor"], last(steps["lead"]), "lead")
		requireToolCalls(t, tr, map[string]int{"delegate": 2, "write_file": 1, "reply": 1})
	})

	t.Run("demo run", func(t *testing.T) {
		tr := jaegerRun(t, f, jaeger, demo, map[string]int{"supervisor": 4, "writer": 3})
		steps := requireOneTrace(t, tr, svcAPI, secrets)
		require.GreaterOrEqual(t, len(steps["supervisor"]), 2, "the start and the resume")
		require.Len(t, steps["writer"], 1)
		requireLinked(t, tr, steps["supervisor"], steps["writer"][0], "writer")
		requireToolCalls(t, tr, map[string]int{"delegate": 1, "write_file": 1, "reply": 1, "create_plan": 1})
	})
}

func first(s []testinfra.JaegerSpan) testinfra.JaegerSpan { return s[0] }
func last(s []testinfra.JaegerSpan) testinfra.JaegerSpan  { return s[len(s)-1] }

// jaegerRun reads the run's trace from Jaeger (its id from the run's trace_url)
// once it holds the submit span and a model call for every scripted turn
// (chats: each agent's number of turns), the steps' spans ending just after the
// run's terminal event.
func jaegerRun(t *testing.T, f *fleettest.Fleet, j testinfra.Jaeger, runID string, chats map[string]int) testinfra.JaegerTrace {
	t.Helper()
	var view struct {
		TraceURL string `json:"trace_url"`
	}
	status, raw := f.Do(http.MethodGet, "/api/runs/"+runID, nil, &view)
	require.Equal(t, http.StatusOK, status, string(raw))
	traceID := strings.TrimPrefix(view.TraceURL, j.Query+"/trace/")
	require.Len(t, traceID, 32, "the run's trace_url names its trace: %q", view.TraceURL)
	want := 0
	for _, n := range chats {
		want += n
	}
	var tr testinfra.JaegerTrace
	require.Eventually(t, func() bool {
		got, found, err := j.Trace(context.Background(), traceID)
		if err != nil || !found {
			return false
		}
		tr = got
		n, root := 0, false
		for _, s := range tr.Spans {
			if strings.HasPrefix(s.OperationName, "chat ") {
				n++
			}
			root = root || s.OperationName == "submit run"
		}
		return root && n >= want
	}, 30*time.Second, 100*time.Millisecond, "jaeger has the run's trace %s", traceID)
	return tr
}

// requireOneTrace checks a run's trace as Jaeger has it: one root, the API's
// submit span; every step (invoke_agent) its child, from whichever process; every
// model call and tool call a child of a step of the trace; the GenAI attributes
// on each model call; none of the secrets (the prompt, a file's content, the
// answers) in any attribute or event. It returns the steps by agent, in start order.
func requireOneTrace(t *testing.T, tr testinfra.JaegerTrace, apiService string, secrets []string) map[string][]testinfra.JaegerSpan {
	t.Helper()
	byID := map[string]testinfra.JaegerSpan{}
	var roots []testinfra.JaegerSpan
	for _, s := range tr.Spans {
		require.Equal(t, tr.TraceID, s.TraceID)
		byID[s.SpanID] = s
		if s.Parent() == "" {
			roots = append(roots, s)
		}
	}
	require.Len(t, roots, 1, "one root")
	root := roots[0]
	require.Equal(t, "submit run", root.OperationName)
	require.Equal(t, apiService, tr.Service(root))
	kind, _ := root.Tag("span.kind")
	require.Equal(t, "server", kind)

	steps := map[string][]testinfra.JaegerSpan{}
	for _, s := range sortedByStart(tr.Spans) {
		for _, tag := range s.Tags {
			for _, secret := range secrets {
				require.NotContains(t, fmt.Sprint(tag.Value), secret, "%s: %s", s.OperationName, tag.Key)
			}
		}
		for _, l := range s.Logs {
			for _, field := range l.Fields {
				for _, secret := range secrets {
					require.NotContains(t, fmt.Sprint(field.Value), secret, "%s: event %s", s.OperationName, field.Key)
				}
			}
		}
		if s.SpanID == root.SpanID {
			continue
		}
		parent, ok := byID[s.Parent()]
		require.True(t, ok, "%s (%s): its parent %s is a span of the trace", s.OperationName, tr.Service(s), s.Parent())
		require.NotEqual(t, "true", tagOf(s, "error"), "%s failed", s.OperationName)
		op, _ := s.Tag(string(tracing.GenAIOperationName))
		switch op {
		case tracing.OpInvokeAgent:
			require.Equal(t, root.SpanID, parent.SpanID, "%s is a child of the submit span", s.OperationName)
			agent, ok := s.Tag(string(tracing.GenAIAgentName))
			require.True(t, ok)
			steps[agent] = append(steps[agent], s)
		case tracing.OpChat:
			require.True(t, strings.HasPrefix(parent.OperationName, "invoke_agent "), "a model call is a child of its step, not of %s", parent.OperationName)
			require.Equal(t, tr.Service(parent), tr.Service(s), "a model call is its step's process's")
			for _, k := range []string{"gen_ai.system", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons"} {
				_, ok := s.Tag(k)
				require.True(t, ok, "%s has %s", s.OperationName, k)
			}
			require.Equal(t, "script", tagOf(s, "gen_ai.system"))
			require.Equal(t, "client", tagOf(s, "span.kind"))
		case tracing.OpExecuteTool:
			require.True(t, strings.HasPrefix(parent.OperationName, "invoke_agent "), "a tool call is a child of its step, not of %s", parent.OperationName)
			_, ok := s.Tag(string(tracing.ToolOutcome))
			require.True(t, ok, "%s has an outcome", s.OperationName)
		default:
			// A post-run task (run:finish-image) is a child of the submit span too.
			require.True(t, strings.HasPrefix(s.OperationName, "post_run "), "unexpected span %q (%s)", s.OperationName, tr.Service(s))
			require.Equal(t, root.SpanID, parent.SpanID, s.OperationName)
		}
	}
	return steps
}

func tagOf(s testinfra.JaegerSpan, key string) string {
	v, _ := s.Tag(key)
	return v
}

func sortedByStart(spans []testinfra.JaegerSpan) []testinfra.JaegerSpan {
	out := append([]testinfra.JaegerSpan(nil), spans...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].StartTime < out[j-1].StartTime; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// requireLinked checks that exactly one of steps links turn (a span link is a
// FOLLOWS_FROM reference in Jaeger's model), and that no step links a span
// outside the trace.
func requireLinked(t *testing.T, tr testinfra.JaegerTrace, steps []testinfra.JaegerSpan, turn testinfra.JaegerSpan, agent string) {
	t.Helper()
	ids := map[string]bool{}
	for _, s := range tr.Spans {
		ids[s.SpanID] = true
	}
	linked := 0
	for _, s := range steps {
		for _, l := range s.Links() {
			require.True(t, ids[l], "%s links a span of the trace", s.OperationName)
			if l == turn.SpanID {
				linked++
			}
		}
	}
	require.Equal(t, 1, linked, "one resume links the %s's turn", agent)
}

// requireToolCalls checks the number of execute_tool spans of each named tool.
func requireToolCalls(t *testing.T, tr testinfra.JaegerTrace, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, s := range tr.Spans {
		if name, ok := s.Tag(string(tracing.GenAIToolName)); ok && strings.HasPrefix(s.OperationName, "execute_tool ") {
			got[name]++
		}
	}
	for name, n := range want {
		require.Equal(t, n, got[name], "execute_tool %s spans (all: %v)", name, got)
	}
}
