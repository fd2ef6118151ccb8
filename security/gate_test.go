package security_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/toolbox/shell"
	"github.com/aetherium-engine/aetherium/tools"
)

type pathArgs struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
}

type shellArgs struct {
	Command string `json:"command"`
}

type urlArgs struct {
	URL string `json:"url"`
}

// resumes is the approval flow's queue: the real one, except that it records the
// sessions resumed (as "run|session|key") instead of enqueueing their steps.
type resumes struct {
	*queue.Enqueuer
	mu   sync.Mutex
	keys []string
}

func newResumes(t *testing.T, client *asynq.Client) *resumes {
	t.Helper()
	q, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	return &resumes{Enqueuer: q}
}

func (r *resumes) Resume(_ context.Context, _ queue.Route, s queue.SessionID, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, s.Run+"|"+s.String()+"|"+key)
	return nil
}

func (r *resumes) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

type gateEnv struct {
	st        *store.Store
	inspector *asynq.Inspector
	approvals *security.Approvals
	audit     *security.Auditor
	router    *tools.Router
	// flowOff is the same registry behind a gate with security.flow: off.
	flowOff  *tools.Router
	metrics  *metrics.Metrics
	resumes  *resumes
	calls    map[string]*atomic.Int64 // executions per stand-in tool
	upstream *httptest.Server
	hits     *atomic.Int64
	// rulesPath is the permissions file behind rules (a test may rewrite it).
	rulesPath string
	rules     *security.Rules
	// recorded is the same registry behind the gate's recorded copy in front
	// of replay's terminal (a replay's router).
	recorded *tools.Router
}

const ruleReason = "CI workflows are owned by the platform team"

