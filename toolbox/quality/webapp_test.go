package quality_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/tools"
)

// runWebTool dispatches validate_web_app or capture_api_schema in a session
// whose workspace is ws. The egress client has the default policy, which allows
// loopback (private) destinations without an allowlist entry, as a run's
// localhost app is.
func runWebTool(t *testing.T, cfg quality.WebAppConfig, ws, tool string, args any) (string, error) {
	t.Helper()
	deps := quality.WebAppDeps{Egress: egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second})}
	return dispatchWebTool(t, deps, cfg, "r", ws, tool, args)
}

// dispatchWebTool dispatches a web app tool in run runID with deps.
func dispatchWebTool(t *testing.T, deps quality.WebAppDeps, cfg quality.WebAppConfig, runID, ws, tool string, args any) (string, error) {
	t.Helper()
	reg := tools.NewRegistry()
	quality.RegisterWebApp(reg, deps, cfg)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	s := &tools.Session{AllowedDomains: []string{"127.0.0.1"}, RunID: runID, SessionID: "s", Agent: "qa", Role: "worker", Workspace: ws,
		Access: tools.Access{Tools: []string{"validate_web_app", "capture_api_schema"}}}
	res, err := tools.NewRouter(reg).Dispatch(context.Background(), tools.Call{ID: "c1", Name: tool, Args: raw, Session: s})
	return res.Content, err
}

// usersDoc is the healthy app's published document: users with an integer id, a
// name and an email; creating one needs a name; a health path.
const usersDoc = `{
  "openapi": "3.0.3",
  "info": {"title": "users", "version": "1.0.0"},
  "paths": {
    "/api/users": {
      "get": {"responses": {"200": {"description": "the users", "content": {"application/json": {"schema": {
        "type": "array", "items": {"$ref": "#/components/schemas/User"}}}}}}},
      "post": {
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "email": {"type": "string"}}}}}},
        "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/User"}}}}}
      }
    },
    "/api/health": {"get": {"responses": {"200": {"description": "ok"}}}}
  },
  "components": {"schemas": {"User": {"type": "object", "required": ["id", "name"], "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "email": {"type": "string"}}}}}
}`

// brokenDoc plants the breaking changes: the health path is gone, a user's id
// became a string and its email vanished, and creating one now needs an email.
const brokenDoc = `{
  "openapi": "3.0.3",
  "info": {"title": "users", "version": "2.0.0"},
  "paths": {
    "/api/users": {
      "get": {"responses": {"200": {"description": "the users", "content": {"application/json": {"schema": {
        "type": "array", "items": {"$ref": "#/components/schemas/User"}}}}}}},
      "post": {
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "required": ["name", "email"], "properties": {"name": {"type": "string"}, "email": {"type": "string"}}}}}},
        "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/User"}}}}}
      }
    }
  },
  "components": {"schemas": {"User": {"type": "object", "required": ["id", "name"], "properties": {
    "id": {"type": "string"}, "name": {"type": "string"}}}}}
}`

// treeDoc is a recursive schema: a node links its parent, two children and a
// list of children, all nodes. valueType is its value's type.
func treeDoc(valueType string) string {
	return `{"openapi": "3.0.3", "info": {"title": "tree", "version": "1"},
  "paths": {"/api/tree": {"get": {"responses": {"200": {"description": "the tree", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}}}},
  "components": {"schemas": {"Node": {"type": "object", "properties": {
    "value": {"type": "` + valueType + `"},
    "parent": {"$ref": "#/components/schemas/Node"}, "left": {"$ref": "#/components/schemas/Node"},
    "right": {"$ref": "#/components/schemas/Node"},
    "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}}}`
}

const usersJSON = `[{"id": 1, "name": "Ada", "email": "ada@example.test"}, {"id": 2, "name": "Grace", "email": "grace@example.test"}]`

