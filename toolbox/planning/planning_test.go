package planning_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/planning"
	"github.com/aetherium-engine/aetherium/tools"
)

// coordinator fails loudly: planning tools must not need run-level effects.
type coordinator struct{}

func (coordinator) Delegate(context.Context, string, []tools.DelegateRequest) error {
	return errors.New("unexpected Delegate")
}
func (coordinator) Reply(context.Context, string) error { return errors.New("unexpected Reply") }
func (coordinator) Emit(context.Context, string, string, any) error {
	return errors.New("unexpected Emit")
}

// fixture is one store shared by a test's subtests; every subtest uses its own run.
type fixture struct {
	st     *store.Store
	router *tools.Router
}

func setup(t *testing.T) *fixture {
	t.Helper()
	st := testdb.Store(t)
	reg := tools.NewRegistry()
	planning.Register(reg, st)
	return &fixture{st: st, router: tools.NewRouter(reg)}
}

// run creates a runs row and returns a context for agent acting in it.
func (f *fixture) run(t *testing.T) string {
	t.Helper()
	id := uuid.NewString()
	require.NoError(t, f.st.CreateRun(context.Background(), store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`)}))
	return id
}

// session is agent's session in run runID.
func (f *fixture) session(runID, agent string) *tools.Session {
	return &tools.Session{
		RunID: runID, SessionID: "sess-" + agent, Agent: agent, Role: "worker",
		Access:      tools.Access{Tools: []string{"create_plan", "read_plan", "update_plan", "todo"}},
		Coordinator: coordinator{},
	}
}

// call dispatches one tool call and fails the test on error.
func (f *fixture) call(t *testing.T, s *tools.Session, name, args string) string {
	t.Helper()
	res, err := f.router.Dispatch(context.Background(), tools.Call{ID: "c", Name: name, Args: json.RawMessage(args), Session: s})
	require.NoError(t, err, "%s %s", name, args)
	require.False(t, res.Pending)
	require.False(t, res.Final)
	return res.Content
}

func (f *fixture) fail(t *testing.T, s *tools.Session, name, args string) error {
	t.Helper()
	_, err := f.router.Dispatch(context.Background(), tools.Call{ID: "c", Name: name, Args: json.RawMessage(args), Session: s})
	require.Error(t, err, "%s %s", name, args)
	return err
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	return v
}

func TestRegistered(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	planning.Register(reg, nil) // a catalog-only registry needs no store
	require.Equal(t, []string{"create_plan", "read_plan", "todo", "update_plan"}, reg.Names())
	for _, n := range reg.Names() {
		s, _ := reg.Spec(n)
		require.Equal(t, "planning", s.Group)
		require.Equal(t, tools.Standard, s.Tier)
	}
	s, _ := reg.Spec("create_plan")
	require.False(t, s.Idempotent, "re-running create_plan replaces the plan")
}

func TestPlan(t *testing.T) {
	t.Parallel()
	f := setup(t)

	t.Run("create then read", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		p := decode[store.Plan](t, f.call(t, ctx, "create_plan", `{"goal":"ship it","steps":["write","review","reply"]}`))
		require.Positive(t, p.ID)
		require.Equal(t, "ship it", p.Goal)
		require.Equal(t, []store.PlanStep{
			{Index: 1, Title: "write", Status: "pending"},
			{Index: 2, Title: "review", Status: "pending"},
			{Index: 3, Title: "reply", Status: "pending"},
		}, p.Steps)

		require.Equal(t, p, decode[store.Plan](t, f.call(t, ctx, "read_plan", `{"mode":"all"}`)))
		next := decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{}`))
		require.Equal(t, store.PlanStep{Index: 1, Title: "write", Status: "pending"}, next)
		require.Equal(t, next, decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{"mode":"next"}`)))
	})

	t.Run("goal is optional", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		p := decode[store.Plan](t, f.call(t, ctx, "create_plan", `{"steps":["only"]}`))
		require.Empty(t, p.Goal)
		require.Len(t, p.Steps, 1)
	})

	t.Run("no plan yet", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		for _, args := range []string{`{}`, `{"mode":"next"}`, `{"mode":"all"}`} {
			require.Contains(t, f.call(t, ctx, "read_plan", args), "there is no plan yet")
		}
		err := f.fail(t, ctx, "update_plan", `{"step":1,"status":"completed"}`)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("update walks next forward", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		f.call(t, ctx, "create_plan", `{"steps":["a","b","c","d"]}`)

		require.Equal(t, "step 1 is in_progress", f.call(t, ctx, "update_plan", `{"step":1,"status":"in_progress"}`))
		// An in-progress step is still the next actionable one.
		require.Equal(t, 1, decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{}`)).Index)

		require.Equal(t, "step 1 is completed", f.call(t, ctx, "update_plan", `{"step":1,"status":"completed","result":"a.txt written"}`))
		require.Equal(t, 2, decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{}`)).Index)

		f.call(t, ctx, "update_plan", `{"step":2,"status":"skipped"}`)
		f.call(t, ctx, "update_plan", `{"step":3,"status":"failed","result":"boom"}`)
		require.Equal(t, 4, decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{}`)).Index)

		f.call(t, ctx, "update_plan", `{"step":4,"status":"completed"}`)
		require.Equal(t, "every step of the plan is done", f.call(t, ctx, "read_plan", `{}`))

		// Moving a step back to pending makes it next again.
		f.call(t, ctx, "update_plan", `{"step":3,"status":"pending"}`)
		require.Equal(t, 3, decode[store.PlanStep](t, f.call(t, ctx, "read_plan", `{}`)).Index)

		p := decode[store.Plan](t, f.call(t, ctx, "read_plan", `{"mode":"all"}`))
		require.Equal(t, []store.PlanStep{
			{Index: 1, Title: "a", Status: "completed", Result: "a.txt written"},
			{Index: 2, Title: "b", Status: "skipped"},
			{Index: 3, Title: "c", Status: "pending", Result: ""},
			{Index: 4, Title: "d", Status: "completed"},
		}, p.Steps)
	})

	t.Run("update is idempotent", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		f.call(t, ctx, "create_plan", `{"steps":["a"]}`)
		for range 2 {
			f.call(t, ctx, "update_plan", `{"step":1,"status":"completed","result":"r"}`)
		}
		p := decode[store.Plan](t, f.call(t, ctx, "read_plan", `{"mode":"all"}`))
		require.Equal(t, []store.PlanStep{{Index: 1, Title: "a", Status: "completed", Result: "r"}}, p.Steps)
	})

	t.Run("create replaces the active plan", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		first := decode[store.Plan](t, f.call(t, ctx, "create_plan", `{"goal":"v1","steps":["a","b"]}`))
		f.call(t, ctx, "update_plan", `{"step":1,"status":"completed"}`)
		second := decode[store.Plan](t, f.call(t, ctx, "create_plan", `{"goal":"v2","steps":["x"]}`))
		require.NotEqual(t, first.ID, second.ID)
		got := decode[store.Plan](t, f.call(t, ctx, "read_plan", `{"mode":"all"}`))
		require.Equal(t, second, got)
		require.ErrorIs(t, f.fail(t, ctx, "update_plan", `{"step":2,"status":"completed"}`), store.ErrNotFound, "step 2 belonged to the old plan")
	})

	t.Run("plans are per run", func(t *testing.T) {
		t.Parallel()
		a, b := f.session(f.run(t), "lead"), f.session(f.run(t), "lead")
		f.call(t, a, "create_plan", `{"steps":["run a"]}`)
		require.Contains(t, f.call(t, b, "read_plan", `{}`), "there is no plan yet")
		// Any agent of the run sees the team's plan.
		require.Equal(t, "run a", decode[store.PlanStep](t, f.call(t, f.session(sessionRun(a), "writer"), "read_plan", `{}`)).Title)
	})

	t.Run("fifty steps is the limit", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "lead")
		p := decode[store.Plan](t, f.call(t, ctx, "create_plan", steps(50)))
		require.Len(t, p.Steps, 50)
		require.Equal(t, 50, p.Steps[49].Index)
	})
}