// setupGate builds the real gate on a private Postgres and Redis: a small registry
// with the real research tools and stand-ins for the other tool names, the real
// rules file loader, DLP, approvals (asynq client) and auditor.
func setupGate(t *testing.T) *gateEnv {
	t.Helper()
	st := testdb.Store(t)
	client, inspector := testdb.Asynq(t, testdb.Redis(t))
	log := testlog.Logger(t)
	m := metrics.New()

	e := &gateEnv{st: st, inspector: inspector, metrics: m, resumes: newResumes(t, client), calls: map[string]*atomic.Int64{}}
	e.approvals = security.NewApprovals(security.ApprovalsConfig{Window: time.Minute}, st, &events.Recorder{Store: st, Log: log},
		e.resumes, m, log)
	e.audit = security.NewAuditor(security.AuditConfig{Interval: 10 * time.Millisecond}, st, log, nil)
	t.Cleanup(e.audit.Close)

	path := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
rules:
  - match: {tool: write_file, path_pattern: "(^|/)\\.github/workflows/"}
    action: always_deny
    reason: "`+ruleReason+`"
  - match: {tool: read_file, path_pattern: "^advisory/"}
    action: ask_user
    reason: "advisory only"
`), 0o644))
	rules, err := security.LoadRules(path, log)
	require.NoError(t, err)
	e.rulesPath, e.rules = path, rules
	dlp := egresstest.NewDLP(t)

	var hits atomic.Int64
	e.hits = &hits
	e.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "upstream saw %s %s body=%q", r.Method, r.URL.Path, body)
	}))
	t.Cleanup(e.upstream.Close)

	reg := tools.NewRegistry()
	research.Register(reg, egress.NewEgress(egress.EgressConfig{Timeout: 10 * time.Second}), research.Config{}, nil)
	counter := func(name string) *atomic.Int64 {
		c := &atomic.Int64{}
		e.calls[name] = c
		return c
	}
	readN, writeN, shellN, pdfN := counter("read_file"), counter("write_file"), counter("run_shell"), counter("download_pdf")
	tools.Register(reg, "read_file", "read", func(_ context.Context, call tools.Call, a pathArgs) (tools.Result, error) {
		readN.Add(1)
		return tools.Text("contents of %s", a.Path), nil
	}, tools.Idempotent(), tools.InGroup("workspace"))
	tools.Register(reg, "write_file", "write", func(_ context.Context, call tools.Call, a pathArgs) (tools.Result, error) {
		writeN.Add(1)
		return tools.Text("wrote %d bytes to %s", len(a.Content), a.Path), nil
	}, tools.InGroup("workspace"))
	tools.Register(reg, "run_shell", "shell", func(_ context.Context, call tools.Call, a shellArgs) (tools.Result, error) {
		shellN.Add(1)
		if a.Command == "infra-down" {
			return tools.Result{}, tools.Infrastructure(errors.New("queue unreachable"))
		}
		if a.Command == "cat /bin/true" {
			return tools.Result{Content: "\x7fELF\x02\x01\x01\x00\x00\xff\xfe binary"}, nil
		}
		return tools.Text("$ %s\nok", a.Command), nil
	}, tools.InGroup("shell"), tools.WithTier(tools.Elevated), tools.Escalates(shell.Destructive))
	reg.Unregister("download_pdf") // the real one parses in the Docker sandbox
	tools.Register(reg, "download_pdf", "pdf", func(_ context.Context, call tools.Call, a urlArgs) (tools.Result, error) {
		pdfN.Add(1)
		return tools.Text("saved %s", a.URL), nil
	}, tools.Outbound(), tools.InGroup("research"), tools.WithTier(tools.Restricted))
	tools.Register(reg, "list_files", "list", func(_ context.Context, _ tools.Call, _ pathArgs) (tools.Result, error) {
		panic("list_files exploded")
	}, tools.InGroup("workspace"))

	gate := security.NewGate(security.GateDeps{Registry: reg, Rules: rules, DLP: dlp, Approvals: e.approvals, Metrics: m, Log: log})
	e.router = tools.NewGatedRouter(reg, gate.Middleware)
	e.recorded = tools.NewRecordedRouter(reg, replay.Terminal, gate.Recorded(nil).Middleware)
	off := security.NewGate(security.GateDeps{Registry: reg, Rules: rules, DLP: dlp, Approvals: e.approvals, Metrics: m, Log: log, Flow: security.FlowOff})
	e.flowOff = tools.NewGatedRouter(reg, off.Middleware)
	return e
}

// session creates a running run and returns a session of it allowed every tool
// in the test registry but write_file... unless asked.
func (e *gateEnv) session(t *testing.T, allowed ...string) *tools.Session {
	t.Helper()
	ctx := context.Background()
	runID := uuid.NewString()
	require.NoError(t, e.st.CreateRun(ctx, store.Run{ID: runID, Prompt: "test", Team: json.RawMessage(`{}`)}))
	ok, err := e.st.StartRun(ctx, runID)
	require.NoError(t, err)
	require.True(t, ok)
	if len(allowed) == 0 {
		allowed = []string{"read_file", "write_file", "run_shell", "download_pdf", "list_files", "http_request", "http_health_check"}
	}
	return &tools.Session{RunID: runID, SessionID: queue.SupervisorSession(runID).String(), Team: "web", Agent: "researcher", Role: "worker",
		Access: tools.Access{Tools: allowed}, AllowedDomains: []string{"api.example.com", "127.0.0.1"}}
}

func (e *gateEnv) dispatch(s *tools.Session, id, tool string, args any) (tools.Result, error) {
	raw, ok := args.(string)
	if !ok {
		b, _ := json.Marshal(args)
		raw = string(b)
	}
	res, err := e.router.Dispatch(context.Background(), tools.Call{ID: id, Name: tool, Args: json.RawMessage(raw), Session: s})
	if res.Audit != nil {
		// What the agent loop does with the row: saved (here alone, there with the
		// session), a repeated call key skipped.
		if werr := e.audit.Write(context.Background(), *res.Audit); werr != nil {
			panic(werr)
		}
	}
	return res, err
}

// auditRows flushes the auditor and returns the run's rows.
func (e *gateEnv) auditRows(t *testing.T, runID string) []store.AuditRow {
	t.Helper()
	e.audit.Flush()
	rows, err := e.st.RunAudit(context.Background(), runID, 100)
	require.NoError(t, err)
	return rows
}

func (e *gateEnv) oneAuditRow(t *testing.T, runID string) store.AuditRow {
	t.Helper()
	rows := e.auditRows(t, runID)
	require.Len(t, rows, 1, "exactly one audit row per attempt")
	return rows[0]
}

func requireDenied(t *testing.T, err error, layer, reason string) *tools.Denied {
	t.Helper()
	var d *tools.Denied
	require.ErrorAs(t, err, &d)
	require.Equal(t, layer, d.Layer)
	require.Contains(t, d.Reason, reason)
	return d
}

func rowText(r store.AuditRow) string {
	res := ""
	if r.Result != nil {
		res = *r.Result
	}
	return strings.Join([]string{string(r.Args), res, r.Summary, r.Error, r.DenyReason}, "\n")
}

func TestGateRefusals(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	pat := egresstest.Credentials()[0].Secret
	cases := []struct {
		name     string
		allowed  []string // session catalog; nil for every test tool
		tool     string
		args     any
		layer    string
		reason   string
		sentinel error
	}{
		{name: "unknown tool", tool: "format_disk", args: `{}`, layer: "capability", reason: `unknown tool "format_disk"`, sentinel: tools.ErrUnknownTool},
		{name: "tool not in the catalog", allowed: []string{"read_file"}, tool: "write_file", args: pathArgs{Path: "a.txt"}, layer: "capability",
			reason: `tool "write_file" is not available to researcher`, sentinel: tools.ErrNotInCatalog},
		{name: "always_deny rule", tool: "write_file", args: pathArgs{Path: "repo/.github/workflows/ci.yml", Content: "on: push"}, layer: "rules", reason: ruleReason},
		{name: "domain not allowlisted", tool: "http_request", args: research.RequestArgs{Method: "GET", URL: "https://not-allowed.example.net/x"},
			layer: "egress", reason: "not-allowed.example.net is not in the team's allowed_domains", sentinel: egress.ErrEgressDenied},
		{name: "metadata address", tool: "http_health_check", args: research.HealthArgs{URL: "http://169.254.169.254/latest/meta-data/"},
			layer: "egress", reason: "link-local or metadata", sentinel: egress.ErrEgressDenied},
		{name: "restricted outbound tool to a denied host is refused before any approval", tool: "download_pdf", args: urlArgs{URL: "https://evil.example.org/x.pdf"},
			layer: "egress", reason: "evil.example.org", sentinel: egress.ErrEgressDenied},
		{name: "credential in a header", tool: "http_request", args: research.RequestArgs{Method: "GET", URL: e.upstream.URL + "/repos",
			Headers: map[string]string{"Authorization": "token " + pat}}, layer: "dlp", reason: "gitleaks rule github-pat"},
		{name: "percent-encoded credential in the query", tool: "http_request", args: research.RequestArgs{Method: "GET", URL: e.upstream.URL + "/x?discount=5%&t=" + egresstest.PctAll(pat)},
			layer: "dlp", reason: "github-pat"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := e.session(t, tc.allowed...)
			before := map[string]int64{}
			for k, c := range e.calls {
				before[k] = c.Load()
			}
			hits := e.hits.Load()

			_, err := e.dispatch(s, "call-1", tc.tool, tc.args)
			d := requireDenied(t, err, tc.layer, tc.reason)
			if tc.sentinel != nil {
				require.ErrorIs(t, err, tc.sentinel)
			}
			require.NotContains(t, err.Error(), pat, "a refusal never echoes the secret")

			row := e.oneAuditRow(t, s.RunID)
			require.False(t, row.Allowed)
			require.Equal(t, "denied", row.Decision)
			require.Equal(t, tc.layer, row.DenyLayer)
			require.Equal(t, d.Reason, row.DenyReason)
			require.Equal(t, tc.tool, row.Tool)
			require.Equal(t, tools.TierOf(tc.tool).String(), row.Tier)
			require.Equal(t, s.SessionID+":call-1", row.CallKey)
			require.Equal(t, "researcher", row.Agent)
			require.Equal(t, "web", row.Team)
			require.NotContains(t, rowText(row), pat, "the audit row never keeps the secret")
			require.NotContains(t, rowText(row), egresstest.PctAll(pat))

			if tc.layer == "dlp" {
				require.Contains(t, rowText(row), "[REDACTED:github-pat]")
			}
			for k, c := range e.calls {
				require.Equal(t, before[k], c.Load(), "%s must not run", k)
			}
			if tc.layer == "dlp" || tc.layer == "egress" {
				require.Equal(t, hits, e.hits.Load(), "nothing left the process")
			}
		})
	}
}

func TestGateDenialMetrics(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	s := e.session(t)
	_, err := e.dispatch(s, "c1", "http_request", research.RequestArgs{Method: "POST", URL: e.upstream.URL, Body: "key: " + egresstest.Credentials()[6].Secret})
	requireDenied(t, err, "dlp", "stripe-access-token")
	require.InDelta(t, 1, counterValue(t, e.metrics.GateDenials.WithLabelValues("dlp")), 0)
	require.InDelta(t, 1, counterValue(t, e.metrics.DLPHits.WithLabelValues("stripe-access-token")), 0)
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func TestGateAllowed(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()

	t.Run("standard call keeps a truncated summary only", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		content := strings.Repeat("lorem ipsum ", 100)
		res, err := e.dispatch(s, "c1", "write_file", pathArgs{Path: "notes.md", Content: content})
		require.NoError(t, err)
		require.Equal(t, "wrote 1200 bytes to notes.md", res.Content)
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, row.Allowed)
		require.Equal(t, "allowed", row.Decision)
		require.Equal(t, "standard", row.Tier)
		require.Empty(t, row.DenyLayer)
		require.Nil(t, row.Args, "standard rows keep no arguments")
		require.Nil(t, row.Result, "standard rows keep no result")
		require.True(t, strings.HasPrefix(row.Summary, `{"path":"notes.md","content":"lorem ipsum`), row.Summary)
		require.True(t, strings.HasSuffix(row.Summary, "…"))
		require.LessOrEqual(t, len(row.Summary), 240+len("…"))
	})
	t.Run("standard summary cut inside a multi-byte character stays valid UTF-8", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		_, err := e.dispatch(s, "c1", "write_file", pathArgs{Path: "utf8.md", Content: strings.Repeat("é", 400)})
		require.NoError(t, err)
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, utf8.ValidString(row.Summary))
	})
	t.Run("standard summary redacts a secret the cut would split", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		pat := egresstest.Credentials()[0].Secret
		// The token straddles the 240-byte summary limit.
		content := strings.Repeat("x", 240-len(`{"path":"a.env","content":"`)-10) + " " + pat
		_, err := e.dispatch(s, "c1", "write_file", pathArgs{Path: "a.env", Content: content})
		require.NoError(t, err)
		row := e.oneAuditRow(t, s.RunID)
		require.NotContains(t, row.Summary, pat[:8], "not even a prefix of the token is kept")
	})
	t.Run("elevated call keeps full redacted arguments and result", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		pat := egresstest.Credentials()[0].Secret
		cmd := "git clone https://x:" + pat + "@github.com/org/repo.git " + strings.Repeat("--verbose ", 40)
		res, err := e.dispatch(s, "c1", "run_shell", shellArgs{Command: cmd})
		require.NoError(t, err, "run_shell is not outbound: DLP does not block it, the audit redacts it")
		require.Contains(t, res.Content, pat, "the tool itself got the real arguments")
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, row.Allowed)
		require.Equal(t, "elevated", row.Tier)
		require.NotNil(t, row.Result)
		var args shellArgs
		require.NoError(t, json.Unmarshal(row.Args, &args))
		require.Equal(t, strings.ReplaceAll(cmd, pat, "[REDACTED:github-pat]"), args.Command, "full arguments, redacted")
		require.Equal(t, "$ "+strings.ReplaceAll(cmd, pat, "[REDACTED:github-pat]")+"\nok", *row.Result, "full result, redacted")
		require.NotContains(t, rowText(row), pat)
	})
	t.Run("binary output and NUL escapes still land in the audit", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		res, err := e.dispatch(s, "c1", "run_shell", shellArgs{Command: "cat /bin/true"})
		require.NoError(t, err)
		require.Contains(t, res.Content, "\x00")
		row := e.oneAuditRow(t, s.RunID)
		require.NotNil(t, row.Result)
		require.True(t, utf8.ValidString(*row.Result))
		require.Contains(t, *row.Result, "binary")

		s = e.session(t)
		_, err = e.dispatch(s, "c1", "run_shell", `{"command":"printf 'a\u0000b'"}`)
		require.NoError(t, err)
		row = e.oneAuditRow(t, s.RunID)
		require.Contains(t, string(row.Args), "printf")

		// A lone surrogate escape: jsonb refuses it, and with it the batch.
		s = e.session(t)
		_, err = e.dispatch(s, "c1", "run_shell", `{"command":"printf 'a\ud800b\uDC00c'"}`)
		require.NoError(t, err)
		row = e.oneAuditRow(t, s.RunID)
		require.Contains(t, string(row.Args), "printf 'a\ufffdb\ufffdc'")
	})
	t.Run("elevated outbound call through the real http_request", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		res, err := e.dispatch(s, "c1", "http_request", research.RequestArgs{Method: "PUT", URL: e.upstream.URL + "/items/7", Body: "hello"})
		require.NoError(t, err)
		var out struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.Content), &out))
		require.Equal(t, 200, out.Status)
		require.Equal(t, `upstream saw PUT /items/7 body="hello"`, out.Body)
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, row.Allowed)
		require.Equal(t, "elevated", row.Tier)
		require.JSONEq(t, fmt.Sprintf(`{"method":"PUT","url":%q,"body":"hello"}`, e.upstream.URL+"/items/7"), string(row.Args))
		require.NotNil(t, row.Result)
		require.Equal(t, res.Content, *row.Result)
	})
	t.Run("advisory rule does not block", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		res, err := e.dispatch(s, "c1", "read_file", pathArgs{Path: "advisory/x"})
		require.NoError(t, err)
		require.Equal(t, "contents of advisory/x", res.Content)
	})
	t.Run("a tool error is audited as an error", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		_, err := e.dispatch(s, "c1", "http_request", research.RequestArgs{Method: "TRACE", URL: e.upstream.URL})
		require.ErrorContains(t, err, `method "TRACE"`)
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, row.Allowed, "the gate allowed it; the tool failed")
		require.Equal(t, "error", row.Decision)
		require.Contains(t, row.Error, "TRACE")
	})
	t.Run("a panicking tool becomes an error and is audited", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		_, err := e.dispatch(s, "c1", "list_files", pathArgs{Path: "."})
		require.ErrorContains(t, err, "tool list_files panicked: list_files exploded")
		row := e.oneAuditRow(t, s.RunID)
		require.Equal(t, "error", row.Decision)
		require.Contains(t, row.Error, "panicked")
	})
	t.Run("an infrastructure failure is left to the retry to audit", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		_, err := e.dispatch(s, "c1", "run_shell", shellArgs{Command: "infra-down"})
		require.ErrorIs(t, err, tools.ErrInfrastructure)
		require.Empty(t, e.auditRows(t, s.RunID), "not the call's outcome: the retried attempt writes its row")
	})
	t.Run("every answered attempt returns its audit row, refusals included", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		res, err := e.router.Dispatch(ctx, tools.Call{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path":"a.txt"}`), Session: s})
		require.NoError(t, err)
		require.NotNil(t, res.Audit)
		require.Equal(t, s.SessionID+":c1", res.Audit.CallKey)
		require.Equal(t, "allowed", res.Audit.Decision)
		res, err = e.router.Dispatch(ctx, tools.Call{ID: "c2", Name: "http_request", Args: json.RawMessage(`{"method":"GET","url":"http://169.254.169.254/"}`), Session: s})
		require.Error(t, err)
		require.NotNil(t, res.Audit)
		require.Equal(t, "denied", res.Audit.Decision)
		require.Equal(t, "egress", res.Audit.DenyLayer)
		res, err = e.router.Dispatch(ctx, tools.Call{ID: "c3", Name: "no_such_tool", Args: json.RawMessage(`{}`), Session: s})
		require.ErrorIs(t, err, tools.ErrUnknownTool)
		require.NotNil(t, res.Audit, "a capability refusal is audited by the gate")
		require.Equal(t, "capability", res.Audit.DenyLayer)
		require.Empty(t, e.auditRows(t, s.RunID), "the gate writes nothing itself: the caller saves the rows")
	})
	t.Run("the same call dispatched twice is audited once", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		for range 2 {
			_, err := e.dispatch(s, "dup", "read_file", pathArgs{Path: "a.txt"})
			require.NoError(t, err)
		}
		_, err := e.dispatch(s, "other", "read_file", pathArgs{Path: "a.txt"})
		require.NoError(t, err)
		rows := e.auditRows(t, s.RunID)
		require.Len(t, rows, 2)
		keys := []string{rows[0].CallKey, rows[1].CallKey}
		require.ElementsMatch(t, []string{s.SessionID + ":dup", s.SessionID + ":other"}, keys)
	})
	t.Run("a call without a session is refused", func(t *testing.T) {
		t.Parallel()
		_, err := e.router.Dispatch(ctx, tools.Call{ID: "x", Name: "read_file", Args: json.RawMessage(`{"path":"a"}`)})
		require.ErrorContains(t, err, "without a session")
	})
}

