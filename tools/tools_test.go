package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// Tiny argument structs standing in for the real server classes.
type pathArgs struct {
	Path string `json:"path"`
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
	Mode    int    `json:"mode,omitempty"`
}

type delegateArgs struct {
	Agent string `json:"agent"`
	Task  string `json:"task"`
}

type replyArgs struct {
	Message string `json:"message"`
}

type todoArgs struct {
	Action string `json:"action,omitempty"`
}

type fetchArgs struct {
	URL string `json:"url"`
}

// echo returns its decoded arguments (%+v, zero values included), so a test sees
// exactly what the tool received.
func echo[A any](_ context.Context, _ tools.Call, a A) (tools.Result, error) {
	return tools.Text("%+v", a), nil
}

// setup registers a small set of real tool names: two workspace tools, three
// orchestration tools, two planning tools and one outbound research tool.
func setup(t *testing.T) *tools.Registry {
	t.Helper()
	reg := tools.NewRegistry()
	tools.Register(reg, "read_file", "read", echo[pathArgs], tools.Idempotent(), tools.InGroup("workspace"))
	tools.Register(reg, "write_file", "write", echo[writeArgs], tools.InGroup("workspace"))
	tools.Register(reg, "delegate", "delegate", echo[delegateArgs], tools.InGroup("orchestration"))
	tools.Register(reg, "reply", "reply", func(_ context.Context, call tools.Call, a replyArgs) (tools.Result, error) {
		return tools.Result{Content: a.Message, Final: true}, nil
	}, tools.InGroup("orchestration"))
	tools.Register(reg, "spawn_subagents", "spawn", echo[struct{}], tools.InGroup("orchestration"), tools.WithTier(tools.Elevated))
	tools.Register(reg, "todo", "todo", echo[todoArgs], tools.InGroup("planning"))
	tools.Register(reg, "create_plan", "plan", echo[struct{}], tools.InGroup("planning"))
	tools.Register(reg, "web_fetch", "fetch", echo[fetchArgs], tools.Outbound(), tools.InGroup("research"), tools.WithTier(tools.Elevated))
	return reg
}

// session is a session allowed to use allowed.
func session(allowed []string, defaults map[string]map[string]any) *tools.Session {
	return &tools.Session{
		RunID: "run-1", SessionID: "sess-1", Agent: "writer", Role: "worker",
		Access: tools.Access{Tools: allowed}, ToolDefaults: defaults,
	}
}

