package security_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/egresstest"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/internal/testlog"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
)

// An approved call runs only with the arguments the approval was granted for: the
// same value in another spelling runs, any other value is refused and says why.
func TestApprovalBindsToExactArguments(t *testing.T) {
	e := setupGate(t)
	ctx := context.Background()
	s := e.session(t)
	appr := e.requestApproval(t, s, "c1", "run_shell", `{"command":"rm -rf build"}`, "destructive command (rm -r/-f)")
	want, err := egress.ArgsHash([]byte(`{"command":"rm -rf build"}`))
	require.NoError(t, err)
	require.Equal(t, want, appr.ArgsHash)
	_, err = e.approvals.Decide(ctx, appr.ID, true, "alice", "")
	require.NoError(t, err)

	before := e.calls["run_shell"].Load()
	_, err = e.dispatch(s, "c1", "run_shell", `{"command":"rm -rf build; rm -rf /"}`)
	requireDenied(t, err, "approval", "arguments changed since approval")
	require.ErrorIs(t, err, security.ErrArgsChanged)
	require.Equal(t, before, e.calls["run_shell"].Load(), "the altered call did not run")

	s2 := e.session(t)
	appr2 := e.requestApproval(t, s2, "c1", "run_shell", `{"command":"rm -rf build"}`, "destructive command (rm -r/-f)")
	_, err = e.approvals.Decide(ctx, appr2.ID, true, "alice", "")
	require.NoError(t, err)
	res, err := e.dispatch(s2, "c1", "run_shell", "{ \"command\" : \"rm -rf \\u0062uild\" }")
	require.NoError(t, err, "the same value, spelled differently, is what was approved")
	require.Equal(t, "$ rm -rf build\nok", res.Content)
}

// Deciding after the window is refused, and times the approval out at once.
func TestApprovalLateDecisionExpires(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()
	s := e.session(t)
	appr := e.requestApproval(t, s, "c1", "download_pdf", urlArgs{URL: "http://127.0.0.1:9/a.pdf"}, "restricted tool")
	_, err := e.st.Pool.Exec(ctx, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, appr.ID)
	require.NoError(t, err)

	got, err := e.approvals.Decide(ctx, appr.ID, true, "alice", "")
	require.ErrorIs(t, err, store.ErrExpired)
	require.Contains(t, err.Error(), "expired")
	require.Equal(t, store.ApprovalTimedOut, got.Status)
	require.Contains(t, e.resumes.all(), s.RunID+"|"+s.SessionID+"|approval:"+appr.ID, "the session resumes to hear it")
	_, err = e.approvals.Decide(ctx, appr.ID, true, "alice", "")
	require.ErrorIs(t, err, store.ErrExpired, "and stays expired")

	before := e.calls["download_pdf"].Load()
	_, err = e.dispatch(s, "c1", "download_pdf", urlArgs{URL: "http://127.0.0.1:9/a.pdf"})
	requireDenied(t, err, "approval", "timed_out")
	require.Equal(t, before, e.calls["download_pdf"].Load())
}

// Finishing a run other than by completion closes its pending approvals.
func TestApprovalsCloseWithTheirRun(t *testing.T) {
	t.Parallel()
	e := setupGate(t)
	ctx := context.Background()
	for _, status := range []string{store.RunCancelled, store.RunFailed} {
		s := e.session(t)
		appr := e.requestApproval(t, s, "c1", "download_pdf", urlArgs{URL: "http://127.0.0.1:9/a.pdf"}, "restricted tool")
		changed, _, err := e.st.FinishRun(ctx, s.RunID, status, "", "stopped", status)
		require.NoError(t, err)
		require.True(t, changed)
		got, err := e.st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalCancelled, got.Status, status)
		require.Equal(t, "run was "+status, got.DecisionReason)

		_, err = e.approvals.Decide(ctx, appr.ID, true, "alice", "")
		require.ErrorIs(t, err, store.ErrRunClosed)
		require.Contains(t, err.Error(), "its run was "+status)
		require.NoError(t, e.approvals.Expire(ctx, queue.ApprovalExpireTask(appr.ID)))
		got, err = e.st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApprovalCancelled, got.Status, "the expiry task leaves it closed")

		// A request arriving after its run finished is born closed.
		late, created, err := e.st.RequestApproval(ctx, store.Approval{ID: appr.ID + "x", RunID: s.RunID, SessionID: s.SessionID,
			CallID: "c2", Agent: "a", Tool: "download_pdf", Tier: "restricted", Why: "restricted tool"}, time.Minute)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, store.ApprovalCancelled, late.Status)
	}
}