// requestApproval dispatches a call that needs a human and checks the pending state:
// approval row, waiting run, scheduled expiry task, requested event, no audit row.
func (e *gateEnv) requestApproval(t *testing.T, s *tools.Session, callID, tool string, args any, why string) store.Approval {
	t.Helper()
	ctx := context.Background()
	res, err := e.dispatch(s, callID, tool, args)
	require.NoError(t, err)
	require.True(t, res.Pending)
	id := security.ApprovalID(s.SessionID, callID)
	require.Equal(t, "waiting for approval "+id, res.Content)

	appr, err := e.st.GetApproval(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalPending, appr.Status)
	require.Equal(t, why, appr.Why)
	require.Equal(t, s.RunID, appr.RunID)
	require.Equal(t, tool, appr.Tool)
	require.Equal(t, tools.TierOf(tool).String(), appr.Tier)
	require.WithinDuration(t, appr.CreatedAt.Add(time.Minute), appr.ExpiresAt, time.Second)

	run, err := e.st.GetRun(ctx, s.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunWaiting, run.Status)

	info, err := e.inspector.GetTaskInfo("supervisor", "approval-expire:"+id)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, info.State)
	require.Equal(t, queue.TypeApprovalExpire, info.Type)
	require.WithinDuration(t, appr.ExpiresAt, info.NextProcessAt, time.Second)
	require.JSONEq(t, fmt.Sprintf(`{"approval_id":%q,"v":%d}`, id, queue.ContractVersion), string(info.Payload))

	evs, err := e.st.EventsAfter(ctx, s.RunID, 0, 100)
	require.NoError(t, err)
	require.True(t, hasEvent(evs, "approval.requested"))

	require.Empty(t, e.auditRows(t, s.RunID), "a pending call is audited when it is decided and runs")

	// A redelivered step finds the same approval and schedules nothing new.
	res, err = e.dispatch(s, callID, tool, args)
	require.NoError(t, err)
	require.True(t, res.Pending)
	list, err := e.st.ListApprovals(ctx, "", s.RunID, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	return appr
}

