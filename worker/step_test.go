package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/qa"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox/orchestration"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

// The step's own tests: the loop over a transaction-scoped database (rolled back
// at cleanup), a real Redis for the queue and event announcements, and a model
// that answers from a list. End-to-end behaviour (crashes, approvals, the gate)
// is tested through running fleets in fleet/.

// answers is a model that plays a fixed list of answers, then fails the test.
type answers struct {
	mu   sync.Mutex
	next []func(llm.Request) (llm.Response, error)
	seen []llm.Request
}

func (a *answers) Name() string { return "answers" }

func (a *answers) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, req)
	if len(a.next) == 0 {
		return llm.Response{}, fmt.Errorf("%w: no answer left", llm.ErrExhausted)
	}
	f := a.next[0]
	a.next = a.next[1:]
	return f(req)
}

func (a *answers) For(templates.Template, templates.Node) (llm.Provider, llm.ModelConfig, error) {
	return a, llm.ModelConfig{Model: "test"}, nil
}

func calls(cs ...llm.ToolCall) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) {
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: cs}, Usage: llm.Usage{InputTokens: 10, OutputTokens: 5}}, nil
	}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Args: json.RawMessage(args)}
}

type testBundle struct {
	st        *store.Store
	model     *answers
	inspector *asynq.Inspector
	reg       *tools.Registry
}

// setup returns a Worker over a transaction and its bundle. mw wrap the router.
func setup(t *testing.T, mw ...tools.Middleware) (*Worker, *testBundle) {
	t.Helper()
	st, q, rdb, inspector := infra(t)

	reg := tools.NewRegistry()
	orchestration.Register(reg)
	tools.Register(reg, "read_file", "stands in for read_file", func(_ context.Context, _ tools.Call, a struct {
		Path string `json:"path"`
	}) (tools.Result, error) {
		if a.Path == "fail" {
			return tools.Result{}, errors.New("read failed")
		}
		return tools.Text("contents of %s", a.Path), nil
	}, tools.Idempotent(), tools.InGroup("workspace"))
	model := &answers{}
	w := New(Config{Workspaces: t.TempDir(), CircuitBreaker: 3}, Deps{
		Store: st, Queue: q, Events: &events.Recorder{Store: st, Redis: rdb}, Router: tools.NewRouter(reg, mw...), Models: model,
	})
	return w, &testBundle{st: st, model: model, inspector: inspector, reg: reg}
}

// infra is a store over a rolled-back transaction and an Enqueuer, a client
// and an inspector on a private Redis.
func infra(t *testing.T) (*store.Store, *queue.Enqueuer, *redis.Client, *asynq.Inspector) {
	t.Helper()
	st := store.InTx(testdb.TestTx(t))
	redisURL := testdb.Redis(t)
	client, inspector := testdb.Asynq(t, redisURL)
	ropt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(ropt)
	t.Cleanup(func() { rdb.Close() })
	q, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	return st, q, rdb, inspector
}

const testTeam = `{"name":"t","model":{"provider":"answers"},
	"supervisor":{"name":"boss","prompt":"lead","mcp_servers":["orchestration","workspace"],"tools":["read_file"]},
	"workers":[{"name":"coder","prompt":"code","mcp_servers":["workspace"],"tools":["read_file"]}]}`

// newRun stores a queued run of testTeam.
func (b *testBundle) newRun(t *testing.T) string {
	t.Helper()
	id := uuid.NewString()
	require.NoError(t, b.st.CreateRun(context.Background(), store.Run{ID: id, Prompt: "do it", Team: json.RawMessage(testTeam), Variables: json.RawMessage(`{}`)}))
	return id
}