// dispatch runs call through r as made by s.
func dispatch(r *tools.Router, s *tools.Session, call tools.Call) (tools.Result, error) {
	call.Session = s
	return r.Dispatch(context.Background(), call)
}

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		node       tools.Node
		wantGroups []string
		wantTools  []string
	}{
		{
			name:       "worker served its mcp_servers",
			node:       tools.Node{Role: "worker", MCPServers: []string{"workspace"}},
			wantGroups: []string{"workspace"},
			wantTools:  []string{"read_file", "write_file"},
		},
		{
			name:       "worker with two groups sees both without delegate or reply",
			node:       tools.Node{Role: "worker", MCPServers: []string{"workspace", "planning"}},
			wantGroups: []string{"planning", "workspace"},
			wantTools:  []string{"create_plan", "read_file", "todo", "write_file"},
		},
		{
			name:       "explicit tools intersect and add their own group",
			node:       tools.Node{Role: "worker", MCPServers: []string{"workspace"}, Tools: []string{"write_file", "todo"}},
			wantGroups: []string{"planning", "workspace"},
			wantTools:  []string{"todo", "write_file"},
		},
		{
			name:       "no mcp_servers: groups derived from tools",
			node:       tools.Node{Role: "worker", Tools: []string{"read_file", "web_fetch"}},
			wantGroups: []string{"research", "workspace"},
			wantTools:  []string{"read_file", "web_fetch"},
		},
		{
			name:       "explicit tool outside mcp_servers is still served",
			node:       tools.Node{Role: "worker", MCPServers: []string{"planning"}, Tools: []string{"read_file"}},
			wantGroups: []string{"planning", "workspace"},
			wantTools:  []string{"read_file"},
		},
		{
			name:       "a named but unregistered design tool adds its group but no tool",
			node:       tools.Node{Role: "worker", Tools: []string{"run_shell", "read_file"}},
			wantGroups: []string{"shell", "workspace"},
			wantTools:  []string{"read_file"},
		},
		{
			name:       "a tool outside the design is ignored",
			node:       tools.Node{Role: "worker", Tools: []string{"bogus", "todo"}},
			wantGroups: []string{"planning"},
			wantTools:  []string{"todo"},
		},
		{
			name:       "worker with nothing gets nothing",
			node:       tools.Node{Role: "worker"},
			wantGroups: []string{},
			wantTools:  nil,
		},
		{
			name:       "worker granted only a tool it lacks the registration for",
			node:       tools.Node{Role: "worker", Tools: []string{"run_shell"}},
			wantGroups: []string{"shell"},
			wantTools:  nil,
		},
		{
			name:       "supervisor always gets delegate and reply",
			node:       tools.Node{Role: "supervisor", MCPServers: []string{"planning"}},
			wantGroups: []string{"orchestration", "planning"},
			wantTools:  []string{"create_plan", "delegate", "reply", "todo"},
		},
		{
			name:       "supervisor with an explicit list still gets delegate and reply",
			node:       tools.Node{Role: "supervisor", Tools: []string{"todo"}},
			wantGroups: []string{"orchestration", "planning"},
			wantTools:  []string{"delegate", "reply", "todo"},
		},
		{
			name:       "supervisor with nothing gets exactly delegate and reply",
			node:       tools.Node{Role: "supervisor"},
			wantGroups: []string{"orchestration"},
			wantTools:  []string{"delegate", "reply"},
		},
		{
			name:       "supervisor serving orchestration sees spawn_subagents too",
			node:       tools.Node{Role: "supervisor", MCPServers: []string{"orchestration"}},
			wantGroups: []string{"orchestration"},
			wantTools:  []string{"delegate", "reply", "spawn_subagents"},
		},
		{
			name:       "subagent is not a supervisor",
			node:       tools.Node{Role: "subagent", Tools: []string{"read_file"}},
			wantGroups: []string{"workspace"},
			wantTools:  []string{"read_file"},
		},
	}
	reg := setup(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := reg.Resolve(tc.node)
			require.Equal(t, tc.wantGroups, a.Groups)
			require.Equal(t, tc.wantTools, a.Tools)
			for _, tool := range tc.wantTools {
				require.True(t, a.Allows(tool))
			}
			if tc.node.Role != "supervisor" && !contains(tc.node.MCPServers, "orchestration") {
				require.False(t, a.Allows("delegate"), "workers are not given delegate")
				require.False(t, a.Allows("reply"), "workers are not given reply")
			}
		})
	}
}