func hasEvent(evs []store.Event, typ string) bool {
	for _, ev := range evs {
		if ev.Type == typ {
			return true
		}
	}
	return false
}

func TestGateApprovals(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()
	pdf := urlArgs{URL: "http://127.0.0.1:9/report.pdf"}

	t.Run("approved: runs with approved_by", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		appr := e.requestApproval(t, s, "c1", "download_pdf", pdf, "restricted tool")
		before := e.calls["download_pdf"].Load()

		decided, err := e.approvals.Decide(ctx, appr.ID, true, "alice", "")
		require.NoError(t, err)
		require.Equal(t, store.ApprovalApproved, decided.Status)
		require.Contains(t, e.resumes.all(), s.RunID+"|"+s.SessionID+"|approval:"+appr.ID)
		run, err := e.st.GetRun(ctx, s.RunID)
		require.NoError(t, err)
		require.Equal(t, store.RunRunning, run.Status, "no approval pending: the run runs again")

		_, err = e.approvals.Decide(ctx, appr.ID, false, "mallory", "too late")
		require.ErrorIs(t, err, store.ErrDecided, "a second decision is refused")

		res, err := e.dispatch(s, "c1", "download_pdf", pdf)
		require.NoError(t, err)
		require.Equal(t, "saved "+pdf.URL, res.Content)
		require.Equal(t, before+1, e.calls["download_pdf"].Load())
		row := e.oneAuditRow(t, s.RunID)
		require.True(t, row.Allowed)
		require.Equal(t, "allowed", row.Decision)
		require.Equal(t, "alice", row.ApprovedBy)
		require.Equal(t, "restricted", row.Tier)
		require.JSONEq(t, `{"url":"http://127.0.0.1:9/report.pdf"}`, string(row.Args))
	})
	t.Run("denied: refused with the reason", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		appr := e.requestApproval(t, s, "c1", "download_pdf", pdf, "restricted tool")
		_, err := e.approvals.Decide(ctx, appr.ID, false, "bob", "not from that host")
		require.NoError(t, err)

		before := e.calls["download_pdf"].Load()
		_, err = e.dispatch(s, "c1", "download_pdf", pdf)
		requireDenied(t, err, "approval", "rejected by a human reviewer (bob): not from that host")
		var d *tools.Denied
		require.ErrorAs(t, err, &d)
		require.True(t, d.Human, "a rejection is marked as a human's")
		require.Equal(t, before, e.calls["download_pdf"].Load())
		row := e.oneAuditRow(t, s.RunID)
		require.False(t, row.Allowed)
		require.Equal(t, "denied", row.Decision)
		require.Equal(t, "approval", row.DenyLayer)
		require.Empty(t, row.ApprovedBy)
	})
	t.Run("timed out: refused with decision timed_out", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		appr := e.requestApproval(t, s, "c1", "download_pdf", pdf, "restricted tool")
		expire := queue.ApprovalExpireTask(appr.ID)
		require.NoError(t, e.approvals.Expire(ctx, expire))
		got, err := e.st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalTimedOut, got.Status)
		require.Equal(t, "system", got.DecidedBy)
		require.Contains(t, e.resumes.all(), s.RunID+"|"+s.SessionID+"|approval:"+appr.ID)

		_, err = e.dispatch(s, "c1", "download_pdf", pdf)
		requireDenied(t, err, "approval", "timed_out")
		row := e.oneAuditRow(t, s.RunID)
		require.False(t, row.Allowed)
		require.Equal(t, "timed_out", row.Decision)
		require.Equal(t, "approval", row.DenyLayer)

		// The expiry task running again (asynq retries) changes nothing.
		require.NoError(t, e.approvals.Expire(ctx, expire))
		got, err = e.st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalTimedOut, got.Status)
	})
	t.Run("expiring a decided approval keeps the human decision", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		appr := e.requestApproval(t, s, "c1", "download_pdf", pdf, "restricted tool")
		_, err := e.approvals.Decide(ctx, appr.ID, true, "alice", "")
		require.NoError(t, err)
		require.NoError(t, e.approvals.Expire(ctx, queue.ApprovalExpireTask(appr.ID)))
		got, err := e.st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalApproved, got.Status)
	})
	t.Run("destructive run_shell escalates although run_shell is only elevated", func(t *testing.T) {
		// Not parallel: it counts run_shell executions, which the parallel subtests
		// below also make (non-parallel subtests finish before those start).
		s := e.session(t)
		cmd := shellArgs{Command: "cd /srv && rm -rf build"}
		appr := e.requestApproval(t, s, "c1", "run_shell", cmd, "destructive command (rm -r/-f)")
		require.JSONEq(t, `{"command":"cd /srv && rm -rf build"}`, string(appr.Args), "the human sees the command")
		before := e.calls["run_shell"].Load()
		_, err := e.approvals.Decide(ctx, appr.ID, true, "ops-lead", "")
		require.NoError(t, err)
		res, err := e.dispatch(s, "c1", "run_shell", cmd)
		require.NoError(t, err)
		require.Equal(t, "$ cd /srv && rm -rf build\nok", res.Content)
		require.Equal(t, before+1, e.calls["run_shell"].Load())
		row := e.oneAuditRow(t, s.RunID)
		require.Equal(t, "ops-lead", row.ApprovedBy)
		require.Equal(t, "elevated", row.Tier)
	})
	t.Run("a plain run_shell command runs at once", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		res, err := e.dispatch(s, "c1", "run_shell", shellArgs{Command: "go test ./..."})
		require.NoError(t, err)
		require.False(t, res.Pending)
		list, err := e.st.ListApprovals(ctx, "", s.RunID, 10)
		require.NoError(t, err)
		require.Empty(t, list)
	})
	t.Run("approvals carry redacted arguments", func(t *testing.T) {
		t.Parallel()
		s := e.session(t)
		pat := egresstest.Credentials()[0].Secret
		cmd := shellArgs{Command: "sudo GITHUB_TOKEN=" + pat + " ./deploy.sh"}
		appr := e.requestApproval(t, s, "c1", "run_shell", cmd, "destructive command (sudo/su)")
		require.NotContains(t, string(appr.Args), pat)
		require.Contains(t, string(appr.Args), "[REDACTED:github-pat]")
	})
	t.Run("unknown approval", func(t *testing.T) {
		t.Parallel()
		_, err := e.approvals.Decide(ctx, "apr_nope", true, "alice", "")
		require.True(t, errors.Is(err, store.ErrNotFound), "got %v", err)
	})
}