func sessionRun(s *tools.Session) string { return s.RunID }

func steps(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%q", fmt.Sprintf("step %d", i+1))
	}
	return `{"steps":[` + strings.Join(s, ",") + `]}`
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name     string
		withPlan bool
		tool     string
		args     string
		want     string
		is       error
	}{
		{name: "no steps", tool: "create_plan", args: `{"steps":[]}`, want: "create_plan: steps must have 1 to 50 entries, got 0"},
		{name: "too many steps", tool: "create_plan", args: steps(51), want: "create_plan: steps must have 1 to 50 entries, got 51"},
		{name: "steps missing", tool: "create_plan", args: `{"goal":"g"}`, want: "missing required field(s): steps", is: tools.ErrInvalidArgs},
		{name: "steps not strings", tool: "create_plan", args: `{"steps":[1]}`, want: "cannot unmarshal number", is: tools.ErrInvalidArgs},
		{name: "bad read mode", withPlan: true, tool: "read_plan", args: `{"mode":"first"}`, want: `read_plan: mode "first" is not next or all`},
		{name: "bad status", withPlan: true, tool: "update_plan", args: `{"step":1,"status":"done"}`, want: `update_plan: status "done" is not one of pending, in_progress, completed, failed, skipped`},
		{name: "step zero", withPlan: true, tool: "update_plan", args: `{"step":0,"status":"completed"}`, want: "step 0", is: store.ErrNotFound},
		{name: "step past the end", withPlan: true, tool: "update_plan", args: `{"step":3,"status":"completed"}`, want: "step 3", is: store.ErrNotFound},
		{name: "status missing", withPlan: true, tool: "update_plan", args: `{"step":1}`, want: "missing required field(s): status", is: tools.ErrInvalidArgs},
		{name: "step missing", withPlan: true, tool: "update_plan", args: `{"status":"completed"}`, want: "missing required field(s): step", is: tools.ErrInvalidArgs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.session(f.run(t), "lead")
			if tc.withPlan {
				f.call(t, ctx, "create_plan", `{"steps":["a","b"]}`)
			}
			err := f.fail(t, ctx, tc.tool, tc.args)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
			if tc.withPlan {
				// A refused call leaves the plan as it was.
				p := decode[store.Plan](t, f.call(t, ctx, "read_plan", `{"mode":"all"}`))
				for _, s := range p.Steps {
					require.Equal(t, "pending", s.Status)
				}
			}
		})
	}
}

