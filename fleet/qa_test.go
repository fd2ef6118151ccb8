package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
)

// The QA rule through a running fleet (script model, real Docker and Chromium):
// a QA node's verdict on a page it has not played is sent back; after
// play_test it would stand, but the page is edited first, so the old play no
// longer counts and the verdict is sent back again; after a second play it is
// accepted and the run completes.
func TestQARuleEndToEnd(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	cfg := fleettest.Config(t)
	cfg.Research.CaptureImage = sandboxtest.FamilyImage(t, "browser")
	cfg.Research.CaptureTimeout = 90 * time.Second
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: sandboxtest.Docker(t)}})

	page := `<!doctype html><html><body><button onclick="document.title='ok'">Go</button></body></html>`
	edited := strings.Replace(page, "Go", "Start", 1)
	qa := []map[string]any{
		call("write_file", map[string]any{"path": "index.html", "content": page}),
		{"say": "VERDICT index.html PASS looks right to me"},
		call("play_test", map[string]any{"page": "index.html"}),
		call("write_file", map[string]any{"path": "index.html", "content": edited}),
		{"say": "VERDICT index.html PASS played it"},
		call("play_test", map[string]any{"page": "index.html"}),
		{"say": "VERDICT index.html PASS no errors on any control"},
	}
	tm := team(qa, map[string]any{"allowed_domains": []string{"example.test"}})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "check the page", "mcp_servers": []string{"workspace", "quality"}, "qa": true}}
	id := f.SubmitTeam(tm, "check the page")
	run := f.WaitTerminal(id, 4*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	msgs, sentBack := writerSentBack(t, f, id)
	require.Len(t, sentBack, 2, "two verdicts were sent back")
	require.Contains(t, sentBack[0], "play_test has not been run on index.html as it stands now")
	require.Contains(t, sentBack[1], "index.html changed since play_test played it (index.html)")
	last := msgs[len(msgs)-1]
	require.Equal(t, "assistant", last.Role)
	require.Equal(t, "VERDICT index.html PASS no errors on any control", last.Content, "the verdict after the second play stands")
}

// play_test on a page of the run's own app: the app runs in the run's sandbox
// (busybox httpd started with run_shell), and http://localhost:8000 in the
// browser is that app — its requests are made inside the sandbox — so the
// error behind the page's button is found. The play records the workspace
// files the app served (site/index.html, site/app.js), so after the script is
// edited the verdict on the URL is sent back; after a second play it stands.
func TestPlayTestRunApp(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	cfg := fleettest.Config(t)
	cfg.Research.CaptureImage = sandboxtest.FamilyImage(t, "browser")
	cfg.Research.CaptureTimeout = 90 * time.Second
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: sandboxtest.Docker(t)}})

	page := `<!doctype html><html><head><script src="app.js"></script></head><body><button onclick="boom()">Boom</button></body></html>`
	url := "http://localhost:8000/index.html"
	qa := []map[string]any{
		call("write_file", map[string]any{"path": "site/index.html", "content": page}),
		call("write_file", map[string]any{"path": "site/app.js", "content": "function boom() { null.x; }"}),
		call("run_shell", map[string]any{"command": "busybox httpd -p 127.0.0.1:8000 -h /workspace/site && sleep 0.5 && echo started"}),
		call("play_test", map[string]any{"page": url}),
		call("write_file", map[string]any{"path": "site/app.js", "content": "function boom() { document.title = 'fixed'; }"}),
		{"say": "VERDICT " + url + " FAIL the Boom button throws"},
		call("play_test", map[string]any{"page": url}),
		{"say": "VERDICT " + url + " PASS the Boom button works now"},
	}
	tm := team(qa, map[string]any{"allowed_domains": []string{"example.test"}})
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "check the app", "mcp_servers": []string{"workspace", "shell", "quality"}}}
	id := f.SubmitTeam(tm, "check the app")
	run := f.WaitTerminal(id, 4*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)
	results := toolResults(t, f, id, "play_test")
	require.Len(t, results, 2)
	var first, second struct {
		Errors []struct{ Kind, Message, Control string }
		Files  map[string]string
	}
	require.NoError(t, json.Unmarshal([]byte(results[0]), &first), results[0])
	require.Len(t, first.Errors, 1, results[0])
	require.Equal(t, `button "Boom"`, first.Errors[0].Control)
	require.Contains(t, first.Errors[0].Message, "null")
	require.ElementsMatch(t, []string{"site/index.html", "site/app.js"}, keysOf(first.Files), "the app's answers are the workspace files it served")
	require.NoError(t, json.Unmarshal([]byte(results[1]), &second), results[1])
	require.Empty(t, second.Errors, results[1])

	_, sentBack := writerSentBack(t, f, id)
	require.Len(t, sentBack, 1, "the verdict after the edit was sent back")
	require.Contains(t, sentBack[0], url+" changed since play_test played it (site/app.js)")
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// writerSentBack reads the writer's session of run id: its messages, and the user
// messages after the task (what the QA rule sent back).
func writerSentBack(t *testing.T, f *fleettest.Fleet, id string) (msgs []struct{ Role, Content string }, sentBack []string) {
	t.Helper()
	var raw []byte
	require.NoError(t, f.Store.Pool.QueryRow(t.Context(), `SELECT session_history(id) FROM sessions WHERE run_id = $1 AND agent = 'writer'`, id).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &msgs))
	for _, m := range msgs[2:] {
		if m.Role == "user" {
			sentBack = append(sentBack, m.Content)
		}
	}
	return msgs, sentBack
}