// The expire handler approves by fallback only the tools listed, and never
// download_pdf or a headset tool, whatever the list says.
func TestExpireFallbackPerTool(t *testing.T) {
	t.Parallel()
	st := testdb.Store(t)
	opt, err := asynq.ParseRedisURI(testdb.Redis(t))
	require.NoError(t, err)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	log := testlog.Logger(t)
	r := newResumes(t, client)
	a := security.NewApprovals(security.ApprovalsConfig{Window: time.Minute,
		FallbackTools: []string{"run_shell", "download_pdf", "frame_status", "frame_install", "frame_run", "frame_grab"}},
		st, &events.Recorder{Store: st, Log: log}, r, nil, log)
	e := &gateEnv{st: st}
	ctx := context.Background()
	for tool, want := range map[string]string{
		"run_shell": store.ApprovalApproved, "http_request": store.ApprovalTimedOut, "download_pdf": store.ApprovalTimedOut,
		"frame_status": store.ApprovalTimedOut, "frame_install": store.ApprovalTimedOut, "frame_run": store.ApprovalTimedOut,
		"frame_grab": store.ApprovalTimedOut,
	} {
		s := e.session(t)
		appr, _, err := st.RequestApproval(ctx, store.Approval{ID: security.ApprovalID(s.SessionID, "c1"), RunID: s.RunID,
			SessionID: s.SessionID, CallID: "c1", Agent: "a", Tool: tool, Tier: "restricted", Why: "restricted tool"}, time.Minute)
		require.NoError(t, err)
		require.NoError(t, a.Expire(ctx, queue.ApprovalExpireTask(appr.ID)))
		got, err := st.GetApproval(ctx, appr.ID)
		require.NoError(t, err)
		require.Equal(t, want, got.Status, tool)
		if want == store.ApprovalApproved {
			require.Equal(t, "supervisor-fallback", got.DecidedBy)
		}
	}
	// An ask of the flow rules never falls back, even for a listed tool: the
	// supervisor that would stand in is a model too.
	s := e.session(t)
	appr, _, err := st.RequestApproval(ctx, store.Approval{ID: security.ApprovalID(s.SessionID, "c1"), RunID: s.RunID,
		SessionID: s.SessionID, CallID: "c1", Agent: "a", Tool: "run_shell", Tier: "elevated",
		Why: "flow: the session read untrusted content (web_fetch https://evil.example/ (turn 1)); it may be steering this elevated call"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, a.Expire(ctx, queue.ApprovalExpireTask(appr.ID)))
	got, err := st.GetApproval(ctx, appr.ID)
	require.NoError(t, err)
	require.Equal(t, store.ApprovalTimedOut, got.Status)
}

// The approver sees every argument; only the secret itself is masked, where it
// stands or inside an encoded token.
func TestMaskSecretsMasksOnlyTheSecret(t *testing.T) {
	t.Parallel()
	d := egresstest.NewDLP(t)
	pat := egresstest.Credentials()[0].Secret
	for name, tc := range map[string]struct{ in, want string }{
		"plain":       {"GITHUB_TOKEN=" + pat + " ./deploy.sh --all", "GITHUB_TOKEN=[REDACTED:github-pat] ./deploy.sh --all"},
		"base64 only": {"echo " + base64.StdEncoding.EncodeToString([]byte("token="+pat)) + " | base64 -d > t; rm -rf build", "echo [REDACTED:github-pat] | base64 -d > t; rm -rf build"},
		"no secret":   {"rm -rf build", "rm -rf build"},
	} {
		got := d.MaskSecrets(tc.in)
		require.Equal(t, tc.want, got, name)
		require.NotContains(t, got, pat)
		require.NotContains(t, got, "withheld", name)
	}
	key := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx3pQm0nX7n2f8rL9uJ1bGk5tH4sD2vW6yZ8aC0eF3gI5jK7l\n-----END RSA PRIVATE KEY-----"
	got := d.MaskSecrets("cat > k <<EOF\n" + key + "\nEOF\nrm -rf /srv/app")
	require.NotContains(t, got, "MIIEowIBAAKCAQEAx3pQm0nX7n2f8rL9uJ1bGk5tH4sD2vW6yZ8aC0eF3gI5jK7l")
	require.True(t, strings.HasSuffix(got, "rm -rf /srv/app"), "the commands around the key stay visible: %s", got)
}
