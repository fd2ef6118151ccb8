package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

func setup(t *testing.T) *fleettest.Fleet {
	t.Helper()
	// The hooks' limit too: the listener reads a body up to the larger of the
	// two before a route refuses it, and "oversized body" is refused unread.
	return fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) { c.API.BodyLimit, c.API.Hooks.BodyLimit = 64<<10, 64<<10 }})
}

func TestBadInputGetsClearJSONErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cases := []struct {
		name, method, path string
		body               any
		code               int
		errHas, field      string
	}{
		{"malformed json", "POST", "/api/orchestrator/run-from-template", `{"template": "demo",`, 400, "malformed JSON", ""},
		{"not an object", "POST", "/api/orchestrator/run-from-template", `[1,2]`, 400, "must be", ""},
		{"empty body", "POST", "/api/orchestrator/run", ``, 400, "empty", ""},
		{"NUL in the prompt", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"a\u0000b","variables":{"topic":"x"}}`, 400, "NUL character", ""},
		{"NUL in a team", "POST", "/api/orchestrator/run", `{"prompt":"x","team":{"name":"t\u0000"}}`, 400, "NUL character", ""},
		{"trailing data", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x"} {}`, 400, "trailing", ""},
		{"unknown field", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x","colour":1}`, 400, "unknown field", "colour"},
		{"wrong type", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":7}`, 400, "must be string", "prompt"},
		{"missing prompt", "POST", "/api/orchestrator/run-from-template", `{"template":"demo"}`, 400, "prompt is required", "prompt"},
		{"missing template", "POST", "/api/orchestrator/run-from-template", `{"prompt":"x"}`, 400, "template is required", "template"},
		{"unknown template", "POST", "/api/orchestrator/run-from-template", `{"template":"nope","prompt":"x"}`, 404, "unknown template", "template"},
		{"traversal template", "POST", "/api/orchestrator/run-from-template", `{"template":"../etc/passwd","prompt":"x"}`, 404, "unknown template", "template"},
		{"missing variable", "POST", "/api/orchestrator/run-from-template", `{"template":"demo","prompt":"x"}`, 400, "topic", "variables"},
		{"missing team", "POST", "/api/orchestrator/run", `{"prompt":"x"}`, 400, "team is required", "team"},
		{"oversized body", "POST", "/api/orchestrator/run", declaredBody(70 << 10), 413, "byte limit", ""},
		{"bad run id", "GET", "/api/runs/not-a-uuid", nil, 400, "not a UUID", "id"},
		{"unknown run", "GET", "/api/runs/7d444840-9dc0-11d1-b245-5ffdce74fad2", nil, 404, "not found", "id"},
		{"bad status filter", "GET", "/api/runs?status=sleeping", nil, 400, "status", "status"},
		{"bad limit", "GET", "/api/runs?limit=0", nil, 400, "limit", "limit"},
		{"bad cursor", "GET", "/api/runs?cursor=x", nil, 400, "cursor", "cursor"},
		{"search too long", "GET", "/api/runs?q=" + strings.Repeat("a", 201), nil, 400, "at most 200", "q"},
		{"search with NUL", "GET", "/api/runs?q=a%00b", nil, 400, "NUL", "q"},
		{"search not UTF-8", "GET", "/api/runs?q=%ff%fe", nil, 400, "UTF-8", "q"},
		{"bad last event id", "GET", "/api/runs/7d444840-9dc0-11d1-b245-5ffdce74fad2/events", nil, 404, "not found", "id"},
		{"unknown route", "GET", "/api/nothing", nil, 404, "no route", ""},
		{"bad schema role", "GET", "/api/tools/mcp-schemas?role=god", nil, 400, "role", "role"},
		{"bad schema group", "GET", "/api/tools/mcp-schemas?servers=shell2", nil, 400, "unknown server group", "servers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out struct {
				Error string `json:"error"`
				Field string `json:"field"`
			}
			var code int
			var raw []byte
			if n, ok := tc.body.(declaredBody); ok {
				code, raw = sendHeadersOnly(t, f, tc.method, tc.path, int(n))
				require.NoError(t, json.Unmarshal(raw, &out), string(raw))
			} else {
				code, raw = f.Do(tc.method, tc.path, tc.body, &out)
			}
			require.Equal(t, tc.code, code, string(raw))
			require.Contains(t, out.Error, tc.errHas)
			require.Equal(t, tc.field, out.Field)
		})
	}
}

