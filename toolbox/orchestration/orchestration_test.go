package orchestration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/orchestration"
	"github.com/aetherium-engine/aetherium/tools"
)

type delegation struct {
	CallID string
	Reqs   []tools.DelegateRequest
}

// coordinator records what the tools asked the worker to do; err fails every call.
type coordinator struct {
	mu          sync.Mutex
	delegations []delegation
	replies     []string
	err         error
}

func (c *coordinator) Delegate(_ context.Context, callID string, reqs []tools.DelegateRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.delegations = append(c.delegations, delegation{CallID: callID, Reqs: reqs})
	return nil
}

func (c *coordinator) Reply(_ context.Context, message string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.replies = append(c.replies, message)
	return nil
}

func (c *coordinator) Emit(context.Context, string, string, any) error {
	return errors.New("orchestration tools emit nothing themselves")
}

// parentTools is the calling agent's catalog: work tools plus the coordination ones.
var parentTools = []string{"read_file", "write_file", "todo", "delegate", "reply", "spawn_subagents"}

// setup returns a router over the orchestration tools and a supervisor session.
func setup(t *testing.T) (*tools.Router, *tools.Session, *coordinator) {
	t.Helper()
	reg := tools.NewRegistry()
	orchestration.Register(reg)
	co := &coordinator{}
	caller := &tools.Session{
		RunID: "run-1", SessionID: "sess-1", Agent: "lead", Role: "supervisor",
		Access: tools.Access{Tools: parentTools}, Coordinator: co,
	}
	return tools.NewRouter(reg), caller, co
}

func dispatch(t *testing.T, r *tools.Router, caller *tools.Session, name, args string) (tools.Result, error) {
	t.Helper()
	return r.Dispatch(context.Background(), tools.Call{Session: caller, ID: "call_1", Name: name, Args: json.RawMessage(args)})
}

func TestRegistered(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	orchestration.Register(reg)
	require.Equal(t, []string{"delegate", "reply", "spawn_subagents"}, reg.Names())
	s, _ := reg.Spec("spawn_subagents")
	require.Equal(t, tools.Elevated, s.Tier)
	for _, n := range reg.Names() {
		s, _ := reg.Spec(n)
		require.Equal(t, "orchestration", s.Group)
		require.True(t, s.Idempotent, n)
	}
}

func TestDelegate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    string
		want    []tools.DelegateRequest
		wantErr string
		invalid bool
	}{
		{name: "agent and task", args: `{"agent":"writer","task":"Write hello.txt"}`, want: []tools.DelegateRequest{{Agent: "writer", Task: "Write hello.txt"}}},
		{name: "empty task", args: `{"agent":"writer","task":"  "}`, wantErr: "delegate: task is empty"},
		{name: "missing agent", args: `{"task":"t"}`, wantErr: "missing required field(s): agent", invalid: true},
		{name: "missing task", args: `{"agent":"w"}`, wantErr: "missing required field(s): task", invalid: true},
		{name: "extra field", args: `{"agent":"w","task":"t","tools":["x"]}`, wantErr: `unknown field "tools"`, invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t)
			res, err := dispatch(t, r, caller, "delegate", tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.invalid {
					require.ErrorIs(t, err, tools.ErrInvalidArgs)
				}
				require.Empty(t, co.delegations)
				return
			}
			require.NoError(t, err)
			require.True(t, res.Pending, "the answer arrives later")
			require.False(t, res.Final)
			require.Equal(t, []delegation{{CallID: "call_1", Reqs: tc.want}}, co.delegations)
			require.Nil(t, co.delegations[0].Reqs[0].Tools, "a named worker is not a subagent")
		})
	}
}

func TestReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    string
		wantErr string
	}{
		{name: "message", args: `{"message":"all done"}`},
		{name: "empty message", args: `{"message":""}`, wantErr: "reply: message is empty"},
		{name: "blank message", args: `{"message":"\n"}`, wantErr: "reply: message is empty"},
		{name: "missing message", args: `{}`, wantErr: "missing required field(s): message"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t)
			res, err := dispatch(t, r, caller, "reply", tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Empty(t, co.replies)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tools.Result{Content: "reply sent", Final: true}, res)
			require.Equal(t, []string{"all done"}, co.replies)
		})
	}
}