func TestResolveSupervisorWithoutRegisteredOrchestration(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	tools.Register(reg, "todo", "todo", echo[todoArgs], tools.InGroup("planning"))
	// Injection only names tools that exist: a build without delegate shows none.
	a := reg.Resolve(tools.Node{Role: "supervisor", Tools: []string{"todo"}})
	require.Equal(t, []string{"todo"}, a.Tools)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestDefinitions(t *testing.T) {
	t.Parallel()
	reg := setup(t)
	defs := reg.Definitions(tools.Access{Tools: []string{"write_file", "reply", "not_registered"}})
	require.Len(t, defs, 2, "tools outside the registry are not shown")
	require.Equal(t, "write_file", defs[0].Name)
	require.Equal(t, "write", defs[0].Description)
	require.Equal(t, "reply", defs[1].Name)

	var sch struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	require.NoError(t, json.Unmarshal(defs[0].Parameters, &sch))
	require.Equal(t, "object", sch.Type)
	require.Len(t, sch.Properties, 3)
	require.Contains(t, sch.Properties, "path")
	require.Contains(t, sch.Properties, "content")
	require.Equal(t, []string{"path"}, sch.Required, "omitempty fields are optional")
	require.NotNil(t, sch.AdditionalProperties)
	require.False(t, *sch.AdditionalProperties)
	require.NotContains(t, string(defs[0].Parameters), "$schema")
	require.NotContains(t, string(defs[0].Parameters), "$ref")

	require.Empty(t, reg.Definitions(tools.Access{}))
}

func TestRegistrySpecs(t *testing.T) {
	t.Parallel()
	reg := setup(t)
	require.Equal(t, []string{"create_plan", "delegate", "read_file", "reply", "spawn_subagents", "todo", "web_fetch", "write_file"}, reg.Names())

	tests := []struct {
		name           string
		group          string
		tier           tools.Tier
		outbound, idem bool
	}{
		{name: "read_file", group: "workspace", tier: tools.Standard, idem: true},
		{name: "write_file", group: "workspace", tier: tools.Standard},
		{name: "web_fetch", group: "research", tier: tools.Elevated, outbound: true},
		{name: "spawn_subagents", group: "orchestration", tier: tools.Elevated},
		{name: "todo", group: "planning", tier: tools.Standard},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok := reg.Spec(tc.name)
			require.True(t, ok)
			require.Equal(t, tc.name, s.Name)
			require.Equal(t, tc.group, s.Group)
			require.Equal(t, tc.tier, s.Tier)
			require.Equal(t, tc.outbound, s.Outbound)
			require.Equal(t, tc.idem, s.Idempotent)
			require.True(t, json.Valid(s.Schema))
		})
	}
	_, ok := reg.Spec("run_shell")
	require.False(t, ok)
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		reg  func(r *tools.Registry)
		want string
	}{
		{
			name: "no server group",
			reg:  func(r *tools.Registry) { tools.Register(r, "make_coffee", "", echo[struct{}]) },
			want: "tools: make_coffee is registered without a server group (tools.InGroup)",
		},
		{
			name: "not a server group",
			reg: func(r *tools.Registry) {
				tools.Register(r, "make_coffee", "", echo[struct{}], tools.InGroup("kitchen"))
			},
			want: `tools: make_coffee: "kitchen" is not a server group (tools.Groups)`,
		},
		{
			name: "duplicate",
			reg: func(r *tools.Registry) {
				tools.Register(r, "todo", "", echo[struct{}], tools.InGroup("planning"))
				tools.Register(r, "todo", "", echo[struct{}], tools.InGroup("planning"))
			},
			want: "tools: duplicate registration of todo",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.PanicsWithValue(t, tc.want, func() { tc.reg(tools.NewRegistry()) })
		})
	}
}

