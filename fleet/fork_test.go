package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// dispatch is one live tool call as the fleet's router saw it, with its
// run's workspace as it was right before the call.
type dispatch struct {
	tool, callID, workspace string
}

// forkFleet records every live dispatch by run, with the workspace's hash
// before it: the original's workspace at a step is the hash before that
// step's call.
type forkFleet struct {
	*fleettest.Fleet
	mu    *sync.Mutex
	calls map[string][]dispatch
}

func setupFork(t *testing.T, configure func(*config.Config)) forkFleet {
	t.Helper()
	f := forkFleet{mu: &sync.Mutex{}, calls: map[string][]dispatch{}}
	record := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
			h, err := fleet.WorkspaceHash(call.Session.Workspace)
			if err != nil {
				h = "error: " + err.Error()
			}
			f.mu.Lock()
			f.calls[call.Session.RunID] = append(f.calls[call.Session.RunID], dispatch{call.Name, call.ID, h})
			f.mu.Unlock()
			return next.Handle(ctx, call)
		})
	}
	f.Fleet = fleettest.Start(t, fleettest.Options{Configure: configure, Fleet: fleet.Options{Middleware: []tools.Middleware{record}}})
	return f
}

func (f forkFleet) dispatched(id string) []dispatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]dispatch(nil), f.calls[id]...)
}

func tools_(ds []dispatch) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.tool
	}
	return out
}

func auditTools(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	rows, err := st.RunAudit(context.Background(), id, 1000)
	require.NoError(t, err)
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Tool)
	}
	return out
}

// A fork of the demo run (its writer wrote hello.txt) at a step of the
// supervisor's: the steps before it are the record's and execute nothing (no
// live dispatch, no audit row), the fork's workspace at the step hashes as
// the original's did at that step, and the steps from it run live to the
// same result. Demo's steps: 1 create_plan, 2 report_progress, 3 delegate (the
// writer writes hello.txt), 4 update_plan, 5 report_progress, 6 reply; then
// the writer's 7-9.
func TestForkOfARecordedRun(t *testing.T) {
	t.Parallel()
	f := setupFork(t, nil)
	ctx := context.Background()
	orig := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
	require.Equal(t, store.RunCompleted, f.WaitTerminal(orig, 60*time.Second).Status)
	od := f.dispatched(orig)
	require.Equal(t, []string{"create_plan", "report_progress", "delegate", "write_file", "read_file", "update_plan", "report_progress", "reply"}, tools_(od))
	at := map[string]string{} // the original's workspace before each supervisor step
	for _, d := range od {
		at[d.tool+" "+d.callID] = d.workspace
	}

	tests := []struct {
		name string
		at   int
		// before is the original's call whose workspace the fork's must equal.
		before string
		live   []string
	}{
		// After the delegation: hello.txt is in the workspace, rebuilt from the
		// record; the supervisor's model is asked again for its third turn.
		{"after the writer wrote", 4, "update_plan", []string{"update_plan", "report_progress", "reply"}},
		// The first message's second call: its first call's result is the
		// record's, this one runs live, and everything after it (the writer's
		// file included).
		{"mid-message", 2, "report_progress", []string{"report_progress", "delegate", "write_file", "read_file", "update_plan", "report_progress", "reply"}},
		// From the first step: nothing is shared.
		{"from the start", 1, "create_plan", []string{"create_plan", "report_progress", "delegate", "write_file", "read_file", "update_plan", "report_progress", "reply"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var res replay.ForkResult
			code, body := f.Do(http.MethodPost, "/api/runs/"+orig+"/fork", map[string]any{"at": tc.at}, &res)
			require.Equal(t, http.StatusAccepted, code, string(body))
			require.Equal(t, tc.at-1, res.Shared)
			require.Equal(t, store.RunCompleted, f.WaitTerminal(res.RunID, 60*time.Second).Status)
			run, err := f.Store.GetRun(ctx, res.RunID)
			require.NoError(t, err)
			require.Equal(t, "hello.txt is written", run.Result)

			fd := f.dispatched(res.RunID)
			require.Equal(t, tc.live, tools_(fd), "only the steps from the fork point ran")
			require.Equal(t, tc.live, auditTools(t, f.Store, res.RunID), "the shared steps wrote no audit row")
			var want string
			for _, d := range od {
				if d.tool == tc.before {
					want = d.workspace
					break
				}
			}
			require.Equal(t, want, fd[0].workspace, "the fork's workspace at step %d is the original's", tc.at)
			require.Equal(t, want, res.WorkspaceHash)

			fk, err := f.Store.ForkOf(ctx, res.RunID)
			require.NoError(t, err)
			require.Equal(t, store.RunFork{From: orig, At: tc.at}, fk)
		})
	}
	// The two workspaces differ between the steps (the test can fail).
	require.NotEqual(t, at["create_plan "+od[0].callID], at["update_plan "+od[5].callID])

	// The forked record replays like the original: no divergence, no tool.
	var res replay.ForkResult
	code, body := f.Do(http.MethodPost, "/api/runs/"+orig+"/fork", map[string]any{"at": 4}, &res)
	require.Equal(t, http.StatusAccepted, code, string(body))
	require.Equal(t, store.RunCompleted, f.WaitTerminal(res.RunID, 60*time.Second).Status)
	require.Eventually(t, func() bool {
		rep, err := f.Replay(ctx, res.RunID, fleet.ReplayOptions{})
		return err == nil && !rep.Diverged && rep.ToolExecutions == 0
	}, 20*time.Second, 300*time.Millisecond)
}

