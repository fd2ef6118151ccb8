package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// metaServer is a server of the real registry (every shipped registration, as
// the api role builds it) with one profile of a few tools: New describes each
// of them, which is what the profile's listing shows.
func metaServer(t *testing.T) (*Server, *tools.Registry) {
	t.Helper()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: testdb.Redis(t)})
	h := events.NewHub(rdb, nil)
	t.Cleanup(func() { _ = h.Close(); _ = rdb.Close() })
	s, err := New(Config{Profiles: map[string]Profile{"ide": {Node: templates.Node{
		Tools: []string{"read_file", "write_file", "run_shell", "web_fetch", "web_search", "todo"},
	}}}}, Deps{Registry: reg, Hub: h})
	require.NoError(t, err)
	return s, reg
}

func TestToolMetadataFromRegistrations(t *testing.T) {
	t.Parallel()
	s, reg := metaServer(t)

	t.Run("hints", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			tool                                         string
			title                                        string
			readOnly, destructive, idempotent, openWorld bool
		}{
			{tool: "read_file", title: "Read file", readOnly: true, idempotent: true},
			// Overwrites whatever was there: destructive although Standard.
			{tool: "write_file", title: "Write file", destructive: true, idempotent: true},
			// Escalates its own destructive command lines, and may reach the network.
			{tool: "run_shell", title: "Run shell", destructive: true, openWorld: true},
			{tool: "web_fetch", title: "Web fetch", readOnly: true, idempotent: true, openWorld: true},
			// Restricted: a human looks first.
			{tool: "download_pdf", title: "Download PDF", destructive: true, openWorld: true},
			// PUT and DELETE change a remote service.
			{tool: "http_request", title: "HTTP request", destructive: true, openWorld: true},
			{tool: "frame_grab", title: "Frame grab", destructive: true, openWorld: true},
			{tool: "capture_api_schema", title: "Capture API schema", destructive: true, idempotent: true, openWorld: true},
			// The run's own scratch list: neither read-only nor destructive.
			{tool: "todo", title: "Todo", idempotent: true},
		} {
			t.Run(c.tool, func(t *testing.T) {
				t.Parallel()
				m, err := s.toolMeta(c.tool)
				require.NoError(t, err)
				require.Equal(t, c.title, m.Title)
				a := m.Annotations
				require.Equal(t, c.title, a.Title, "the annotation's title is the tool's")
				require.Equal(t, c.readOnly, a.ReadOnlyHint, "readOnlyHint")
				require.NotNil(t, a.DestructiveHint, "destructiveHint is always said: MCP defaults it to true")
				require.Equal(t, c.destructive, *a.DestructiveHint, "destructiveHint")
				require.Equal(t, c.idempotent, a.IdempotentHint, "idempotentHint")
				require.NotNil(t, a.OpenWorldHint, "openWorldHint is always said: MCP defaults it to true")
				require.Equal(t, c.openWorld, *a.OpenWorldHint, "openWorldHint")
			})
		}
	})

	t.Run("every registration", func(t *testing.T) {
		t.Parallel()
		for _, name := range reg.Names() {
			spec, _ := reg.Spec(name)
			m, err := describe(spec)
			require.NoError(t, err, name)
			require.NotEmpty(t, m.Title, name)
			require.Equal(t, strings.ToUpper(m.Title[:1]), m.Title[:1], "%s: a title starts with a capital", name)
			require.NotContains(t, m.Title, "_", name)
			require.Equal(t, spec.Tier.String(), m.Meta["aetherium/tier"], name)
			require.Equal(t, spec.Group, m.Meta["aetherium/group"], name)
			if m.Annotations.ReadOnlyHint {
				require.False(t, *m.Annotations.DestructiveHint, "%s: a read-only tool destroys nothing", name)
			}
			if m.OutputSchema != nil {
				require.Equal(t, "object", m.OutputSchema["type"], name)
				require.NotEmpty(t, m.OutputSchema["properties"], "%s: a result schema names the result's fields", name)
			}
		}
	})

	t.Run("output schema only where the result is JSON", func(t *testing.T) {
		t.Parallel()
		for tool, structured := range map[string]bool{"web_search": true, "web_fetch": true, "download_pdf": true, "frame_status": true,
			"read_file": false, "write_file": false, "run_shell": false} {
			m, err := s.toolMeta(tool)
			require.NoError(t, err)
			require.Equal(t, structured, m.OutputSchema != nil, tool)
		}
	})

	t.Run("the modern layer's JSON", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			tool   string
			output bool
		}{{"write_file", false}, {"web_fetch", true}} {
			m, err := s.toolMeta(c.tool)
			require.NoError(t, err)
			raw, err := json.Marshal(m.sdkTool())
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(raw, &got))
			for _, k := range []string{"name", "title", "description", "inputSchema", "annotations", "_meta"} {
				require.Contains(t, got, k, c.tool)
			}
			_, has := got["outputSchema"]
			require.Equal(t, c.output, has, c.tool)
			ann := got["annotations"].(map[string]any)
			require.Contains(t, ann, "readOnlyHint", "false hints are written: a client must not guess")
			require.Contains(t, ann, "destructiveHint")
		}
	})

	t.Run("the go-sdk listing", func(t *testing.T) {
		t.Parallel()
		// What a 2025 client lists: buildProfile's tools carry the same metadata.
		ct, st := mcp.NewInMemoryTransports()
		ctx := context.Background()
		ss, err := s.servers["ide"].Connect(ctx, st, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		res, err := cs.ListTools(ctx, nil)
		require.NoError(t, err)
		byName := map[string]*mcp.Tool{}
		for _, tool := range res.Tools {
			byName[tool.Name] = tool
		}
		require.Len(t, byName, 6)
		require.Equal(t, "Write file", byName["write_file"].Title)
		require.True(t, byName["read_file"].Annotations.ReadOnlyHint)
		require.True(t, *byName["run_shell"].Annotations.DestructiveHint)
		require.True(t, *byName["web_fetch"].Annotations.OpenWorldHint)
		require.NotNil(t, byName["web_search"].OutputSchema)
		require.Nil(t, byName["todo"].OutputSchema)
		require.Equal(t, "elevated", byName["run_shell"].Meta["aetherium/tier"])
	})
}