func TestTodo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	type items = []store.TodoItem

	t.Run("read before write is empty", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "[]", f.call(t, f.session(f.run(t), "writer"), "todo", `{"action":"read"}`))
	})

	t.Run("write check read", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "writer")
		require.Equal(t, items{{Text: "outline"}, {Text: "draft"}, {Text: "polish"}},
			decode[items](t, f.call(t, ctx, "todo", `{"action":"write","items":["outline","draft","polish"]}`)))
		require.Equal(t, items{{Text: "outline"}, {Text: "draft", Done: true}, {Text: "polish"}},
			decode[items](t, f.call(t, ctx, "todo", `{"action":"check","item":2}`)))
		// Checking twice is harmless (idempotent under redelivery).
		f.call(t, ctx, "todo", `{"action":"check","item":2}`)
		f.call(t, ctx, "todo", `{"action":"check","item":3}`)
		require.Equal(t, items{{Text: "outline"}, {Text: "draft", Done: true}, {Text: "polish", Done: true}},
			decode[items](t, f.call(t, ctx, "todo", `{"action":"read"}`)))
	})

	t.Run("write replaces the list", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "writer")
		f.call(t, ctx, "todo", `{"action":"write","items":["a","b"]}`)
		f.call(t, ctx, "todo", `{"action":"check","item":1}`)
		f.call(t, ctx, "todo", `{"action":"write","items":["c"]}`)
		require.Equal(t, items{{Text: "c"}}, decode[items](t, f.call(t, ctx, "todo", `{"action":"read"}`)))
		f.call(t, ctx, "todo", `{"action":"write"}`)
		require.Equal(t, "[]", f.call(t, ctx, "todo", `{"action":"read"}`))
	})

	t.Run("lists are per agent and per run", func(t *testing.T) {
		t.Parallel()
		run := f.run(t)
		f.call(t, f.session(run, "writer"), "todo", `{"action":"write","items":["mine"]}`)
		require.Equal(t, "[]", f.call(t, f.session(run, "reviewer"), "todo", `{"action":"read"}`))
		require.Equal(t, "[]", f.call(t, f.session(f.run(t), "writer"), "todo", `{"action":"read"}`))
		require.Equal(t, items{{Text: "mine"}}, decode[items](t, f.call(t, f.session(run, "writer"), "todo", `{"action":"read"}`)))
	})

	t.Run("a step's list is written by its save, not by the call", func(t *testing.T) {
		t.Parallel()
		run := f.run(t)
		require.NoError(t, f.st.SetTodos(context.Background(), run, "writer", items{{Text: "before"}}))
		s := f.session(run, "writer")
		s.Todos = tools.NewTodos(nil, false) // the lease did not read it: the first use does
		_, _, changed := s.Todos.Unsaved()
		require.False(t, changed)
		require.Equal(t, items{{Text: "before"}}, decode[items](t, f.call(t, s, "todo", `{"action":"read"}`)))
		f.call(t, s, "todo", `{"action":"write","items":["a","b"]}`)
		f.call(t, s, "todo", `{"action":"check","item":2}`)
		stored, err := f.st.Todos(context.Background(), run, "writer")
		require.NoError(t, err)
		require.Equal(t, items{{Text: "before"}}, stored, "nothing written until the step saves")
		got, mark, changed := s.Todos.Unsaved()
		require.True(t, changed)
		require.Equal(t, items{{Text: "a"}, {Text: "b", Done: true}}, got)
		s.Todos.Saved(mark)
		_, _, changed = s.Todos.Unsaved()
		require.False(t, changed, "saved")
		require.Equal(t, items{{Text: "a"}, {Text: "b", Done: true}}, decode[items](t, f.call(t, s, "todo", `{"action":"read"}`)),
			"the step reads its own changes")

		held := f.session(run, "writer")
		held.Todos = tools.NewTodos(items{{Text: "as leased"}}, true)
		require.Equal(t, items{{Text: "as leased"}}, decode[items](t, f.call(t, held, "todo", `{"action":"read"}`)),
			"a list the lease read is not read again")
		require.ErrorContains(t, f.fail(t, held, "todo", `{"action":"check","item":2}`), "item 2 does not exist (the list has 1)")
	})

	t.Run("hundred items is the limit", func(t *testing.T) {
		t.Parallel()
		ctx := f.session(f.run(t), "writer")
		list := func(n int) string {
			s := make([]string, n)
			for i := range s {
				s[i] = fmt.Sprintf(`"i%d"`, i)
			}
			return `{"action":"write","items":[` + strings.Join(s, ",") + `]}`
		}
		require.Len(t, decode[items](t, f.call(t, ctx, "todo", list(100))), 100)
		require.ErrorContains(t, f.fail(t, ctx, "todo", list(101)), "todo: at most 100 items")
		require.Len(t, decode[items](t, f.call(t, ctx, "todo", `{"action":"read"}`)), 100, "a refused write keeps the old list")
	})

	errs := []struct {
		name  string
		setup string
		args  string
		want  string
		is    error
	}{
		{name: "check on an empty list", args: `{"action":"check","item":1}`, want: "todo: item 1 does not exist (the list has 0)"},
		{name: "check item zero", setup: `{"action":"write","items":["a"]}`, args: `{"action":"check"}`, want: "todo: item 0 does not exist (the list has 1)"},
		{name: "check past the end", setup: `{"action":"write","items":["a","b"]}`, args: `{"action":"check","item":3}`, want: "todo: item 3 does not exist (the list has 2)"},
		{name: "check negative", setup: `{"action":"write","items":["a"]}`, args: `{"action":"check","item":-1}`, want: "item -1 does not exist"},
		{name: "unknown action", args: `{"action":"delete"}`, want: `todo: action "delete" is not write, check or read`},
		{name: "missing action", args: `{}`, want: "missing required field(s): action", is: tools.ErrInvalidArgs},
		{name: "items not a list", args: `{"action":"write","items":"a"}`, want: "cannot unmarshal string", is: tools.ErrInvalidArgs},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := f.session(f.run(t), "writer")
			if tc.setup != "" {
				f.call(t, ctx, "todo", tc.setup)
			}
			err := f.fail(t, ctx, "todo", tc.args)
			require.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
}