func TestDispatch(t *testing.T) {
	t.Parallel()
	all := []string{"read_file", "write_file", "delegate", "reply", "todo", "create_plan"}
	tests := []struct {
		name     string
		sess     *tools.Session
		call     tools.Call
		wantErr  error
		wantMsg  []string
		wantBody string
		final    bool
	}{
		{name: "valid call", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`{"path":"a.txt"}`)}, wantBody: `{Path:a.txt}`},
		{name: "optional fields may be omitted", sess: session(all, nil), call: tools.Call{Name: "write_file", Args: json.RawMessage(`{"path":"a"}`)}, wantBody: `{Path:a Content: Mode:0}`},
		{name: "empty args mean an empty object", sess: session(all, nil), call: tools.Call{Name: "todo"}, wantBody: `{Action:}`},
		{name: "null args mean an empty object", sess: session(all, nil), call: tools.Call{Name: "todo", Args: json.RawMessage(" null ")}, wantBody: `{Action:}`},
		{name: "result flags pass through", sess: session(all, nil), call: tools.Call{Name: "reply", Args: json.RawMessage(`{"message":"bye"}`)}, wantBody: "bye", final: true},
		{
			name: "unknown tool", sess: session(all, nil), call: tools.Call{Name: "make_coffee"},
			wantErr: tools.ErrUnknownTool, wantMsg: []string{`"make_coffee"`, "does not exist"},
		},
		{
			name: "design tool not registered", sess: session(append(all, "comfyui_generate"), nil), call: tools.Call{Name: "comfyui_generate"},
			wantErr: tools.ErrUnknownTool, wantMsg: []string{`"comfyui_generate"`},
		},
		{
			name: "registered tool outside the catalog", sess: session([]string{"read_file"}, nil), call: tools.Call{Name: "write_file", Args: json.RawMessage(`{"path":"x"}`)},
			wantErr: tools.ErrNotInCatalog, wantMsg: []string{`"write_file" is not available to writer`},
		},
		{
			name: "wrong type", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`{"path":5}`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"read_file:", "cannot unmarshal number", "path"},
		},
		{
			name: "missing required field", sess: session(all, nil), call: tools.Call{Name: "delegate", Args: json.RawMessage(`{}`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"delegate:", "missing required field(s): agent, task"},
		},
		{
			name: "one missing required field", sess: session(all, nil), call: tools.Call{Name: "delegate", Args: json.RawMessage(`{"agent":"w"}`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"missing required field(s): task"},
		},
		{
			name: "null args still need required fields", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`null`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"missing required field(s): path"},
		},
		{
			name: "unknown field", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`{"path":"a","pth":"b"}`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"read_file:", `unknown field "pth"`},
		},
		{
			name: "array instead of object", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`["a.txt"]`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"arguments must be a JSON object"},
		},
		{
			name: "string instead of object", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`"a.txt"`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"arguments must be a JSON object"},
		},
		{
			name: "garbage", sess: session(all, nil), call: tools.Call{Name: "read_file", Args: json.RawMessage(`{path:`)},
			wantErr: tools.ErrInvalidArgs, wantMsg: []string{"arguments must be a JSON object"},
		},
	}
	r := tools.NewRouter(setup(t))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := dispatch(r, tc.sess, tc.call)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				for _, m := range tc.wantMsg {
					require.ErrorContains(t, err, m)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantBody, res.Content)
			require.Equal(t, tc.final, res.Final)
		})
	}
}

func TestDispatchWithoutSession(t *testing.T) {
	t.Parallel()
	r := tools.NewRouter(setup(t))
	_, err := r.Dispatch(context.Background(), tools.Call{Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)})
	require.ErrorContains(t, err, "without a session")
}

func TestToolDefaults(t *testing.T) {
	t.Parallel()
	defaults := map[string]map[string]any{
		"write_file": {"content": "from defaults", "mode": 420},
		"read_file":  {"path": "default.txt"},
		"todo":       {"nonsense": true},
	}
	all := []string{"read_file", "write_file", "todo", "delegate"}
	tests := []struct {
		name     string
		call     tools.Call
		wantBody string
		wantErr  []string
	}{
		{name: "defaults fill what the model left out", call: tools.Call{Name: "write_file", Args: json.RawMessage(`{"path":"m.txt"}`)}, wantBody: `{Path:m.txt Content:from defaults Mode:420}`},
		{name: "model wins over defaults", call: tools.Call{Name: "write_file", Args: json.RawMessage(`{"path":"m.txt","content":"mine","mode":0}`)}, wantBody: `{Path:m.txt Content:mine Mode:0}`},
		{name: "a default can satisfy a required field", call: tools.Call{Name: "read_file"}, wantBody: `{Path:default.txt}`},
		{name: "null args take the defaults", call: tools.Call{Name: "read_file", Args: json.RawMessage(`null`)}, wantBody: `{Path:default.txt}`},
		{name: "tools without defaults are untouched", call: tools.Call{Name: "delegate", Args: json.RawMessage(`{"agent":"a","task":"t"}`)}, wantBody: `{Agent:a Task:t}`},
		{name: "non-object args with defaults are invalid", call: tools.Call{Name: "write_file", Args: json.RawMessage(`[1]`)}, wantErr: []string{"write_file", "arguments must be a JSON object"}},
		{name: "a default unknown to the tool is rejected like a model's", call: tools.Call{Name: "todo", Args: json.RawMessage(`{}`)}, wantErr: []string{`unknown field "nonsense"`}},
	}
	r := tools.NewRouter(setup(t))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := dispatch(r, session(all, defaults), tc.call)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tools.ErrInvalidArgs)
				for _, m := range tc.wantErr {
					require.ErrorContains(t, err, m)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantBody, res.Content)
		})
	}
}

