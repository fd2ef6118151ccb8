package fleet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/toolbox/research/pdftest"
)

// An agent's download_pdf waits for a human, then the fixture PDF's text comes back
// and the file is in the run's workspace; a corrupt PDF, a decompression bomb and
// one over the size cap each come back as a clean tool error, and the run goes on:
// the next download_pdf of the same run works and the run completes.
func TestDownloadPDFEndToEnd(t *testing.T) {
	t.Parallel()
	dockerOrFail(t)
	const capBytes = 2 << 20
	image := sandboxtest.FamilyImage(t, "browser")
	doc := pdftest.Document(
		[]string{"Quarterly fleet report.", "Throughput rose by a third."},
		[]string{"Appendix: the second page."},
	)
	fixtures := map[string][]byte{
		"/report.pdf":  doc,
		"/corrupt.pdf": pdftest.Corrupt(),
		"/bomb.pdf":    pdftest.Bomb(256 << 20),
		"/big.pdf":     pdftest.Oversized(capBytes + 4096),
	}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := fixtures[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/pdf")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(web.Close)

	cfg := fleettest.Config(t)
	cfg.Security.ApprovalWindow = 3 * time.Minute
	cfg.Research.MaxPDFBytes = capBytes
	cfg.Research.PDFImage = image
	cfg.Research.PDFMemoryBytes = 64 << 20
	cfg.Research.PDFExtractTimeout = 15 * time.Second
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: sandboxtest.Docker(t)}})

	calls := []string{"/report.pdf", "/corrupt.pdf", "/bomb.pdf", "/big.pdf", "/report.pdf"}
	var script []map[string]any
	for _, p := range calls {
		script = append(script, call("download_pdf", map[string]any{"url": web.URL + p}))
	}
	tm := team(append(script, map[string]any{"say": "read"}), loopback)
	tm["workers"] = []map[string]any{{"name": "writer", "prompt": "read the report", "mcp_servers": []string{"research"}}}
	id := f.SubmitTeam(tm, "read the report")

	// Every call waits for a human (Restricted, no supervisor fallback); nothing is
	// downloaded before the approval.
	for i, p := range calls {
		a := pendingApproval(t, f, id)
		require.Equal(t, "download_pdf", a.Tool)
		var view approvalView
		code, raw := f.Do("GET", "/api/approvals/"+a.ID, nil, &view)
		require.Equal(t, http.StatusOK, code, string(raw))
		require.Contains(t, string(raw), web.URL+p, "the approver sees the URL")
		if i == 0 {
			matches, _ := filepath.Glob(filepath.Join(cfg.Workspaces, "*", "downloads", "*"))
			require.Empty(t, matches, "nothing is downloaded before the approval")
		}
		code, raw = f.Do("POST", "/api/approvals/"+a.ID+"/approve", map[string]string{"reason": "ok"}, nil)
		require.Equal(t, http.StatusOK, code, string(raw))
		// The next approval appears once this call has run.
		require.Eventually(t, func() bool { return len(toolResults(t, f, id, "download_pdf")) > i }, 2*time.Minute, 50*time.Millisecond,
			"download_pdf %s did not finish", p)
	}
	run := f.WaitTerminal(id, time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)

	results := toolResults(t, f, id, "download_pdf")
	require.Len(t, results, len(calls))
	for i, r := range results {
		t.Logf("%s → %.300s", calls[i], r)
	}
	var first, again research.PDFAnswer
	require.NoError(t, json.Unmarshal([]byte(results[0]), &first), results[0])
	require.Equal(t, "downloads/report.pdf", first.Path)
	require.Equal(t, 2, first.Pages)
	require.Contains(t, first.Text, "Quarterly fleet report.\nThroughput rose by a third.")
	require.Contains(t, first.Text, "--- page 2 ---\n\nAppendix: the second page.")
	require.Contains(t, results[1], "the PDF could not be read: ")
	require.Contains(t, results[1], "Couldn't read xref table")
	require.Regexp(t, `the PDF could not be read: poppler (needed more than 64\.0 MiB of memory|took longer than 15s)`, results[2])
	require.Contains(t, results[3], "over the download cap")
	require.NoError(t, json.Unmarshal([]byte(results[4]), &again), results[4])
	require.Equal(t, "downloads/report-2.pdf", again.Path, "the first download is not overwritten")
	require.Equal(t, first.Text, again.Text)

	saved, err := filepath.Glob(filepath.Join(cfg.Workspaces, "*", "downloads", "*"))
	require.NoError(t, err)
	require.Len(t, saved, 2, "only the readable PDFs are kept: %v", saved)
	body, err := os.ReadFile(filepath.Join(filepath.Dir(saved[0]), "report.pdf"))
	require.NoError(t, err)
	require.Equal(t, doc, body)
}

// toolResults are the contents of the writer's results of tool, in order.
func toolResults(t *testing.T, f *fleettest.Fleet, runID, tool string) []string {
	t.Helper()
	rows, err := f.Store.Pool.Query(context.Background(), `SELECT m->>'content' FROM sessions s, jsonb_array_elements(session_history(s.id)) WITH ORDINALITY AS e(m, n)
		WHERE s.run_id = $1 AND s.agent = 'writer' AND m->>'role' = 'tool' AND m->>'name' = $2 ORDER BY n`, runID, tool)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