func TestValidateArgs(t *testing.T) {
	t.Parallel()
	s, _ := metaServer(t)
	for _, c := range []struct {
		name, tool, args string
		// wantErr are substrings of the error; none: the arguments are valid.
		wantErr []string
	}{
		{name: "valid", tool: "write_file", args: `{"path": "notes.md", "content": "hi"}`},
		{name: "valid with optional", tool: "read_file", args: `{"path": "a.go", "start_line": 2}`},
		{name: "empty is an empty object", tool: "list_files", args: ``},
		{name: "null is an empty object", tool: "write_file", args: `null`,
			wantErr: []string{`invalid arguments for write_file: missing properties "path", "content"`}},
		{name: "missing required", tool: "write_file", args: `{"content": "hi"}`,
			wantErr: []string{`invalid arguments for write_file: missing property "path"`}},
		{name: "wrong type", tool: "write_file", args: `{"path": 7, "content": "hi"}`,
			wantErr: []string{"invalid arguments for write_file: at /path: got number, want string"}},
		{name: "below the minimum", tool: "read_file", args: `{"path": "a", "start_line": 0}`,
			wantErr: []string{"at /start_line:", "minimum"}},
		// The reflected schemas forbid unknown properties, as the strict decode does.
		{name: "extra property", tool: "write_file", args: `{"path": "a", "content": "b", "mode": "0644"}`,
			wantErr: []string{`unknown property "mode"`}},
		{name: "not an object", tool: "write_file", args: `["a"]`,
			wantErr: []string{"got array, want object"}},
		{name: "not JSON", tool: "write_file", args: `{"path":`,
			wantErr: []string{"invalid arguments for write_file: not JSON"}},
		{name: "nested", tool: "spawn_subagents", args: `{"tasks": [{}]}`,
			wantErr: []string{"at /tasks/0: missing property"}},
		{name: "unknown tool", tool: "format_disk", args: `{}`, wantErr: []string{`unknown tool "format_disk"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := s.validateArgs(c.tool, json.RawMessage(c.args))
			if len(c.wantErr) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range c.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestStructuredResult(t *testing.T) {
	t.Parallel()
	reg, err := toolbox.New(toolbox.Deps{})
	require.NoError(t, err)
	fetch, _ := reg.Spec("web_fetch")
	read, _ := reg.Spec("read_file")
	for _, c := range []struct {
		name    string
		spec    *tools.Spec
		isError bool
		text    string
		want    map[string]any
	}{
		{name: "a declared JSON result", spec: fetch, text: `{"url": "https://a.example/"}`, want: map[string]any{"url": "https://a.example/"}},
		{name: "an error", spec: fetch, isError: true, text: `{"url": "x"}`},
		// The worker shortens a large result: it is no longer the object.
		{name: "a shortened result", spec: fetch, text: `{"url": "https://a.exa… [truncated]`},
		{name: "a text tool", spec: read, text: `{"a": 1}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, structured(c.spec, c.isError, c.text))
		})
	}
}