// recorder is a middleware factory that logs entry and exit in order.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (rec *recorder) add(s string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.log = append(rec.log, s)
}

func (rec *recorder) mw(name string) tools.Middleware {
	return func(next tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
			rec.add(name + ">" + call.Name + "#" + call.ID)
			res, err := next.Handle(ctx, call)
			rec.add("<" + name)
			return res, err
		})
	}
}

func TestMiddlewareOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		call    tools.Call
		wantErr error
	}{
		{name: "successful call", call: tools.Call{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)}},
		// The capability check is innermost, so audit-style middleware sees refused calls too.
		{name: "refused call", call: tools.Call{ID: "c1", Name: "make_coffee"}, wantErr: tools.ErrUnknownTool},
		{name: "call outside the catalog", call: tools.Call{ID: "c1", Name: "write_file", Args: json.RawMessage(`{"path":"a"}`)}, wantErr: tools.ErrNotInCatalog},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			r := tools.NewRouter(setup(t), rec.mw("outer"), rec.mw("middle"), rec.mw("inner"))
			_, err := dispatch(r, session([]string{"read_file"}, nil), tc.call)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			n := tc.call.Name
			require.Equal(t, []string{"outer>" + n + "#c1", "middle>" + n + "#c1", "inner>" + n + "#c1", "<inner", "<middle", "<outer"}, rec.log)
		})
	}
}

func TestMiddlewareCanShortCircuit(t *testing.T) {
	t.Parallel()
	deny := errors.New("denied by policy")
	called := false
	reg := tools.NewRegistry()
	tools.Register(reg, "todo", "", func(context.Context, tools.Call, todoArgs) (tools.Result, error) {
		called = true
		return tools.Text("ran"), nil
	}, tools.InGroup("planning"))
	block := func(tools.Handler) tools.Handler {
		return tools.HandlerFunc(func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{}, deny })
	}
	r := tools.NewRouter(reg, block)
	require.Same(t, reg, r.Registry())
	_, err := dispatch(r, session([]string{"todo"}, nil), tools.Call{Name: "todo"})
	require.ErrorIs(t, err, deny)
	require.False(t, called)
}

func TestHandlerErrorsPassThrough(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	reg := tools.NewRegistry()
	tools.Register(reg, "todo", "", func(_ context.Context, call tools.Call, _ todoArgs) (tools.Result, error) {
		s := call.Session
		return tools.Result{}, fmt.Errorf("%s/%s: %w", s.Agent, call.ID, boom)
	}, tools.InGroup("planning"))
	_, err := dispatch(tools.NewRouter(reg), session([]string{"todo"}, nil), tools.Call{ID: "call_9", Name: "todo"})
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "writer/call_9: boom")
	require.NotErrorIs(t, err, tools.ErrInvalidArgs)
}

func TestResultHelpers(t *testing.T) {
	t.Parallel()
	require.Equal(t, tools.Result{Content: "step 2 is done"}, tools.Text("step %d is %s", 2, "done"))
	res, err := tools.JSON(map[string]int{"a": 1})
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, res.Content)
	_, err = tools.JSON(make(chan int))
	require.Error(t, err)
}