// A tool nobody wrote into the gate: registered Restricted in the device group, it
// waits for a human and runs once approved, audited with its tier — the gate reads
// the tier from the registration (tools' TestAThrowawayToolIsDeclaredByItsRegistration
// checks its group and catalog entry).
func TestAThrowawayToolIsGatedByItsRegistration(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()
	var brewed atomic.Int64
	tools.Register(e.router.Registry(), "brew_coffee", "Brew a coffee.", func(context.Context, tools.Call, struct{}) (tools.Result, error) {
		brewed.Add(1)
		return tools.Text("brewed"), nil
	}, tools.InGroup("device"), tools.WithTier(tools.Restricted))

	s := e.session(t, "brew_coffee")
	res, err := e.dispatch(s, "c1", "brew_coffee", `{}`)
	require.NoError(t, err)
	require.True(t, res.Pending, "a Restricted tool waits for a human")
	require.Zero(t, brewed.Load())
	id := security.ApprovalID(s.SessionID, "c1")
	appr, err := e.st.GetApproval(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "restricted", appr.Tier)
	require.Equal(t, "restricted tool", appr.Why)

	_, err = e.approvals.Decide(ctx, id, true, "alice", "")
	require.NoError(t, err)
	res, err = e.dispatch(s, "c1", "brew_coffee", `{}`)
	require.NoError(t, err)
	require.Equal(t, "brewed", res.Content)
	require.EqualValues(t, 1, brewed.Load())
	row := e.oneAuditRow(t, s.RunID)
	require.Equal(t, "brew_coffee", row.Tool)
	require.Equal(t, "restricted", row.Tier)
	require.Equal(t, "alice", row.ApprovedBy)
}

