package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/comms"
	"github.com/aetherium-engine/aetherium/toolbox/device"
	"github.com/aetherium-engine/aetherium/toolbox/orchestration"
	"github.com/aetherium-engine/aetherium/toolbox/planning"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// probe registers name with the real argument type A of the shipped tool and a
// handler that records the decoded arguments.
func probe[A any](reg *tools.Registry, name string, got *any) {
	group, _ := tools.GroupOf(name)
	tools.Register(reg, name, "fuzz probe", func(_ context.Context, call tools.Call, a A) (tools.Result, error) {
		*got = a
		return tools.Text("ok"), nil
	}, tools.InGroup(group))
}

// FuzzDispatchArgs sends arbitrary arguments — and arbitrary team tool_defaults,
// which an inline team supplies — through the router to tools with the shipped
// argument types. A call either reaches its handler with arguments that decode
// back the same way, or fails with ErrInvalidArgs without reaching it.
func FuzzDispatchArgs(f *testing.F) {
	names := []string{"create_plan", "update_plan", "todo", "edit_file", "search_files", "spawn_subagents", "report_progress", "frame_run", "delegate"}
	var got any
	reg := tools.NewRegistry()
	probe[planning.CreateArgs](reg, "create_plan", &got)
	probe[planning.UpdateArgs](reg, "update_plan", &got)
	probe[planning.TodoArgs](reg, "todo", &got)
	probe[workspace.EditArgs](reg, "edit_file", &got)
	probe[workspace.SearchArgs](reg, "search_files", &got)
	probe[orchestration.SpawnArgs](reg, "spawn_subagents", &got)
	probe[comms.ProgressArgs](reg, "report_progress", &got)
	probe[device.RunArgs](reg, "frame_run", &got)
	probe[orchestration.DelegateArgs](reg, "delegate", &got)
	router := tools.NewRouter(reg)

	for i, s := range []struct{ args, defaults string }{
		{`{"goal":"g","steps":["a","b"]}`, ``},
		{`{"step":1,"status":"completed"}`, `{"result":"default"}`},
		{`{"action":"read"}`, `{"items":["x"]}`},
		{`{"path":"a.txt","search":"x","replace":"y","start_line":2}`, `{"path":"default.txt"}`},
		{`{"pattern":"*.go","query":"TODO"}`, ``},
		{`{"tasks":[{"task":"t","tools":["todo"]}]}`, ``},
		{`{"percent":50}`, `{"message":"m"}`},
		{`{"max_seconds":1e308}`, ``},
		{`{"agent":"w","task":"t","agent":"x"}`, ``},
		{`null`, `{"agent":"w","task":"t"}`},
		{``, ``},
		{`[]`, ``},
		{`{"step":"1"}`, ``},
		{`{"step":1.5,"status":"x"}`, ``},
		{`{"action":"read","unknown":1}`, ``},
		{`{"percent":99999999999999999999}`, ``},
		{`{"action":"read"} {"x":1}`, ``},
		{`{"action":"read"}`, `{"action":7}`},
		{`"\ud800"`, ``},
	} {
		f.Add(uint8(i), []byte(s.args), []byte(s.defaults))
	}
	f.Fuzz(func(t *testing.T, which uint8, raw, defaults []byte) {
		name := names[int(which)%len(names)]
		var defs map[string]any
		if json.Unmarshal(defaults, &defs) != nil {
			defs = nil
		}
		sess := &tools.Session{
			RunID: "r", SessionID: "s", Agent: "a", Role: "worker",
			Access:       tools.Access{Tools: names},
			ToolDefaults: map[string]map[string]any{name: defs},
		}
		got = nil
		res, err := router.Dispatch(context.Background(), tools.Call{ID: "c", Name: name, Args: raw, Session: sess})
		if err != nil {
			require.ErrorIs(t, err, tools.ErrInvalidArgs, "a refused call names the invalid arguments")
			require.Nil(t, got, "the handler ran although the call failed")
			return
		}
		require.Equal(t, "ok", res.Content)
		require.NotNil(t, got, "the handler did not run")
		// What the handler received is a plain value of the schema: it encodes, and
		// decodes strictly into the same type again.
		enc, err := json.Marshal(got)
		require.NoError(t, err)
		again, err := router.Dispatch(context.Background(), tools.Call{ID: "c2", Name: name, Args: enc, Session: &tools.Session{
			RunID: "r", SessionID: "s", Agent: "a", Role: "worker", Access: tools.Access{Tools: names},
		}})
		if err != nil && errors.Is(err, tools.ErrInvalidArgs) {
			// A required field decoded to its zero value is omitted by omitempty
			// (e.g. an empty string): the re-encoding may then lack it.
			require.Contains(t, err.Error(), "missing required field")
			return
		}
		require.NoError(t, err)
		require.Equal(t, "ok", again.Content)
		// The model's own arguments win over the team's defaults.
		var model map[string]json.RawMessage
		if json.Unmarshal(raw, &model) == nil && len(model) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			var seen map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(enc, &seen))
			// encoding/json matches keys case-insensitively, so of "agent" and
			// "AGENT" the later one wins: only keys without such a twin are compared.
			folded := map[string]int{}
			for k := range model {
				folded[strings.ToLower(k)]++
			}
			for k := range defs {
				if _, ok := model[k]; !ok {
					folded[strings.ToLower(k)]++
				}
			}
			for k, v := range model {
				if folded[strings.ToLower(k)] > 1 {
					continue
				}
				if sv, ok := seen[k]; ok {
					var a, b any
					if json.Unmarshal(v, &a) == nil && json.Unmarshal(sv, &b) == nil {
						require.Equal(t, normalize(t, a), normalize(t, b), "field %q: the model's value must win", k)
					}
				}
			}
		}
	})
}

// normalize re-encodes a decoded JSON value so numbers compare as the struct
// field saw them (an int field turns 1.0 into 1).
func normalize(t *testing.T, v any) string {
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return string(raw)
}