func TestAccessAllows(t *testing.T) {
	t.Parallel()
	a := tools.Access{Tools: []string{"read_file", "todo"}}
	require.True(t, a.Allows("todo"))
	require.False(t, a.Allows("write_file"))
	require.False(t, tools.Access{}.Allows("todo"))
}

func TestTierOf(t *testing.T) {
	t.Parallel()
	elevated := []string{"web_search", "web_fetch", "http_request", "http_health_check", "capture_reference", "run_shell", "read_logs", "spawn_subagents"}
	restricted := []string{"download_pdf", "frame_install", "frame_run", "frame_grab"}
	want := map[string]tools.Tier{}
	for _, n := range elevated {
		want[n] = tools.Elevated
	}
	for _, n := range restricted {
		want[n] = tools.Restricted
	}
	counts := map[tools.Tier]int{}
	for _, n := range tools.DesignTools() {
		t.Run(n, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, want[n], tools.TierOf(n)) // zero value is Standard
		})
		counts[tools.TierOf(n)]++
	}
	require.Equal(t, map[tools.Tier]int{tools.Standard: 34, tools.Elevated: 8, tools.Restricted: 4}, counts)
	require.Equal(t, tools.Standard, tools.TierOf("not_a_tool"))
	require.Equal(t, "standard", tools.Standard.String())
	require.Equal(t, "elevated", tools.Elevated.String())
	require.Equal(t, "restricted", tools.Restricted.String())
}

func TestDesignToolsAndGroups(t *testing.T) {
	t.Parallel()
	names := tools.DesignTools()
	require.Len(t, names, 46, "the seed's 44, read_result (issue 38) and ask_user (issue 40)")
	used := map[string]int{}
	for _, n := range names {
		g, ok := tools.GroupOf(n)
		require.True(t, ok, n)
		require.True(t, tools.IsGroup(g), "%s is in unknown group %s", n, g)
		used[g]++
	}
	require.Len(t, tools.Groups, 13)
	require.Len(t, used, 13, "every group holds at least one tool")
	groups := append([]string(nil), tools.Groups...)
	sort.Strings(groups)
	var got []string
	for g := range used {
		got = append(got, g)
	}
	sort.Strings(got)
	require.Equal(t, groups, got)
	require.Equal(t, 7, used["workspace"])
	require.Equal(t, 8, used["quality"])
	require.Equal(t, 3, used["orchestration"])

	_, ok := tools.GroupOf("make_coffee")
	require.False(t, ok)
	require.False(t, tools.IsGroup("kitchen"))
	require.False(t, tools.IsGroup(""))
}

func TestCatalogMatchesStaticMaps(t *testing.T) {
	t.Parallel()
	docs, err := tools.Catalog()
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	seen := map[string]bool{}
	for _, d := range docs {
		require.False(t, seen[d.Name], "%s documented twice", d.Name)
		seen[d.Name] = true
		g, ok := tools.GroupOf(d.Name)
		require.True(t, ok, "%s is documented but not a design tool", d.Name)
		require.Equal(t, g, d.Group, d.Name)
		require.Equal(t, tools.TierOf(d.Name).String(), d.Tier, d.Name)
		require.NotEmpty(t, d.Purpose, d.Name)
	}
}

// documentedRegistry registers every documented tool (with an empty argument struct)
// except skip.
func documentedRegistry(t *testing.T, skip string) *tools.Registry {
	t.Helper()
	docs, err := tools.Catalog()
	require.NoError(t, err)
	reg := tools.NewRegistry()
	for _, d := range docs {
		if d.Name != skip {
			tier, err := tools.ParseTier(d.Tier)
			require.NoError(t, err)
			opts := []tools.Option{tools.InGroup(d.Group), tools.WithTier(tier)}
			if d.AlwaysHuman {
				opts = append(opts, tools.AlwaysHuman())
			}
			reads, err := tools.ParseProvenance(d.Reads)
			require.NoError(t, err)
			opts = append(opts, tools.Reads(reads))
			tools.Register(reg, d.Name, d.Purpose, echo[struct{}], opts...)
		}
	}
	return reg
}