// The gate's recorded copy (replay) judges as the gate does and writes
// nothing: a held call nobody was asked about answers pending without an
// approval, an event or a waiting run; a call it lets through is served the
// recorded result and its tool never runs; no audit row is written; an
// approved call passes on the recorded approval.
func TestRecordedGateWritesNothing(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()
	s := e.session(t)
	served := func(content string) context.Context {
		return replay.Serve(ctx, replay.Served{Message: &llm.Message{Role: llm.RoleTool, Content: content}})
	}
	judge := func(id, tool string, args any, content string) (tools.Result, error) {
		raw, err := json.Marshal(args)
		require.NoError(t, err)
		return e.recorded.Dispatch(served(content), tools.Call{ID: id, Name: tool, Args: raw, Session: s})
	}

	res, err := judge("c1", "download_pdf", urlArgs{URL: "https://api.example.com/a.pdf"}, "saved")
	require.NoError(t, err)
	require.True(t, res.Pending, "held now, and nobody decided it")
	res, err = judge("c2", "run_shell", shellArgs{Command: "echo ok"}, "$ echo ok\nrecorded")
	require.NoError(t, err)
	require.Equal(t, "$ echo ok\nrecorded", res.Content, "the record's result")
	require.NotNil(t, res.Audit, "the row rides back to be compared")
	require.Equal(t, "allowed", res.Audit.Decision)
	_, err = judge("c3", "write_file", pathArgs{Path: ".github/workflows/x.yml"}, "wrote")
	requireDenied(t, err, "rules", ruleReason)

	for tool, n := range e.calls {
		require.Zero(t, n.Load(), "%s ran", tool)
	}
	list, err := e.st.ListApprovals(ctx, "", s.RunID, 10)
	require.NoError(t, err)
	require.Empty(t, list, "no approval requested")
	evs, err := e.st.EventsAfter(ctx, s.RunID, 0, 100)
	require.NoError(t, err)
	require.Empty(t, evs)
	run, err := e.st.GetRun(ctx, s.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunRunning, run.Status)
	require.Empty(t, e.auditRows(t, s.RunID))

	// Approved live, the same call passes the recorded gate on that decision.
	args := urlArgs{URL: "https://api.example.com/b.pdf"}
	appr := e.requestApproval(t, s, "c4", "download_pdf", args, "restricted tool")
	_, err = e.approvals.Decide(ctx, appr.ID, true, "alice", "fine")
	require.NoError(t, err)
	ran := e.calls["download_pdf"].Load()
	res, err = judge("c4", "download_pdf", args, "saved b.pdf")
	require.NoError(t, err)
	require.Equal(t, "saved b.pdf", res.Content)
	require.Equal(t, appr.ID, res.Audit.ApprovalID)
	require.Equal(t, ran, e.calls["download_pdf"].Load())
}