// declaredBody is a request body of this many bytes that is declared
// (Content-Length) but never sent.
type declaredBody int

// sendHeadersOnly sends a request's line and headers declaring a body of n bytes
// and reads the answer without sending the body. The API refuses an oversized
// body on its declared length and closes the connection; a client still writing
// the body then may see a broken pipe instead of the answer (a flake of the cold
// CI machine), so the refusal is read on a connection that writes nothing more.
func sendHeadersOnly(t *testing.T, f *fleettest.Fleet, method, path string, n int) (int, []byte) {
	t.Helper()
	u, err := url.Parse(f.URL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, path, u.Host, n)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

func TestInvalidInlineTeamListsEveryProblem(t *testing.T) {
	t.Parallel()
	f := setup(t)
	team := map[string]any{
		"name":       "broken",
		"model":      map[string]any{"provider": "script"},
		"supervisor": map[string]any{"name": "boss", "mcp_servers": []string{"planning", "telepathy"}},
		"workers": []map[string]any{
			{"name": "w", "mcp_servers": []string{"workspace"}, "tools": []string{"teleport"}},
			{"name": "w", "mcp_servers": []string{"workspace"}},
		},
		"script": map[string]any{"agents": map[string]any{"ghost": []map[string]any{{"say": "boo"}}}},
	}
	var out struct{ Error, Field string }
	code, raw := f.Do("POST", "/api/orchestrator/run", map[string]any{"prompt": "x", "team": team}, &out)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
	require.Equal(t, "team", out.Field)
	for _, want := range []string{`unknown server group "telepathy"`, `unknown tool "teleport"`, `duplicate agent name "w"`, `"ghost" is not an agent`} {
		require.Contains(t, out.Error, want)
	}
	// Nothing was stored for a rejected request.
	var list struct {
		Runs []map[string]any `json:"runs"`
	}
	code, _ = f.Do("GET", "/api/runs", nil, &list)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, list.Runs)
}

func TestListRunsSearch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pelican := f.Submit("demo", "Write about the Pelican migration", map[string]any{"topic": "t"})
	other := f.Submit("demo", "Something else, 100% different_one", map[string]any{"topic": "t"})
	cases := []struct {
		name, q string
		want    []string
	}{
		{"a word of the prompt, any case", "pelican", []string{pelican}},
		{"the template name", "demo", []string{other, pelican}},
		{"a run id prefix", other[:8], []string{other}},
		{"LIKE wildcards are plain text", "100%", []string{other}},
		{"an underscore is plain text (as a wildcard it would match \"te ab\")", "te_ab", []string{}},
		{"no match", "albatross", []string{}},
		{"empty matches everything", "", []string{other, pelican}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var page struct {
				Runs []struct {
					ID string `json:"id"`
				} `json:"runs"`
			}
			code, raw := f.Do("GET", "/api/runs?q="+url.QueryEscape(c.q), nil, &page)
			require.Equal(t, http.StatusOK, code, string(raw))
			got := []string{}
			for _, r := range page.Runs {
				got = append(got, r.ID)
			}
			require.Equal(t, c.want, got)
		})
	}
}

