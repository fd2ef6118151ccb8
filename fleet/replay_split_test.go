package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/store"
)

// postTo posts body to an API process at base (its answers checked against
// the OpenAPI document) and decodes a 2xx answer into out.
func postTo(t *testing.T, base, path string, body any, out any) (int, http.Header, string) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := fleettest.Client(t, nil).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && resp.StatusCode/100 == 2 {
		require.NoError(t, json.Unmarshal(got, out))
	}
	return resp.StatusCode, resp.Header, string(got)
}

// Replay and fork in the split deployment (the compose layout): an API process
// without the worker's engine hands them to a worker (a run:replay task) and
// answers with what the worker stored. Without a worker it answers 503 within
// replay.wait, and the same request collects the answer once a worker ran
// the task. The report is the in-process one, and nothing of the run changes.
func TestReplayAndForkThroughAWorker(t *testing.T) {
	t.Parallel()
	f := setupReplay(t, fleettest.Options{NoWorker: true})
	ctx := context.Background()
	// Two API processes alone: one that waits for a worker briefly, one
	// that waits the default replay.wait.
	brief := f.StartAPIWith(func(c *config.Config) { c.Replay.Wait = 300 * time.Millisecond })
	api := f.StartAPI()
	require.Nil(t, api.Worker, "the second process is an API process alone")

	// No worker yet: a finished run's replay waits replay.wait, then 503.
	lone := "01900000-0000-7000-8000-0000000000b1"
	require.NoError(t, f.Store.CreateRun(ctx, store.Run{ID: lone, Status: store.RunQueued, Prompt: "p", Team: []byte(`{}`), Owner: "admin"}))
	_, err := f.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'completed' WHERE id = $1`, lone)
	require.NoError(t, err)
	began := time.Now()
	code, hdr, body := postTo(t, brief.URL, "/api/runs/"+lone+"/replay", nil, nil)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	require.Equal(t, "1", hdr.Get("Retry-After"))
	require.Contains(t, body, "ask again")
	taskID := queue.ReplayTaskID(lone, api.Rules.Current().Revision())
	require.Contains(t, body, taskID)

	// A worker starts: the same request (to any API process) collects what it answered, as the
	// in-process replay answers (a record with no session: the empty team
	// does not parse).
	f.StartWorker()
	_, want := f.Replay(ctx, lone, fleet.ReplayOptions{})
	require.ErrorIs(t, want, replay.ErrCorruptRecord)
	code, _, body = postTo(t, api.URL, "/api/runs/"+lone+"/replay", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	require.Contains(t, body, "corrupt record")
	info, err := f.Inspector().GetTaskInfo(queue.QueueMaintenance, taskID)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateCompleted, info.State, "one task, run once")

	// A recorded run: the worker's report is the in-process one, twice (the
	// second request finds the first's task), and the run is as it was.
	id := f.demoRun(t)
	before := f.trace(t, id)
	local, err := f.Replay(ctx, id, fleet.ReplayOptions{})
	require.NoError(t, err)
	for range 2 {
		var rep replay.Report
		code, _, body = postTo(t, api.URL, "/api/runs/"+id+"/replay", nil, &rep)
		require.Equal(t, http.StatusOK, code, body)
		require.False(t, rep.Diverged)
		require.Zero(t, rep.ToolExecutions)
		require.Equal(t, local.Steps, rep.Steps)
		require.Equal(t, local.FinalHash, rep.FinalHash)
		require.Equal(t, before, f.trace(t, id), "a replay by a worker changes nothing of the run and runs no tool")
	}

	// A fork: started by the worker, answered through the API process; the
	// same request again is the same fork, not a second one.
	var fk, again replay.ForkResult
	code, _, body = postTo(t, api.URL, "/api/runs/"+id+"/fork", map[string]any{"at": 4}, &fk)
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, 3, fk.Shared)
	require.Equal(t, store.RunCompleted, f.WaitTerminal(fk.RunID, 60*time.Second).Status)
	code, _, body = postTo(t, api.URL, "/api/runs/"+id+"/fork", map[string]any{"at": 4}, &again)
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, fk.RunID, again.RunID)
	// A refusal of the worker's comes back with its status and field.
	code, _, body = postTo(t, api.URL, "/api/runs/"+id+"/fork", map[string]any{"at": 99}, nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "has steps 1-9")
}

// replay.max_messages bounds the record a replay or a fork reads: a run over it
// is refused before a message is read, 422 naming the limit, in the process
// that holds the engine and in an API process alone (before any task).
func TestReplayRefusesARunOverItsBound(t *testing.T) {
	t.Parallel()
	f := setupReplay(t, fleettest.Options{Configure: func(c *config.Config) { c.Replay.MaxMessages = 5 }})
	ctx := context.Background()
	id := f.demoRun(t)
	sums, err := f.Store.RunSessions(ctx, id)
	require.NoError(t, err)
	n := 0
	for _, s := range sums {
		n += s.Messages
	}
	require.Greater(t, n, 5, "the demo run holds more than the bound")

	_, err = f.Replay(ctx, id, fleet.ReplayOptions{})
	require.ErrorIs(t, err, replay.ErrTooLarge)
	require.ErrorContains(t, err, "over replay.max_messages (5)")
	_, err = f.Fork(ctx, id, fleet.ForkOptions{At: 4})
	require.ErrorIs(t, err, replay.ErrTooLarge)

	lone := f.StartAPI()
	for _, base := range []string{f.URL, lone.URL} {
		for path, body := range map[string]any{"/replay": nil, "/fork": map[string]any{"at": 4}} {
			code, _, got := postTo(t, base, "/api/runs/"+id+path, body, nil)
			require.Equal(t, http.StatusUnprocessableEntity, code, got)
			require.Contains(t, got, "over replay.max_messages (5)")
		}
	}
	// The API process refused before handing anything to a worker.
	_, err = f.Inspector().GetTaskInfo(queue.QueueMaintenance, queue.ReplayTaskID(id, lone.Rules.Current().Revision()))
	require.ErrorIs(t, err, asynq.ErrTaskNotFound)

	// At the bound, the same record replays.
	rec, err := replay.Load(ctx, f.Store, id, n)
	require.NoError(t, err)
	require.Len(t, rec.Sessions, len(sums))
}
