package fleet_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/toolbox/research"
)

// An agent searches (a dead SearXNG, then the DuckDuckGo fixture) and reads an
// article fixture through a running fleet: both calls pass the gate, are audited
// as Elevated with their full arguments and results, and the text has no page
// chrome, scripts or styles.
func TestResearchToolsEndToEnd(t *testing.T) {
	t.Parallel()
	page := func(name, ctype string) http.HandlerFunc {
		body, err := os.ReadFile(fleettest.RepoPath(t, "toolbox/research/testdata/"+name))
		require.NoError(t, err)
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			_, _ = w.Write(body)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/html/", page("ddg.html", "text/html; charset=utf-8"))
	mux.HandleFunc("/article", page("article.html", "text/html; charset=utf-8"))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())

	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.Research.SearXNGURLs = []string{dead}
		c.Research.DuckDuckGo = web.URL + "/html/"
	}})
	tm := team([]map[string]any{
		call("web_search", map[string]any{"query": "fleet tuning", "max_results": 2}),
		call("web_fetch", map[string]any{"url": web.URL + "/article"}),
		{"say": "read"},
	}, loopback)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "research", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "research fleet tuning")
	run := f.WaitTerminal(id, 60*time.Second)
	require.Equal(t, "completed", run.Status, run.Error)

	f.Audit.Flush()
	rows, err := f.Store.RunAudit(context.Background(), id, 100)
	require.NoError(t, err)
	byTool := map[string]string{}
	for _, r := range rows {
		if r.Tool == "web_search" || r.Tool == "web_fetch" {
			require.Equal(t, "allowed", r.Decision, r.Tool)
			require.Equal(t, "elevated", r.Tier, r.Tool)
			require.NotEmpty(t, r.Args, r.Tool)
			require.NotNil(t, r.Result, r.Tool)
			byTool[r.Tool] = *r.Result
		}
	}
	var search research.SearchAnswer
	require.NoError(t, json.Unmarshal([]byte(byTool["web_search"]), &search), byTool["web_search"])
	require.Equal(t, "duckduckgo", search.Backend)
	require.Len(t, search.Results, 2)
	require.Equal(t, "https://docs.example.test/fleet?a=1&b=2", search.Results[0].URL)
	require.Len(t, search.Skipped, 1, "the dead SearXNG is named")
	require.Contains(t, search.Skipped[0], dead)

	var fetched research.FetchAnswer
	require.NoError(t, json.Unmarshal([]byte(byTool["web_fetch"]), &fetched), byTool["web_fetch"])
	require.Contains(t, fetched.Text, "## Three knobs")
	require.NotContains(t, fetched.Text, "NOISE")
	require.Equal(t, research.ExtractorReadability, fetched.Extractor)
}