// catalogWithout is the documented catalog minus the named tools.
func catalogWithout(t *testing.T, names ...string) []tools.Documented {
	t.Helper()
	docs, err := tools.Catalog()
	require.NoError(t, err)
	var out []tools.Documented
	for _, d := range docs {
		if !slices.Contains(names, d.Name) {
			out = append(out, d)
		}
	}
	require.Len(t, out, len(docs)-len(names))
	return out
}

// catalogFlipped is the documented catalog with the named tools' always_human
// inverted.
func catalogFlipped(t *testing.T, names ...string) []tools.Documented {
	t.Helper()
	docs, err := tools.Catalog()
	require.NoError(t, err)
	for i := range docs {
		if slices.Contains(names, docs[i].Name) {
			docs[i].AlwaysHuman = !docs[i].AlwaysHuman
		}
	}
	return docs
}

// The tools only a person may approve are those the catalog and their
// registrations say: supervisor_fallback never approves them.
func TestNeverFallsBack(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	var human []string
	for _, n := range reg.Names() {
		s, ok := reg.Spec(n)
		require.True(t, ok)
		require.Equal(t, s.AlwaysHuman, tools.NeverFallsBack(n), n)
		if s.AlwaysHuman {
			human = append(human, n)
		}
	}
	slices.Sort(human)
	require.Equal(t, []string{"download_pdf", "frame_grab", "frame_install", "frame_run", "frame_status"}, human)
	require.False(t, tools.NeverFallsBack("no_such_tool"))
}