func (b *testBundle) eventTypes(t *testing.T, runID string) []string {
	t.Helper()
	evs, err := b.st.EventsAfter(context.Background(), runID, 0, 1000)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func supervise(t *testing.T, w *Worker, runID string) error {
	t.Helper()
	return w.Mux().ProcessTask(context.Background(), queue.SuperviseTask(runID))
}

func TestStepReplyCompletesTheRun(t *testing.T) {
	t.Parallel()
	w, b := setup(t)
	runID := b.newRun(t)
	b.model.next = append(b.model.next,
		calls(call("c1", "read_file", `{"path":"hi"}`)),
		calls(call("c2", "reply", `{"message":"all done"}`)),
	)
	require.NoError(t, supervise(t, w, runID))

	run, err := b.st.GetRun(context.Background(), runID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
	require.Equal(t, "all done", run.Result)
	require.Equal(t, int64(30), run.TokensUsed, "two answers of 15 tokens")
	require.Len(t, b.model.seen, 2)
	second := b.model.seen[1].Messages
	require.Equal(t, "contents of hi", second[len(second)-1].Content, "the tool result follows its call")
	require.Equal(t, []string{events.RunStarted, events.ModelAnswered, events.ToolCall, events.ModelAnswered, events.ToolCall, events.RunCompleted},
		b.eventTypes(t, runID), "the reply's tool.call is recorded before run.completed")

	// A redelivery of the finished run changes nothing and asks no model.
	require.NoError(t, supervise(t, w, runID))
	require.Len(t, b.model.seen, 2)
	require.Len(t, b.eventTypes(t, runID), 6)
}

func TestStepDelegationWaitsAndEnqueuesTheTurn(t *testing.T) {
	t.Parallel()
	w, b := setup(t)
	runID := b.newRun(t)
	b.model.next = append(b.model.next, calls(call("d1", "delegate", `{"agent":"coder","task":"write it"}`)))
	require.NoError(t, supervise(t, w, runID))

	ds, err := b.st.RunDelegations(context.Background(), runID)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "coder", ds[0].Agent)
	require.Equal(t, "write it", ds[0].Task)
	info, err := b.inspector.GetTaskInfo(queue.QueueWorkers, queue.TurnTaskID(ds[0].ID, "start"))
	require.NoError(t, err, "the delegation's turn is enqueued under its deterministic id")
	require.Equal(t, queue.TypeTurn, info.Type)

	// Redelivered while it waits: no second delegation, no model call.
	require.NoError(t, supervise(t, w, runID))
	ds, err = b.st.RunDelegations(context.Background(), runID)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Len(t, b.model.seen, 1)
}

func TestStepFailsTheRun(t *testing.T) {
	t.Parallel()
	failing := calls(call("x", "read_file", `{"path":"fail"}`))
	cases := []struct {
		name    string
		answers []func(llm.Request) (llm.Response, error)
		reason  string
	}{
		{"consecutive failed tool calls trip the breaker", []func(llm.Request) (llm.Response, error){failing, failing, failing}, "circuit_breaker"},
		{"unusable answers trip the breaker", []func(llm.Request) (llm.Response, error){
			func(llm.Request) (llm.Response, error) {
				return llm.Response{}, fmt.Errorf("%w: garbage", llm.ErrMalformed)
			},
			func(llm.Request) (llm.Response, error) {
				return llm.Response{}, fmt.Errorf("%w: garbage", llm.ErrMalformed)
			},
			func(llm.Request) (llm.Response, error) {
				return llm.Response{}, fmt.Errorf("%w: garbage", llm.ErrMalformed)
			},
		}, "circuit_breaker"},
		{"a model with no answer left", nil, "script_exhausted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, b := setup(t)
			runID := b.newRun(t)
			b.model.next = c.answers
			require.NoError(t, supervise(t, w, runID), "a failed run is a handled task, not a retry")
			run, err := b.st.GetRun(context.Background(), runID)
			require.NoError(t, err)
			require.Equal(t, store.RunFailed, run.Status)
			require.Equal(t, c.reason, run.Reason)
			types := b.eventTypes(t, runID)
			require.Equal(t, events.RunFailed, types[len(types)-1], "the terminal event is last")
		})
	}
}

// TestStepSavesAuditRowsFromResults: the rows a gate returns with its results are
// saved by the loop, with the session, once per call — a delegation's when it is
// dispatched, before its result exists.
func TestStepSavesAuditRowsFromResults(t *testing.T) {
	t.Parallel()
	auditing := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c tools.Call) (tools.Result, error) {
			res, err := next.Handle(ctx, c)
			s := c.Session
			outcome, layer := tools.Classify(err)
			res.Audit = &store.AuditRow{CallKey: s.SessionID + ":" + c.ID, At: time.Now(), RunID: s.RunID, Team: s.Team, Agent: s.Agent,
				Role: s.Role, Tool: c.Name, Tier: "standard", Allowed: outcome != tools.OutcomeDenied, Decision: string(outcome), DenyLayer: layer}
			return res, err
		})
	}
	w, b := setup(t, auditing)
	runID := b.newRun(t)
	b.model.next = append(b.model.next,
		calls(call("c1", "read_file", `{"path":"a"}`), call("c2", "nope", `{}`), call("c3", "delegate", `{"agent":"coder","task":"t"}`)),
	)
	require.NoError(t, supervise(t, w, runID))
	rows, err := b.st.RunAudit(context.Background(), runID, 10)
	require.NoError(t, err)
	decisions := map[string]string{}
	for _, r := range rows {
		decisions[r.Tool] = r.Decision
	}
	require.Equal(t, map[string]string{"read_file": "allowed", "nope": "denied", "delegate": "allowed"}, decisions)
}

func TestStopped(t *testing.T) {
	t.Parallel()
	other := errors.New("boom")
	require.NoError(t, stopped(errStop))
	require.NoError(t, stopped(fmt.Errorf("phase: %w", errStop)))
	require.NoError(t, stopped(nil))
	require.ErrorIs(t, stopped(other), other)
}

