package worker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/orchestration"
	"github.com/aetherium-engine/aetherium/toolbox/planning"
	"github.com/aetherium-engine/aetherium/tools"
)

// A step's todo calls change the list the step holds; the save that stores
// their results writes it, in that save's transaction (issue 45: no
// transaction of the call's own). A crash before that save loses the change
// with the results, and the redelivery redoes both.
func TestStepSavesTheTodoListWithTheCallsResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q, rdb, _ := infra(t)
	st := testdb.Store(t) // a pool: the test reads beside the step's writes
	reg := tools.NewRegistry()
	orchestration.Register(reg)
	planning.Register(reg, st)
	// What the store holds while each todo call runs: the call itself writes nothing.
	var during [][]store.TodoItem
	peek := func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, c tools.Call) (tools.Result, error) {
			res, err := next.Handle(ctx, c)
			if c.Name == "todo" {
				items, terr := st.Todos(ctx, c.Session.RunID, c.Session.Agent)
				require.NoError(t, terr)
				during = append(during, items)
			}
			return res, err
		})
	}
	model := &answers{}
	w := New(Config{Workspaces: t.TempDir(), CircuitBreaker: 3}, Deps{
		Store: st, Queue: q, Events: &events.Recorder{Store: st, Redis: rdb}, Router: tools.NewRouter(reg, peek), Models: model,
	})
	runID := uuid.NewString()
	team := `{"name":"t","model":{"provider":"answers"},"supervisor":{"name":"boss","prompt":"lead","mcp_servers":["orchestration","planning"]}}`
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: runID, Prompt: "do it", Team: json.RawMessage(team), Variables: json.RawMessage(`{}`)}))
	list := func() []store.TodoItem {
		items, err := st.Todos(ctx, runID, "boss")
		require.NoError(t, err)
		return items
	}

	model.next = append(model.next,
		calls(call("c1", "todo", `{"action":"write","items":["outline","draft"]}`)),
		func(llm.Request) (llm.Response, error) { return llm.Response{}, errors.New("connection reset by peer") },
	)
	require.Error(t, supervise(t, w, runID), "the step dies before the write's result is saved")
	require.Equal(t, [][]store.TodoItem{{}}, during, "the call wrote nothing itself")
	require.Empty(t, list(), "the change is lost with the result it belongs to")

	model.next = append(model.next,
		calls(call("c2", "todo", `{"action":"check","item":1}`)),
		calls(call("c3", "reply", `{"message":"done"}`)),
	)
	require.NoError(t, supervise(t, w, runID), "the redelivery runs the pending call again")
	want := []store.TodoItem{{Text: "outline", Done: true}, {Text: "draft"}}
	require.Equal(t, want, list(), "saved with the results")
	require.Len(t, during, 3)
	require.Empty(t, during[1], "the redone write is not in the store while it runs")
	require.Equal(t, []store.TodoItem{{Text: "outline"}, {Text: "draft"}}, during[2], "the check runs after the save that held the write")
	run, err := st.GetRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
	var answer string
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT m.message->>'content' FROM session_messages AS m
		WHERE m.message->>'tool_call_id' = 'c2'`).Scan(&answer))
	require.JSONEq(t, `[{"text":"outline","done":true},{"text":"draft","done":false}]`, answer, "the check saw the write")
}