func TestCheckCatalog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		reg  func(t *testing.T) *tools.Registry
		docs func(t *testing.T) []tools.Documented // nil: the real catalog
		want []string
	}{
		{name: "every documented tool", reg: func(t *testing.T) *tools.Registry { return documentedRegistry(t, "") }},
		{name: "missing a documented tool", reg: func(t *testing.T) *tools.Registry { return documentedRegistry(t, "todo") }, want: []string{"todo is documented but not registered"}},
		{
			name: "an undocumented tool", reg: func(t *testing.T) *tools.Registry { return documentedRegistry(t, "") },
			docs: func(t *testing.T) []tools.Documented { return catalogWithout(t, "web_search") },
			want: []string{"web_search is registered but not documented"},
		},
		{
			name: "both problems at once",
			reg:  func(t *testing.T) *tools.Registry { return documentedRegistry(t, "reply") },
			docs: func(t *testing.T) []tools.Documented { return catalogWithout(t, "web_search") },
			want: []string{"reply is documented but not registered", "web_search is registered but not documented"},
		},
		{
			name: "always_human documented, not registered",
			reg:  func(t *testing.T) *tools.Registry { return documentedRegistry(t, "") },
			docs: func(t *testing.T) []tools.Documented { return catalogFlipped(t, "web_fetch", "frame_run") },
			want: []string{
				"web_fetch is registered with AlwaysHuman false, documented with always_human true",
				"frame_run is registered with AlwaysHuman true, documented with always_human false",
			},
		},
		{
			name: "reads documented otherwise",
			reg:  func(t *testing.T) *tools.Registry { return documentedRegistry(t, "") },
			docs: func(t *testing.T) []tools.Documented {
				docs := catalogWithout(t)
				for i := range docs {
					switch docs[i].Name {
					case "web_fetch":
						docs[i].Reads = ""
					case "write_file":
						docs[i].Reads = "private"
					case "todo":
						docs[i].Reads = "secret"
					}
				}
				return docs
			},
			want: []string{
				"web_fetch reads untrusted, documented as reading trusted",
				"write_file reads trusted, documented as reading private",
				`todo: tools: unknown provenance "secret"`,
			},
		},
		{name: "empty registry", reg: func(*testing.T) *tools.Registry { return tools.NewRegistry() }, want: []string{"read_file is documented", "spawn_subagents is documented"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.docs == nil {
				err = tools.CheckCatalog(tc.reg(t))
			} else {
				err = tools.CheckCatalogAgainst(tc.reg(t), tc.docs(t))
			}
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestToolsetPassesCatalogCheck(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	require.NoError(t, tools.CheckCatalog(reg))
	docs, err := tools.Catalog()
	require.NoError(t, err)
	require.Len(t, reg.Names(), len(docs))
}

// Every middleware (the gate's layers and the audit among them) sees the arguments
// that really run: the team's defaults are merged before the outermost one.
func TestDefaultsMergedBeforeMiddleware(t *testing.T) {
	t.Parallel()
	defaults := map[string]map[string]any{"write_file": {"content": "from defaults"}}
	tests := []struct {
		name string
		args string
		want string
	}{
		{name: "empty call takes the defaults", args: `{"path":"a"}`, want: `{"content":"from defaults","path":"a"}`},
		{name: "the model's value wins", args: `{"path":"a","content":"mine"}`, want: `{"content":"mine","path":"a"}`},
		{name: "malformed args reach the gate unmerged", args: `[1]`, want: `[1]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var seenOuter, seenInner string
			spy := func(into *string) tools.Middleware {
				return func(next tools.Handler) tools.Handler {
					return tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
						mu.Lock()
						*into = string(call.Args)
						mu.Unlock()
						return next.Handle(ctx, call)
					})
				}
			}
			r := tools.NewRouter(setup(t), spy(&seenOuter), spy(&seenInner))
			_, _ = dispatch(r, session([]string{"write_file"}, defaults), tools.Call{ID: "c1", Name: "write_file", Args: json.RawMessage(tc.args)})
			mu.Lock()
			defer mu.Unlock()
			require.JSONEq(t, tc.want, seenOuter)
			require.JSONEq(t, tc.want, seenInner)
		})
	}
}

// Adding a tool is one registration plus its catalog entry: a throwaway tool
// declared Restricted in the device group is grouped and shown by its
// registration alone, and the catalog check names it until it is documented.
// (security's TestAThrowawayToolIsGatedByItsRegistration sees the gate hold it.)
func TestAThrowawayToolIsDeclaredByItsRegistration(t *testing.T) {
	t.Parallel()
	reg := documentedRegistry(t, "")
	tools.Register(reg, "brew_coffee", "Brew a coffee on the headset's kitchen.", echo[struct{}],
		tools.InGroup("device"), tools.WithTier(tools.Restricted))

	spec, ok := reg.Spec("brew_coffee")
	require.True(t, ok)
	require.Equal(t, "device", spec.Group)
	require.Equal(t, tools.Restricted, spec.Tier)

	byGroup := reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"device"}})
	require.True(t, byGroup.Allows("brew_coffee"), "served with its group")
	byName := reg.Resolve(tools.Node{Role: "worker", Tools: []string{"brew_coffee"}})
	require.True(t, byName.Allows("brew_coffee"), "named alone, its group comes from the registration")
	require.False(t, reg.Resolve(tools.Node{Role: "worker", MCPServers: []string{"workspace"}}).Allows("brew_coffee"))
	var shown []string
	for _, d := range reg.Definitions(byGroup) {
		shown = append(shown, d.Name)
	}
	require.Contains(t, shown, "brew_coffee")

	require.ErrorContains(t, tools.CheckCatalog(reg), "brew_coffee is registered but not documented")
	docs, err := tools.Catalog()
	require.NoError(t, err)
	withEntry := append(docs, tools.Documented{Name: "brew_coffee", Group: "device", Tier: "restricted", Purpose: "coffee"})
	require.NoError(t, tools.CheckCatalogAgainst(reg, withEntry))
	wrongTier := append(docs, tools.Documented{Name: "brew_coffee", Group: "device", Tier: "standard", Purpose: "coffee"})
	require.ErrorContains(t, tools.CheckCatalogAgainst(reg, wrongTier), "brew_coffee has tier restricted, documented as standard")
}