// The QA rule holds for a supervisor's reply: a qa supervisor that replies
// with a verdict on a page it has not played gets the reply refused as a tool
// error (the run goes on); after play_test the same reply completes the run.
func TestStepQASupervisorReply(t *testing.T) {
	t.Parallel()
	w, b := setup(t)
	w.cfg.ReplyChecks = []hook.ReplyCheck{qa.Check} // the QA rule, as the fleet registers it
	tools.Register(b.reg, "play_test", "stands in for play_test", func(ctx context.Context, call tools.Call, a struct {
		Page string `json:"page"`
	}) (tools.Result, error) {
		ws := call.Session.Workspace
		body := []byte("<button>Go</button>")
		if err := os.WriteFile(filepath.Join(ws, a.Page), body, 0o644); err != nil {
			return tools.Result{}, err
		}
		sum := sha256.Sum256(body)
		return tools.JSON(map[string]any{"page": a.Page, "files": map[string]string{a.Page: hex.EncodeToString(sum[:])}})
	}, tools.InGroup("quality"))
	id := uuid.NewString()
	team := `{"name":"t","model":{"provider":"answers"},
	"supervisor":{"name":"boss","prompt":"lead","qa":true,"mcp_servers":["orchestration","quality"],"tools":["play_test"]},
	"workers":[{"name":"coder","prompt":"code","mcp_servers":["workspace"],"tools":["read_file"]}]}`
	require.NoError(t, b.st.CreateRun(context.Background(), store.Run{ID: id, Prompt: "check", Team: json.RawMessage(team), Variables: json.RawMessage(`{}`)}))
	verdict := `{"message":"VERDICT index.html PASS every control works"}`
	b.model.next = append(b.model.next,
		calls(call("c1", "reply", verdict)),
		calls(call("c2", "play_test", `{"page":"index.html"}`)),
		calls(call("c3", "reply", verdict)),
	)
	require.NoError(t, supervise(t, w, id))
	run, err := b.st.GetRun(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status, run.Error)
	require.Equal(t, "VERDICT index.html PASS every control works", run.Result)
	require.Len(t, b.model.seen, 3)
	refused := b.model.seen[1].Messages[len(b.model.seen[1].Messages)-1]
	require.True(t, refused.IsError, "the first reply is a tool error")
	require.Contains(t, refused.Content, "play_test has not been run on index.html as it stands now")
}

// A step that dies after its reply completed the run, before it saved the
// reply's result: the redelivered supervise replays the reply, so the result
// and its audit row land and nothing else runs again.
func TestStepReplyResultSavedAfterACrash(t *testing.T) {
	t.Parallel()
	// A store with a pool (the crash is written beside the worker's writes).
	_, q, rdb, _ := infra(t)
	st := testdb.Store(t)
	reg := tools.NewRegistry()
	orchestration.Register(reg)
	tools.Register(reg, "read_file", "stands in for read_file", func(context.Context, tools.Call, struct {
		Path string `json:"path"`
	}) (tools.Result, error) {
		return tools.Text("contents"), nil
	}, tools.Idempotent(), tools.InGroup("workspace"))
	model := &answers{}
	w := New(Config{Workspaces: t.TempDir(), CircuitBreaker: 3}, Deps{
		Store: st, Queue: q, Events: &events.Recorder{Store: st, Redis: rdb}, Router: tools.NewRouter(reg), Models: model,
	})
	b := &testBundle{st: st, model: model, reg: reg}
	runID := b.newRun(t)
	b.model.next = append(b.model.next, calls(call("c1", "read_file", `{"path":"hi"}`), call("c2", "reply", `{"message":"all done"}`)))
	require.NoError(t, supervise(t, w, runID))
	ctx := context.Background()
	sessID := queue.SupervisorSession(runID).String()
	page, _, err := b.st.SessionHistory(ctx, sessID, -1, 100)
	require.NoError(t, err)
	last := page[len(page)-1]
	require.Equal(t, "reply", last.Message.Name)

	// The crash: the reply's result row and the session's "done" never saved.
	for _, sql := range []string{
		`DELETE FROM session_messages WHERE session_id = $1 AND seq = (SELECT max(seq) FROM session_messages WHERE session_id = $1)`,
		`UPDATE sessions SET status = 'active' WHERE id = $1`,
	} {
		_, err := st.Pool.Exec(ctx, sql, sessID)
		require.NoError(t, err)
	}

	require.NoError(t, supervise(t, w, runID))
	page, _, err = b.st.SessionHistory(ctx, sessID, -1, 100)
	require.NoError(t, err)
	require.Equal(t, "reply", page[len(page)-1].Message.Name, "the reply's result is saved")
	require.Len(t, b.model.seen, 1, "no model call")
	run, err := b.st.GetRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
	require.Equal(t, "all done", run.Result)
	var replies int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'tool.call' AND data->>'tool' = 'reply'`, runID).Scan(&replies))
	require.Equal(t, 1, replies, "the reply's tool.call event, once")
}
