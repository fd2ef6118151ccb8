package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// approvalTeam is a team whose writer calls download_pdf (Restricted, always a
// human's decision) and then says done: a run that waits for one approval.
func approvalTeam(t *testing.T) string {
	t.Helper()
	team := map[string]any{
		"name":            "reviewed",
		"model":           map[string]any{"provider": "script"},
		"allowed_domains": []string{"127.0.0.1"},
		"supervisor":      map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":         []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": []string{"research"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				{"calls": []map[string]any{{"tool": "delegate", "args": map[string]any{"agent": "writer", "task": "fetch the paper"}}}},
				{"calls": []map[string]any{{"tool": "reply", "args": map[string]any{"message": "the paper is in"}}}},
			},
			"writer": []map[string]any{
				{"calls": []map[string]any{{"tool": "download_pdf", "args": map[string]any{"url": "http://127.0.0.1:1/paper.pdf"}}}},
				{"say": "downloaded"},
			},
		}},
	}
	raw, err := json.Marshal(team) // JSON is YAML
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "team.yaml")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	return path
}

// pendingApprovalOf waits for the run's first pending approval's id.
func pendingApprovalOf(t *testing.T, f *fleettest.Fleet, runID string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		var out struct {
			Approvals []struct {
				ID string `json:"id"`
			} `json:"approvals"`
		}
		code, raw := f.Do("GET", "/api/approvals?status=pending&run_id="+runID, nil, &out)
		require.Equal(t, http.StatusOK, code, string(raw))
		if len(out.Approvals) > 0 {
			id = out.Approvals[0].ID
		}
		return id != ""
	}, 30*time.Second, 30*time.Millisecond, "no pending approval appeared")
	// The approval's row is written before its approval.requested event (the
	// gate's two statements): a command that shows the run's events waits for both.
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, f.Store.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'approval.requested' AND data->>'approval_id' = $2`, runID, id).Scan(&n))
		return n > 0
	}, 30*time.Second, 30*time.Millisecond, "approval %s has no approval.requested event", id)
	return id
}

// syncBuffer is a buffer the command writes while the test reads.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

var (
	clockRE = regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d `)
	uuidRE  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	aprRE   = regexp.MustCompile(`apr_[A-Za-z0-9_-]+`)
	delRE   = regexp.MustCompile(`del_[0-9a-f]+`)
)

// normalise takes what changes from run to run out of the output: clock
// times, run and delegation ids, approval ids.
func normalise(s string) string {
	s = clockRE.ReplaceAllString(s, "HH:MM:SS ")
	s = uuidRE.ReplaceAllString(s, "<uuid>")
	s = delRE.ReplaceAllString(s, "del_<id>")
	return aprRE.ReplaceAllString(s, "apr_<id>")
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./cli -run %s -update writes it", t.Name())
	require.Equal(t, string(want), got)
}

// run --follow over a real fleet: the approval's request says what waits and
// the commands that decide it; its decision says who decided what; the run
// completes. No line is a bare type.
func TestFollowApprovalGolden(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF}})
	team := approvalTeam(t)
	out, errOut := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- Main([]string{"run", "--api", f.URL, "--team", team, "--prompt", "fetch the paper", "--follow"}, out, errOut)
	}()
	var runID string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`run (\S+) queued`).FindStringSubmatch(out.String())
		if m != nil {
			runID = m[1]
		}
		return m != nil
	}, 30*time.Second, 20*time.Millisecond)
	id := pendingApprovalOf(t, f, runID)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "aetherium approvals approve "+id) },
		30*time.Second, 20*time.Millisecond, "the request names the command to type: %s", out)

	var o, e bytes.Buffer
	require.Equal(t, 0, Main([]string{"approvals", "approve", id, "--api", f.URL, "--reason", "a paper we cite"}, &o, &e), e.String())
	select {
	case code := <-done:
		require.Equal(t, 0, code, errOut.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("run --follow did not end: %s", out)
	}
	got := out.String()
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		require.NotRegexp(t, `^\d\d:\d\d:\d\d \S+\s+\S+\s*$`, line, "a line with no detail")
	}
	golden(t, "follow_approval.golden", normalise(got))
}

// Ctrl-C while following (the context ends, as the signal ends it): one
// line that the run goes on, with how to follow or cancel it; 130; no
// "context canceled"; the run is still waiting for its approval.
func TestFollowInterrupted(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF}})
	team := approvalTeam(t)
	for _, c := range []struct {
		name string
		cmd  func(ctx context.Context, runID string, out, errOut *syncBuffer) int
	}{
		{"run --follow", func(ctx context.Context, _ string, out, errOut *syncBuffer) int {
			return runCmd(ctx, []string{"--api", f.URL, "--team", team, "--prompt", "fetch", "--follow"}, out, errOut)
		}},
		{"events", func(ctx context.Context, runID string, out, errOut *syncBuffer) int {
			return eventsCmd(ctx, []string{runID, "--api", f.URL}, out, errOut)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runID := ""
			if c.name == "events" {
				runID = f.SubmitTeam(json.RawMessage(mustRead(t, team)), "fetch")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out, errOut := newSyncBuffer(), newSyncBuffer()
			done := make(chan int, 1)
			go func() { done <- c.cmd(ctx, runID, out, errOut) }()
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "approval.requested") },
				30*time.Second, 20*time.Millisecond, "the run waits for its approval: %s %s", out, errOut)
			if runID == "" {
				runID = regexp.MustCompile(`run (\S+) queued`).FindStringSubmatch(out.String())[1]
			}
			cancel()
			select {
			case code := <-done:
				require.Equal(t, 130, code)
			case <-time.After(10 * time.Second):
				t.Fatal("still following after the interrupt")
			}
			require.Equal(t, "\nstopped following; run "+runID+" goes on. Follow it again: aetherium events "+runID+
				" · cancel it: aetherium runs cancel "+runID+"\n", errOut.String())
			require.NotContains(t, out.String(), "context canceled")
			// Waiting once the gate marked it so; running a moment before.
			require.Contains(t, []string{"running", "waiting"}, f.GetRun(runID).Status, "the run goes on")
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return raw
}