// fixtureApp serves a small web app on loopback. doc is its published OpenAPI
// document ("" publishes none); users is GET /api/users's body.
func fixtureApp(t *testing.T, doc, users string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	if doc != "" {
		mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(doc))
		})
	}
	// A Swagger UI page where a document might be: HTML, not a document.
	mux.HandleFunc("GET /api-docs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>Swagger UI</title>"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>app</title><h1>hello</h1>"))
	})
	mux.HandleFunc("GET /api/users", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(users))
	})
	mux.HandleFunc("GET /api/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"count": 2, "ratio": 0.5, "by_day": [{"day": "mon", "n": 1}, {"day": "tue", "n": 1.5}], "note": null}`))
	})
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	// Planted failures.
	mux.HandleFunc("GET /boom", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal error", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /wrong-type", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(usersJSON))
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(400 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	})
	mux.HandleFunc("GET /huge", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[` + strings.Repeat(`{"id": 1},`, 20000) + `{"id": 1}]`))
	})
	mux.HandleFunc("GET /to-metadata", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("GET /to-self", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/health", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func decode[T any](t *testing.T, content string) T {
	t.Helper()
	var v T
	// validate_web_app follows its JSON line with a table for people.
	line, _, _ := strings.Cut(content, "\n")
	if strings.HasPrefix(strings.TrimSpace(content), "{\n") {
		line = content
	}
	require.NoError(t, json.Unmarshal([]byte(line), &v), content)
	return v
}

func loadSaved(t *testing.T, ws, rel string) *openapi3.T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(ws, rel))
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(data)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	return doc
}

func TestCaptureAPISchemaPublished(t *testing.T) {
	t.Parallel()
	app := fixtureApp(t, usersDoc, usersJSON)
	ws := t.TempDir()
	out, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{"base_url": app.URL})
	require.NoError(t, err)
	rep := decode[quality.APISchemaReport](t, out)
	require.Equal(t, "openapi", rep.Source)
	require.Equal(t, app.URL+"/openapi.json", rep.DocumentURL)
	require.Equal(t, "3.0.3", rep.SpecVersion)
	require.True(t, rep.Valid, rep.ValidationError)
	require.Equal(t, "api-schema.json", rep.Saved)
	require.Equal(t, 2, rep.Paths)
	require.Equal(t, 3, rep.Operations)
	doc := loadSaved(t, ws, "api-schema.json")
	require.NotNil(t, doc.Paths.Value("/api/users").Post)
}

func TestCaptureAPISchemaInferred(t *testing.T) {
	t.Parallel()
	users := `[{"id": 1, "name": "Ada", "email": null, "tags": ["a"], "owner": {"id": 7}},
	           {"id": 2, "name": "Grace", "email": "g@example.test", "tags": [], "owner": {"id": 8, "admin": true}}]`
	app := fixtureApp(t, "", users)
	ws := t.TempDir()
	out, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{
		"base_url": app.URL, "paths": []string{"/api/users", "/api/stats", "/boom"}, "out": "schemas/v1.json"})
	require.NoError(t, err)
	rep := decode[quality.APISchemaReport](t, out)
	require.Equal(t, "inferred", rep.Source)
	require.True(t, rep.Valid, rep.ValidationError)
	require.Equal(t, "schemas/v1.json", rep.Saved)
	require.Equal(t, 2, rep.Paths)
	// The failing path is reported, not silently dropped.
	last := rep.Probes[len(rep.Probes)-1]
	require.Equal(t, quality.APIProbe{Path: "/boom", Status: 500, ContentType: "text/plain", Error: "not a success status"}, last)

	doc := loadSaved(t, ws, "schemas/v1.json")
	list := doc.Paths.Value("/api/users").Get.Responses.Value("200").Value.Content.Get("application/json").Schema.Value
	require.True(t, list.Type.Is("array"))
	user := list.Items.Value
	require.True(t, user.Type.Is("object"))
	// email was null once: present but not required, and nullable.
	require.Equal(t, []string{"id", "name", "owner", "tags"}, user.Required)
	require.True(t, user.Properties["id"].Value.Type.Is("integer"))
	require.True(t, user.Properties["email"].Value.Type.Is("string"))
	require.True(t, user.Properties["email"].Value.Nullable)
	require.True(t, user.Properties["tags"].Value.Items.Value.Type.Is("string"))
	owner := user.Properties["owner"].Value
	require.Equal(t, []string{"id"}, owner.Required)
	require.True(t, owner.Properties["admin"].Value.Type.Is("boolean"))

	stats := doc.Paths.Value("/api/stats").Get.Responses.Value("200").Value.Content.Get("application/json").Schema.Value
	require.True(t, stats.Properties["ratio"].Value.Type.Is("number"))
	// 1 and 1.5 across the array's items widen to number.
	require.True(t, stats.Properties["by_day"].Value.Items.Value.Properties["n"].Value.Type.Is("number"))
	require.Equal(t, []string{"by_day", "count", "ratio"}, stats.Required)
}

func TestCaptureAPISchemaCompare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		old  string // compare_to's content
		doc  string // the app's published document now
		want []quality.APIBreak
	}{
		{name: "unchanged", old: usersDoc, doc: usersDoc, want: []quality.APIBreak{}},
		{name: "planted breaks", old: usersDoc, doc: brokenDoc, want: []quality.APIBreak{
			{Kind: quality.BreakMissingPath, Path: "/api/health"},
			{Kind: quality.BreakChangedType, Path: "GET /api/users", Field: "response 200: [].id", Was: "integer", Now: "string"},
			{Kind: quality.BreakMissingField, Path: "GET /api/users", Field: "response 200: [].email", Was: "string"},
			{Kind: quality.BreakNewRequiredField, Path: "POST /api/users", Field: "request: email", Was: "optional", Now: "required"},
			{Kind: quality.BreakChangedType, Path: "POST /api/users", Field: "response 201: id", Was: "integer", Now: "string"},
			{Kind: quality.BreakMissingField, Path: "POST /api/users", Field: "response 201: email", Was: "string"},
		}},
		// A recursive schema is compared once per pair of schemas, not once per
		// path to the depth limit (4^24 of them here).
		{name: "recursive schema", old: treeDoc("integer"), doc: treeDoc("string"), want: []quality.APIBreak{
			{Kind: quality.BreakChangedType, Path: "GET /api/tree", Field: "response 200: value", Was: "integer", Now: "string"},
		}},
		// Additions break no client.
		{name: "additions only", old: brokenDoc, doc: usersDoc, want: []quality.APIBreak{
			{Kind: quality.BreakChangedType, Path: "GET /api/users", Field: "response 200: [].id", Was: "string", Now: "integer"},
			{Kind: quality.BreakChangedType, Path: "POST /api/users", Field: "response 201: id", Was: "string", Now: "integer"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := fixtureApp(t, tc.doc, usersJSON)
			ws := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(ws, "agreed.json"), []byte(tc.old), 0o644))
			out, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{"base_url": app.URL, "compare_to": "agreed.json"})
			require.NoError(t, err)
			rep := decode[quality.APISchemaReport](t, out)
			require.Equal(t, "agreed.json", rep.ComparedTo)
			require.ElementsMatch(t, tc.want, rep.Breaking)
		})
	}
}

// An inferred schema compares with a later inferred one (the saved format is
// the compare_to format), and compare_to may be the file being replaced.
func TestCaptureAPISchemaInferredCompare(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	before := fixtureApp(t, "", usersJSON)
	_, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{"base_url": before.URL, "paths": []string{"/api/users", "/api/stats"}})
	require.NoError(t, err)
	after := fixtureApp(t, "", `[{"id": "u1", "name": "Ada"}]`)
	out, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{
		"base_url": after.URL, "paths": []string{"/api/users"}, "compare_to": "api-schema.json"})
	require.NoError(t, err)
	rep := decode[quality.APISchemaReport](t, out)
	require.ElementsMatch(t, []quality.APIBreak{
		{Kind: quality.BreakMissingPath, Path: "/api/stats"},
		{Kind: quality.BreakChangedType, Path: "GET /api/users", Field: "response 200: [].id", Was: "integer", Now: "string"},
		{Kind: quality.BreakMissingField, Path: "GET /api/users", Field: "response 200: [].email", Was: "string"},
	}, rep.Breaking)
	// The new capture replaced the old file.
	require.Equal(t, 1, loadSaved(t, ws, "api-schema.json").Paths.Len())
}

func TestCaptureAPISchemaRefusals(t *testing.T) {
	t.Parallel()
	app := fixtureApp(t, "", usersJSON)
	other := fixtureApp(t, "", usersJSON)
	ws := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ws, "notes.json"), []byte(`{"hello": "world"}`), 0o644))
	for _, tc := range []struct {
		name string
		args map[string]any
		cfg  quality.WebAppConfig
		want string
	}{
		{name: "file URL", args: map[string]any{"base_url": "file:///etc/passwd"}, want: `only http and https URLs are checked (scheme "file")`},
		{name: "ftp URL", args: map[string]any{"base_url": "ftp://127.0.0.1/"}, want: `scheme "ftp"`},
		{name: "credentials", args: map[string]any{"base_url": "http://u:p@127.0.0.1/"}, want: "carries credentials"},
		{name: "no host", args: map[string]any{"base_url": "http:///x"}, want: "has no host"},
		{name: "out climbs", args: map[string]any{"base_url": app.URL, "paths": []string{"/api/users"}, "out": "../x.json"}, want: "out:"},
		{name: "out absolute", args: map[string]any{"base_url": app.URL, "paths": []string{"/api/users"}, "out": "/etc/x.json"}, want: "is absolute"},
		{name: "out not json", args: map[string]any{"base_url": app.URL, "paths": []string{"/api/users"}, "out": "schema.txt"}, want: "must be a .json file"},
		{name: "compare_to climbs", args: map[string]any{"base_url": app.URL, "compare_to": "../../etc/passwd"}, want: "compare_to:"},
		{name: "compare_to missing", args: map[string]any{"base_url": app.URL, "compare_to": "nope.json"}, want: "nope.json does not exist"},
		{name: "compare_to not a schema", args: map[string]any{"base_url": app.URL, "compare_to": "notes.json"}, want: "no openapi: 3.x or swagger: 2.0 field"},
		{name: "path is a URL", args: map[string]any{"base_url": app.URL, "paths": []string{other.URL + "/api/users"}}, want: "is a URL"},
		{name: "too many paths", args: map[string]any{"base_url": app.URL, "paths": []string{"/a", "/b", "/c"}}, cfg: quality.WebAppConfig{MaxPaths: 2}, want: "3 paths, the limit is 2"},
		{name: "no document, no paths", args: map[string]any{"base_url": app.URL}, want: "publishes no OpenAPI document"},
		{name: "nothing JSON", args: map[string]any{"base_url": app.URL, "paths": []string{"/boom", "/api/health"}}, want: "/boom (HTTP 500 text/plain: not a success status); /api/health (HTTP 200 text/plain: not a JSON response)"},
		{name: "huge response", args: map[string]any{"base_url": app.URL, "paths": []string{"/huge"}}, cfg: quality.WebAppConfig{MaxBodyBytes: 64 << 10}, want: "response body over the size limit"},
		{name: "redirect to metadata", args: map[string]any{"base_url": app.URL, "paths": []string{"/to-metadata"}}, want: "link-local or metadata address"},
		{name: "unreachable", args: map[string]any{"base_url": "http://127.0.0.1:1"}, want: "the app does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runWebTool(t, tc.cfg, ws, "capture_api_schema", tc.args)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(ws), "x.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestValidateWebApp(t *testing.T) {
	t.Parallel()
	app := fixtureApp(t, usersDoc, usersJSON)
	userSchema := map[string]any{
		"type": "array",
		"items": map[string]any{"type": "object", "required": []string{"id", "name"},
			"properties": map[string]any{"id": map[string]any{"type": "integer"}, "name": map[string]any{"type": "string"}}},
	}
	type row struct{ check, path, result, evidence string }
	for _, tc := range []struct {
		name   string
		checks []map[string]any
		passed bool
		want   []row
	}{
		{name: "healthy app passes", passed: true, checks: []map[string]any{
			{"type": "status"},
			{"type": "status", "path": "/api/users", "content_type": "application/json"},
			{"type": "status", "path": "/api/health", "status": 200, "content_type": "text/"},
			{"type": "status", "path": "/api/users", "content_type": "json"},
			{"type": "status", "path": "/missing", "status": 404},
			{"type": "status", "path": "/to-self", "content_type": "text/plain"},
			{"type": "max_ms", "path": "/api/users", "max_ms": 5000},
			{"type": "json_schema", "path": "/api/users", "schema": userSchema},
		}, want: []row{
			{"status", "/", "PASS", "GET / → 200 text/html"},
			{"status", "/api/users", "PASS", "GET /api/users → 200 application/json"},
			{"status", "/api/health", "PASS", "GET /api/health → 200 text/plain"},
			{"status", "/api/users", "PASS", "200 application/json"},
			{"status", "/missing", "PASS", "GET /missing → 404"},
			{"status", "/to-self", "PASS", "GET /to-self → 200 text/plain"},
			{"max_ms", "/api/users", "PASS", "(bound 5000 ms)"},
			{"json_schema", "/api/users", "PASS", "GET /api/users → 200 application/json"},
		}},
		{name: "planted failures", checks: []map[string]any{
			{"type": "status", "path": "/boom"},
			{"type": "status", "path": "/wrong-type", "content_type": "application/json"},
			{"type": "max_ms", "path": "/slow", "max_ms": 100},
			{"type": "json_schema", "path": "/api/users", "schema": map[string]any{"type": "array", "items": map[string]any{
				"type": "object", "required": []string{"uid"}, "properties": map[string]any{"id": map[string]any{"type": "string"}}}}},
			{"type": "json_schema", "path": "/boom", "schema": userSchema},
			{"type": "json_schema", "path": "/", "schema": userSchema},
			{"type": "status", "path": "/huge"},
		}, want: []row{
			{"status", "/boom", "FAIL", "status 500, want 200"},
			{"status", "/wrong-type", "FAIL", "content type text/html, want application/json"},
			{"max_ms", "/slow", "FAIL", "over the 100 ms bound"},
			{"json_schema", "/api/users", "FAIL", "at /0: missing property 'uid'; at /0/id: got number, want string"},
			{"json_schema", "/boom", "FAIL", "not a success status"},
			{"json_schema", "/", "FAIL", "the body is not JSON"},
			{"status", "/huge", "FAIL", "response body over the size limit"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := runWebTool(t, quality.WebAppConfig{MaxBodyBytes: 64 << 10}, t.TempDir(), "validate_web_app", map[string]any{"url": app.URL, "checks": tc.checks})
			require.NoError(t, err)
			rep := decode[quality.WebAppReport](t, out)
			require.Equal(t, tc.passed, rep.Passed, out)
			require.Len(t, rep.Rows, len(tc.want), out)
			for i, w := range tc.want {
				got := rep.Rows[i]
				require.Equal(t, w.check, got.Check, "row %d", i)
				require.Equal(t, w.path, got.Path, "row %d", i)
				require.Equal(t, w.result, got.Result, "row %d: %s", i, got.Evidence)
				require.Contains(t, got.Evidence, w.evidence, "row %d", i)
			}
			require.Contains(t, out, "\n| check | path | result | evidence |\n")
		})
	}
}

func TestValidateWebAppRefusals(t *testing.T) {
	t.Parallel()
	app := fixtureApp(t, "", usersJSON)
	other := fixtureApp(t, "", usersJSON)
	status := []map[string]any{{"type": "status"}}
	for _, tc := range []struct {
		name   string
		url    string
		checks []map[string]any
		cfg    quality.WebAppConfig
		want   string
	}{
		{name: "file URL", url: "file:///etc/passwd", checks: status, want: `scheme "file"`},
		{name: "javascript URL", url: "javascript:alert(1)", checks: status, want: `scheme "javascript"`},
		{name: "no checks", url: app.URL, want: "give at least one check"},
		{name: "too many checks", url: app.URL, checks: []map[string]any{{"type": "status"}, {"type": "status"}}, cfg: quality.WebAppConfig{MaxChecks: 1}, want: "2 checks, the limit is 1"},
		{name: "browser check without a browser", url: app.URL, checks: []map[string]any{{"type": "no_console_errors"}}, want: "need the headless browser, which runs only with the Docker sandbox"},
		{name: "selector without selector", url: app.URL, checks: []map[string]any{{"type": "selector"}}, want: "checks[0]: selector check needs a selector"},
		{name: "text without text", url: app.URL, checks: []map[string]any{{"type": "text"}}, want: "checks[0]: text check needs a text"},
		{name: "huge selector", url: app.URL, checks: []map[string]any{{"type": "selector", "selector": strings.Repeat("div ", 1000)}}, want: "the limit is 2000"},
		{name: "negative wait", url: app.URL, checks: []map[string]any{{"type": "text", "text": "x", "wait_ms": -1}}, want: "wait_ms -1"},
		{name: "unknown check", url: app.URL, checks: []map[string]any{{"type": "vibes"}}, want: `checks[0]: type "vibes": want status, max_ms, json_schema, selector, text, no_console_errors or no_failed_requests`},
		{name: "max_ms without bound", url: app.URL, checks: []map[string]any{{"type": "max_ms"}}, want: "needs max_ms"},
		{name: "json_schema without schema", url: app.URL, checks: []map[string]any{{"type": "json_schema"}}, want: "needs a schema"},
		{name: "invalid schema", url: app.URL, checks: []map[string]any{{"type": "json_schema", "schema": map[string]any{"type": 7}}}, want: "invalid JSON Schema"},
		{name: "remote $ref", url: app.URL, checks: []map[string]any{{"type": "json_schema", "schema": map[string]any{"$ref": other.URL + "/api/users"}}}, want: "only references inside the inline schema"},
		{name: "path is a URL", url: app.URL, checks: []map[string]any{{"type": "status", "path": other.URL + "/"}}, want: "is a URL"},
		{name: "redirect to metadata", url: app.URL, checks: []map[string]any{{"type": "status", "path": "/to-metadata"}}, want: "link-local or metadata address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := runWebTool(t, tc.cfg, t.TempDir(), "validate_web_app", map[string]any{"url": tc.url, "checks": tc.checks})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A redirect to another origin is not followed: the check fails with why.
func TestValidateWebAppCrossOriginRedirect(t *testing.T) {
	t.Parallel()
	target := fixtureApp(t, "", usersJSON)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/api/users", http.StatusFound)
	})
	app := httptest.NewServer(mux)
	t.Cleanup(app.Close)
	_, err := runWebTool(t, quality.WebAppConfig{}, t.TempDir(), "validate_web_app", map[string]any{"url": app.URL, "checks": []map[string]any{{"type": "status", "path": "/away"}}})
	require.ErrorContains(t, err, fmt.Sprintf("leaves the app's origin %s", app.URL))
}

// Swagger 2.0 and YAML documents are found where frameworks publish them and
// saved as OpenAPI 3 JSON.
func TestCaptureAPISchemaPublishedFormats(t *testing.T) {
	t.Parallel()
	const swagger2 = `{"swagger": "2.0", "info": {"title": "pets", "version": "1"}, "basePath": "/",
  "paths": {"/pets": {"get": {"produces": ["application/json"], "responses": {"200": {"description": "pets",
    "schema": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}}}}}}}}`
	const yamlDoc = "openapi: 3.0.3\ninfo:\n  title: pets\n  version: '1'\npaths:\n  /pets:\n    get:\n      responses:\n        '200':\n          description: pets\n"
	for _, tc := range []struct {
		name, where, ctype, body, version string
	}{
		{"swagger 2", "/swagger.json", "application/json", swagger2, "2.0"},
		{"yaml", "/openapi.yaml", "application/yaml", yamlDoc, "3.0.3"},
		{"springdoc", "/v3/api-docs", "application/json", strings.Replace(usersDoc, `"3.0.3"`, `"3.0.1"`, 1), "3.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mux := http.NewServeMux()
			mux.HandleFunc("GET "+tc.where, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				_, _ = w.Write([]byte(tc.body))
			})
			app := httptest.NewServer(mux)
			t.Cleanup(app.Close)
			ws := t.TempDir()
			out, err := runWebTool(t, quality.WebAppConfig{}, ws, "capture_api_schema", map[string]any{"base_url": app.URL})
			require.NoError(t, err)
			rep := decode[quality.APISchemaReport](t, out)
			require.Equal(t, "openapi", rep.Source)
			require.Equal(t, app.URL+tc.where, rep.DocumentURL)
			require.Equal(t, tc.version, rep.SpecVersion)
			require.True(t, rep.Valid, rep.ValidationError)
			doc := loadSaved(t, ws, "api-schema.json")
			require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), doc.OpenAPI)
		})
	}
}