// A run listing narrows by team, project and kind; an MCP client's session run
// says it is one.
func TestListRunsFilters(t *testing.T) {
	t.Parallel()
	f := setup(t)
	demo := f.Submit("demo", "a demo run", map[string]any{"topic": "t"})
	mcpRun, err := f.Store.EnsureMCPRun(context.Background(), "local", "ide", json.RawMessage(`{"name":"mcp:ide"}`), "")
	require.NoError(t, err)
	cases := []struct {
		name, query string
		want        []string
		kinds       []string
	}{
		{"every run", "", []string{mcpRun.ID, demo}, []string{"mcp", "job"}},
		{"jobs", "kind=job", []string{demo}, []string{"job"}},
		{"MCP sessions", "kind=mcp", []string{mcpRun.ID}, []string{"mcp"}},
		{"a team by its template", "team=demo", []string{demo}, []string{"job"}},
		{"a team that ran nothing", "team=nobody", []string{}, []string{}},
		{"a project with no runs", "project=elsewhere", []string{}, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var page struct {
				Runs []struct {
					ID   string `json:"id"`
					Kind string `json:"kind"`
				} `json:"runs"`
			}
			code, raw := f.Do("GET", "/api/runs?"+c.query, nil, &page)
			require.Equal(t, http.StatusOK, code, string(raw))
			ids, kinds := []string{}, []string{}
			for _, r := range page.Runs {
				ids, kinds = append(ids, r.ID), append(kinds, r.Kind)
			}
			require.Equal(t, c.want, ids)
			require.Equal(t, c.kinds, kinds)
		})
	}
	code, raw := f.Do("GET", "/api/runs?kind=robot", nil, nil)
	require.Equal(t, http.StatusBadRequest, code, string(raw))
}

func TestListRunsPages(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, f.Submit("demo", "x", map[string]any{"topic": "t"}))
	}
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		var page struct {
			Runs []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"runs"`
			NextCursor string `json:"next_cursor"`
		}
		path := "/api/runs?status=queued&limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		code, raw := f.Do("GET", path, nil, &page)
		require.Equal(t, http.StatusOK, code, string(raw))
		pages++
		for _, r := range page.Runs {
			require.False(t, seen[r.ID], "run listed twice")
			require.Equal(t, "queued", r.Status)
			seen[r.ID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Len(t, seen, 5)
	require.Equal(t, 3, pages)
	for _, id := range ids {
		require.True(t, seen[id])
	}
}

func TestSchemasFilteredLikeTheRouter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	names := func(q string) []string {
		var out struct {
			Tools []struct {
				Name string `json:"name"`
				Tier string `json:"tier"`
			} `json:"tools"`
		}
		code, raw := f.Do("GET", "/api/tools/mcp-schemas"+q, nil, &out)
		require.Equal(t, http.StatusOK, code, string(raw))
		var n []string
		for _, t := range out.Tools {
			n = append(n, t.Name)
		}
		return n
	}
	all := names("")
	require.Contains(t, all, "spawn_subagents")
	require.Equal(t, []string{"edit_file", "list_files", "read_file", "read_result", "revert_file", "search_files", "write_file"}, names("?servers=workspace"))
	require.Equal(t, []string{"write_file"}, names("?servers=workspace&tools=write_file"))
	// A tool's own group is served even when mcp_servers omits it.
	require.Equal(t, []string{"todo", "write_file"}, names("?servers=workspace&tools=write_file,todo"))
	// Supervisors always get delegate and reply.
	require.Equal(t, []string{"delegate", "reply", "todo"}, names("?role=supervisor&tools=todo"))
	require.Equal(t, []string{"todo"}, names("?role=worker&tools=todo"))
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	f := setup(t)
	code, raw := f.Do("GET", "/healthz", nil, nil)
	require.Equal(t, 200, code, string(raw))
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	code, raw = f.Do("GET", "/readyz", nil, &ready)
	require.Equal(t, 200, code, string(raw))
	require.Equal(t, map[string]string{"postgres": "ok", "redis": "ok"}, ready.Checks)
	code, raw = f.Do("GET", "/metrics", nil, nil)
	require.Equal(t, 200, code)
	require.Contains(t, string(raw), "aetherium_http_requests_total")
	code, raw = f.Do("GET", "/monitoring/", nil, nil)
	require.Equal(t, 200, code)
	require.Contains(t, strings.ToLower(string(raw)), "<html")
}