func TestCoordinatorErrorsPropagate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, args string }{
		{"delegate", `{"agent":"w","task":"t"}`},
		{"reply", `{"message":"m"}`},
		{"spawn_subagents", `{"tasks":[{"task":"t"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t)
			co.err = errors.New("unknown agent")
			res, err := dispatch(t, r, caller, c.name, c.args)
			require.ErrorIs(t, err, co.err)
			require.False(t, res.Pending)
			require.False(t, res.Final)
		})
	}
}

func tasks(n int) string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = fmt.Sprintf(`{"task":"t%d"}`, i+1)
	}
	return `{"tasks":[` + strings.Join(ts, ",") + `]}`
}

func TestSpawnSubagents(t *testing.T) {
	t.Parallel()
	work := []string{"read_file", "write_file", "todo"}
	tests := []struct {
		name    string
		args    string
		want    []tools.DelegateRequest
		wantErr string
		invalid bool
	}{
		{
			name: "default tools are the parent's work tools",
			args: `{"tasks":[{"task":"look around"}]}`,
			want: []tools.DelegateRequest{{Agent: "lead-sub-1", Task: "look around", Tools: work}},
		},
		{
			name: "requested subset",
			args: `{"tasks":[{"task":"a","tools":["read_file"]},{"task":"b","tools":["todo","write_file"]},{"task":"c"}]}`,
			want: []tools.DelegateRequest{
				{Agent: "lead-sub-1", Task: "a", Tools: []string{"read_file"}},
				{Agent: "lead-sub-2", Task: "b", Tools: []string{"todo", "write_file"}},
				{Agent: "lead-sub-3", Task: "c", Tools: work},
			},
		},
		{name: "eight tasks is the limit", args: tasks(8)},
		{name: "tool the parent lacks", args: `{"tasks":[{"task":"a"},{"task":"b","tools":["read_file","web_fetch"]}]}`, wantErr: `spawn_subagents: task 2: tool "web_fetch" is not one the parent can pass on`},
		{name: "no recursion", args: `{"tasks":[{"task":"a","tools":["spawn_subagents"]}]}`, wantErr: `task 1: tool "spawn_subagents" is not one`},
		{name: "no delegating", args: `{"tasks":[{"task":"a","tools":["delegate"]}]}`, wantErr: `tool "delegate" is not one`},
		{name: "no replying", args: `{"tasks":[{"task":"a","tools":["reply"]}]}`, wantErr: `tool "reply" is not one`},
		{name: "more than eight tasks", args: tasks(9), wantErr: "spawn_subagents: 1 to 8 tasks, got 9"},
		{name: "no tasks", args: `{"tasks":[]}`, wantErr: "spawn_subagents: 1 to 8 tasks, got 0"},
		{name: "missing tasks", args: `{}`, wantErr: "missing required field(s): tasks", invalid: true},
		{name: "unknown task field", args: `{"tasks":[{"task":"a","model":"big"}]}`, wantErr: `unknown field "model"`, invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, caller, co := setup(t)
			res, err := dispatch(t, r, caller, "spawn_subagents", tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.invalid {
					require.ErrorIs(t, err, tools.ErrInvalidArgs)
				}
				require.Empty(t, co.delegations, "a refused spawn starts nothing")
				return
			}
			require.NoError(t, err)
			require.True(t, res.Pending)
			require.Len(t, co.delegations, 1, "all subagents are one delegation call")
			d := co.delegations[0]
			require.Equal(t, "call_1", d.CallID)
			if tc.want != nil {
				require.Equal(t, tc.want, d.Reqs)
			}
			for i, req := range d.Reqs {
				require.Equal(t, fmt.Sprintf("lead-sub-%d", i+1), req.Agent)
				// The worker tells subagents from named workers by a non-nil tool list.
				require.NotNil(t, req.Tools)
			}
		})
	}
}

func TestCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		parent    []string
		requested []string
		want      []string
		wantErr   string
	}{
		{name: "default drops coordination tools", parent: parentTools, want: []string{"read_file", "write_file", "todo"}},
		{name: "default of a coordination-only parent is empty, not nil", parent: []string{"delegate", "reply"}, want: []string{}},
		{name: "default of no parent tools", parent: nil, want: []string{}},
		{name: "requested subset keeps its order", parent: parentTools, requested: []string{"todo", "read_file"}, want: []string{"todo", "read_file"}},
		{name: "requested all work tools", parent: parentTools, requested: []string{"read_file", "write_file", "todo"}, want: []string{"read_file", "write_file", "todo"}},
		{name: "escalation", parent: parentTools, requested: []string{"read_file", "run_shell"}, wantErr: `tool "run_shell" is not one the parent can pass on`},
		{name: "parent holding spawn still cannot pass it", parent: parentTools, requested: []string{"spawn_subagents"}, wantErr: `"spawn_subagents"`},
		{name: "nothing to pass on", parent: nil, requested: []string{"read_file"}, wantErr: `"read_file"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := orchestration.Cap(tc.parent, tc.requested)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestCapDoesNotAliasParent(t *testing.T) {
	t.Parallel()
	parent := []string{"read_file", "todo"}
	got, err := orchestration.Cap(parent, nil)
	require.NoError(t, err)
	got[0] = "changed"
	require.Equal(t, []string{"read_file", "todo"}, parent)
}