// What a fork refuses, each with a clear error and no run made.
func TestForkRefuses(t *testing.T) {
	t.Parallel()
	const rootSecret, bobSecret = "root-secret-fork", "bob-secret-fork"
	f := setupFork(t, func(c *config.Config) {
		c.API.Tokens = []api.Token{
			{Name: "root", SHA256: api.HashToken(rootSecret), Roles: []string{api.RoleAdmin}},
			{Name: "bob", SHA256: api.HashToken(bobSecret), Roles: []string{api.RoleSubmit, api.RoleRead}},
		}
	})
	ctx := context.Background()
	do := func(secret, path string, body any) (int, string) {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, f.URL+path, bytes.NewReader(raw))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	code, body := do(rootSecret, "/api/orchestrator/run-from-template", map[string]any{"template": "demo", "prompt": "Greet the user in a file", "variables": map[string]any{"topic": "greetings"}})
	require.Equal(t, http.StatusAccepted, code, body)
	var sub struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &sub))
	orig := sub.RunID
	require.Eventually(t, func() bool {
		r, err := f.Store.GetRun(ctx, orig)
		require.NoError(t, err)
		return r.Status == store.RunCompleted
	}, 60*time.Second, 100*time.Millisecond)
	queued := "01900000-0000-7000-8000-0000000000fa"
	require.NoError(t, f.Store.CreateRun(ctx, store.Run{ID: queued, Status: store.RunQueued, Prompt: "p", Team: []byte(`{}`), Owner: "root"}))
	runs := func() int {
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n))
		return n
	}
	before := runs()
	tests := []struct {
		name   string
		secret string
		run    string
		body   any
		code   int
		want   string
	}{
		{"step 0", rootSecret, orig, map[string]any{"at": 0}, 400, "1 or more"},
		{"step past the end", rootSecret, orig, map[string]any{"at": 99}, 400, "has steps 1-9"},
		{"a delegation's step", rootSecret, orig, map[string]any{"at": 7}, 400, "supervisor's session, steps 1-6"},
		{"a run in flight", rootSecret, queued, map[string]any{"at": 1}, 409, "not finished"},
		{"a team that does not validate", rootSecret, orig, map[string]any{"at": 4, "team": map[string]any{"name": "x", "supervisor": map[string]any{"name": "s", "prompt": "p", "tools": []string{"no_such_tool"}}}}, 400, "no_such_tool"},
		{"a model without provider", rootSecret, orig, map[string]any{"at": 4, "model": map[string]any{"model": "gpt"}}, 400, "provider"},
		{"a team and a prompt", rootSecret, orig, map[string]any{"at": 4, "prompt": "p", "team": map[string]any{"name": "x"}}, 400, "not both"},
		{"an unknown field", rootSecret, orig, map[string]any{"at": 4, "steps": 2}, 400, "unknown field"},
		// Another owner's run is not theirs to fork: the missing-run 404.
		{"another owner's run", bobSecret, orig, map[string]any{"at": 4}, 404, "not found"},
	}
	for _, tc := range tests {
		code, body := do(tc.secret, "/api/runs/"+tc.run+"/fork", tc.body)
		require.Equal(t, tc.code, code, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.want, tc.name)
	}
	require.Equal(t, before, runs(), "no refused fork made a run")
	// The owner may: the fork is theirs.
	code, body = do(rootSecret, "/api/runs/"+orig+"/fork", map[string]any{"at": 4})
	require.Equal(t, http.StatusAccepted, code, body)
}

// A call a person edited before it ran (an approval's edit) ran with the
// person's arguments, while the session holds the model's: the fork's
// workspace is rebuilt from what ran, never from the model's unapproved
// arguments.
func TestForkReappliesTheEditedArguments(t *testing.T) {
	t.Parallel()
	f := setupFork(t, nil)
	ctx := context.Background()
	orig := f.Submit("demo", "Greet the user in a file", map[string]any{"topic": "greetings"})
	require.Equal(t, store.RunCompleted, f.WaitTerminal(orig, 60*time.Second).Status)
	rows, err := f.Store.RunAudit(ctx, orig, 1000)
	require.NoError(t, err)
	var key string
	for _, r := range rows {
		if r.Tool == "write_file" {
			key = r.CallKey
		}
	}
	require.NotEmpty(t, key)
	sess, call := key[:strings.LastIndex(key, ":")], key[strings.LastIndex(key, ":")+1:]
	// The record as an edit leaves it: the approval holds the person's
	// arguments, the session the model's.
	const edited = "a person's words\n"
	a, _, err := f.Store.RequestApproval(ctx, store.Approval{ID: security.ApprovalID(sess, call), RunID: orig, SessionID: sess, CallID: call,
		Tool: "write_file", Kind: store.KindCall, Tier: "restricted", Args: json.RawMessage(`{}`), ArgsHash: "model"}, time.Minute)
	require.NoError(t, err)
	// Decided as the edit path stores it (Decide refuses a finished run's).
	_, err = f.Store.Pool.Exec(ctx, `UPDATE approvals SET status = $2, decided_by = 'alice', decided_at = now(),
		edited_args = $3::jsonb, edited_args_hash = 'person' WHERE id = $1`,
		a.ID, store.ApprovalEdited, `{"path":"hello.txt","content":`+strconv.Quote(edited)+`}`)
	require.NoError(t, err)

	var res replay.ForkResult
	code, body := f.Do(http.MethodPost, "/api/runs/"+orig+"/fork", map[string]any{"at": 4}, &res)
	require.Equal(t, http.StatusAccepted, code, string(body))
	require.Equal(t, store.RunCompleted, f.WaitTerminal(res.RunID, 60*time.Second).Status)
	run, err := f.Store.GetRun(ctx, res.RunID)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(f.Cfg.Workspaces, run.WorkspaceID(), "hello.txt"))
	require.NoError(t, err)
	require.Equal(t, edited, string(got), "the fork re-applied the call as it ran, edited")
}
