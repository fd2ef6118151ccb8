package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// owners is a fleet with tokens: two submitters (alice, bob), the on-call approver,
// an auditor (read_all) and an admin; each submitter has one run with one pending
// approval.
type owners struct {
	*fleettest.Fleet
	aliceRun, bobRun   string
	aliceAppr, bobAppr string
}

var ownerTokens = map[string][]string{
	"alice":   {api.RoleSubmit, api.RoleRead},
	"bob":     {api.RoleSubmit, api.RoleRead},
	"oncall":  {api.RoleRead, api.RoleApprove}, // as in the README's example
	"auditor": {api.RoleReadAll},
	"root":    {api.RoleAdmin},
}

func setupOwners(t *testing.T, maxInFlight int) *owners {
	t.Helper()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = nil
		for name, roles := range ownerTokens {
			c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(name + "-secret"), Roles: roles})
		}
		c.API.MaxRunsInFlight = maxInFlight
		c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}
	}})
	o := &owners{Fleet: f}
	if maxInFlight == 0 {
		o.aliceRun, o.bobRun = o.submit(t, "alice"), o.submit(t, "bob")
		o.aliceAppr, o.bobAppr = o.approval(t, o.aliceRun), o.approval(t, o.bobRun)
	}
	return o
}

// do sends a request as token's principal ("" for none). An event stream is
// answered by its status and headers only: a live run's stream does not end.
func (o *owners) do(token, method, path string, body any) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, o.URL+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token+"-secret")
	}
	resp, err := o.Client().Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, resp.Header, nil, nil
	}
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw, err
}

func (o *owners) call(t *testing.T, token, method, path string, body any) (int, http.Header, []byte) {
	t.Helper()
	code, hdr, raw, err := o.do(token, method, path, body)
	require.NoError(t, err, "%s %s", method, path)
	return code, hdr, raw
}

var demoRun = map[string]any{"template": "demo", "prompt": "x", "variables": map[string]any{"topic": "t"}}

func (o *owners) submit(t *testing.T, token string) string {
	t.Helper()
	code, _, raw := o.call(t, token, "POST", "/api/orchestrator/run-from-template", demoRun)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var out struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	return out.RunID
}

func (o *owners) approval(t *testing.T, runID string) string {
	t.Helper()
	a, created, err := o.Store.RequestApproval(context.Background(), store.Approval{
		ID: "apr_" + strings.ReplaceAll(runID, "-", "")[:24], RunID: runID, SessionID: queue.SupervisorSession(runID).String(), CallID: "call-1",
		Agent: "lead", Tool: "run_shell", Tier: "restricted", Why: "test",
	}, time.Hour)
	require.NoError(t, err)
	require.True(t, created)
	return a.ID
}

// runIDs lists the run ids of a listing: its runs, or the runs of its approvals.
func (o *owners) runIDs(t *testing.T, token, path string) []string {
	t.Helper()
	code, _, raw := o.call(t, token, "GET", path, nil)
	require.Equal(t, http.StatusOK, code, string(raw))
	var out struct {
		Runs []struct {
			ID string `json:"id"`
		} `json:"runs"`
		Approvals []struct {
			RunID string `json:"run_id"`
		} `json:"approvals"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	ids := []string{}
	for _, r := range out.Runs {
		ids = append(ids, r.ID)
	}
	for _, a := range out.Approvals {
		ids = append(ids, a.RunID)
	}
	return ids
}

func TestPerRunEndpointsAnswer404OutsideTheCallersScope(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 0)
	missing := "7d444840-9dc0-11d1-b245-5ffdce74fad2"
	perRun := []string{"", "/events", "/events?format=json", "/delegations", "/audit", "/sessions"}
	type tc struct {
		name, token, run, suffix string
		code                     int
	}
	var cases []tc
	for _, sfx := range perRun {
		cases = append(cases,
			tc{"alice reads her own run" + sfx, "alice", o.aliceRun, sfx, 200},
			tc{"alice cannot see bob's run" + sfx, "alice", o.bobRun, sfx, 404},
			tc{"bob cannot see alice's run" + sfx, "bob", o.aliceRun, sfx, 404},
			tc{"missing run" + sfx, "alice", missing, sfx, 404},
			tc{"read_all sees bob's run" + sfx, "auditor", o.bobRun, sfx, 200},
			tc{"admin sees alice's run" + sfx, "root", o.aliceRun, sfx, 200},
		)
	}
	// The approver reads the summary of a run it has to decide on, nothing more.
	cases = append(cases,
		tc{"approver reads the summary of alice's run", "oncall", o.aliceRun, "", 200},
		tc{"approver reads the summary of bob's run", "oncall", o.bobRun, "", 200},
		tc{"approver cannot read events", "oncall", o.bobRun, "/events", 404},
		tc{"approver cannot list events", "oncall", o.bobRun, "/events?format=json", 404},
		tc{"approver cannot read audit", "oncall", o.bobRun, "/audit", 404},
		tc{"approver cannot read delegations", "oncall", o.aliceRun, "/delegations", 404},
	)
	t.Run("reads", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				code, _, raw := o.call(t, c.token, "GET", "/api/runs/"+c.run+c.suffix, nil)
				require.Equal(t, c.code, code, string(raw))
				if code == 404 {
					// Byte for byte the answer for a run that does not exist.
					require.JSONEq(t, fmt.Sprintf(`{"error":"run %s not found","field":"id"}`, c.run), string(raw))
				}
			})
		}
	})

	t.Run("a session is read through its own run only", func(t *testing.T) {
		ctx := context.Background()
		for _, run := range []string{o.aliceRun, o.bobRun} {
			_, _, err := o.Store.AcquireSession(ctx, store.Session{ID: queue.SupervisorSession(run).String(), RunID: run, Agent: "lead", Role: "supervisor",
				Messages: []llm.Message{{Role: llm.RoleSystem, Content: "p"}, {Role: llm.RoleUser, Content: "secret of " + run}}}, "t", time.Minute)
			require.NoError(t, err)
		}
		bobs := queue.SupervisorSession(o.bobRun).String()
		code, _, raw := o.call(t, "bob", "GET", "/api/runs/"+o.bobRun+"/sessions/"+bobs+"/history", nil)
		require.Equal(t, 200, code, string(raw))
		require.Contains(t, string(raw), "secret of "+o.bobRun)
		for _, path := range []string{
			"/api/runs/" + o.aliceRun + "/sessions/" + bobs + "/history", // bob's session through alice's run
			"/api/runs/" + o.aliceRun + "/sessions/..%2F..%2Fetc%2Fpasswd/history",
			"/api/runs/" + o.aliceRun + "/sessions/nope/history",
		} {
			code, _, raw := o.call(t, "alice", "GET", path, nil)
			require.Equal(t, 404, code, string(raw))
			require.NotContains(t, string(raw), "secret")
		}
		code, _, raw = o.call(t, "alice", "GET", "/api/runs/"+o.bobRun+"/sessions/"+bobs+"/history", nil)
		require.Equal(t, 404, code, string(raw))
		code, _, raw = o.call(t, "bob", "GET", "/api/runs/"+o.bobRun+"/sessions/"+bobs+"/history?after=x", nil)
		require.Equal(t, 400, code, string(raw))
		var page struct {
			Messages []struct {
				Seq int `json:"seq"`
			} `json:"messages"`
			NextAfter *int `json:"next_after"`
		}
		code, _, raw = o.call(t, "bob", "GET", "/api/runs/"+o.bobRun+"/sessions/"+bobs+"/history?limit=1", nil)
		require.Equal(t, 200, code, string(raw))
		require.NoError(t, json.Unmarshal(raw, &page))
		require.Len(t, page.Messages, 1)
		require.NotNil(t, page.NextAfter)
		code, _, raw = o.call(t, "bob", "GET", fmt.Sprintf("/api/runs/%s/sessions/%s/history?after=%d", o.bobRun, bobs, *page.NextAfter), nil)
		require.Equal(t, 200, code, string(raw))
		page.NextAfter = nil
		require.NoError(t, json.Unmarshal(raw, &page))
		require.Len(t, page.Messages, 1)
		require.Equal(t, 1, page.Messages[0].Seq)
		require.Nil(t, page.NextAfter)
	})

	t.Run("approver sees only runs with approvals", func(t *testing.T) {
		plain := o.submit(t, "root") // bob's own listing must stay one run
		code, _, raw := o.call(t, "oncall", "GET", "/api/runs/"+plain, nil)
		require.Equal(t, 404, code, string(raw))
	})

	t.Run("listings", func(t *testing.T) {
		lists := []struct {
			name, token, path string
			want              []string
		}{
			{"alice lists her runs", "alice", "/api/runs", []string{o.aliceRun}},
			{"bob lists his runs", "bob", "/api/runs?status=queued", []string{o.bobRun}},
			{"a cursor on another's run finds nothing", "alice", "/api/runs?cursor=" + o.bobRun, []string{}},
			{"read_all lists both", "auditor", "/api/runs", []string{o.bobRun, o.aliceRun}},
			{"admin lists both", "root", "/api/runs", []string{o.bobRun, o.aliceRun}},
			{"alice lists her approvals", "alice", "/api/approvals", []string{o.aliceRun}},
			{"alice cannot filter on bob's run", "alice", "/api/approvals?run_id=" + o.bobRun, []string{}},
			{"the approver lists every approval", "oncall", "/api/approvals?status=pending", []string{o.aliceRun, o.bobRun}},
			{"read_all lists every approval", "auditor", "/api/approvals", []string{o.aliceRun, o.bobRun}},
		}
		for _, l := range lists {
			t.Run(l.name, func(t *testing.T) {
				t.Parallel()
				got := o.runIDs(t, l.token, l.path)
				if strings.HasPrefix(l.path, "/api/runs") && l.token != "alice" && l.token != "bob" {
					// Runs submitted by sibling subtests may be listed too.
					require.Subset(t, got, l.want)
					return
				}
				require.ElementsMatch(t, l.want, got)
			})
		}
	})

	t.Run("an owner filter", func(t *testing.T) {
		code, _, raw := o.call(t, "alice", "GET", "/api/runs?owner=bob", nil)
		require.Equal(t, http.StatusForbidden, code, "alice may not list bob's runs: %s", raw)
		require.Contains(t, string(raw), "only its own runs")
		require.Equal(t, []string{o.aliceRun}, o.runIDs(t, "alice", "/api/runs?owner=alice"))
		require.Contains(t, o.runIDs(t, "auditor", "/api/runs?owner=bob"), o.bobRun)
		require.NotContains(t, o.runIDs(t, "auditor", "/api/runs?owner=bob"), o.aliceRun)
	})

	t.Run("leases hide other principals' runs", func(t *testing.T) {
		ctx := context.Background()
		g, err := o.Leases.Acquire(ctx, "comfyui", o.aliceRun)
		require.NoError(t, err)
		_, err = o.Leases.Acquire(ctx, "comfyui", o.bobRun)
		require.ErrorIs(t, err, lease.ErrWaiting)
		// A run's post-run work holds leases under a name of its own: its owner
		// sees it, others do not.
		post := lease.PostRunHolder(o.aliceRun)
		_, err = o.Leases.Acquire(ctx, "comfyui", post)
		require.ErrorIs(t, err, lease.ErrWaiting)
		for token, want := range map[string][]string{
			"alice":   {o.aliceRun, api.HiddenHolder, post},
			"bob":     {api.HiddenHolder, o.bobRun, api.HiddenHolder},
			"auditor": {o.aliceRun, o.bobRun, post},
		} {
			code, _, raw := o.call(t, token, "GET", "/api/leases?events=10", nil)
			require.Equal(t, 200, code, string(raw))
			require.NotEmpty(t, g.Secret)
			require.NotContains(t, string(raw), string(g.Secret), "%s sees a grant's secret", token)
			var out struct {
				Services []lease.ServiceState `json:"services"`
				Events   []lease.Event        `json:"events"`
			}
			require.NoError(t, json.Unmarshal(raw, &out))
			require.Len(t, out.Services, 1)
			st := out.Services[0]
			require.Len(t, st.Holders, 1)
			require.Len(t, st.Waiters, 2)
			require.Equal(t, want, []string{st.Holders[0].Holder, st.Waiters[0].Holder, st.Waiters[1].Holder}, token)
			// A hidden holder's grant shows no fencing number either: it told
			// which grant was whose, and was once all the fencing proxy asked.
			if st.Holders[0].Holder == api.HiddenHolder {
				require.Zero(t, st.Holders[0].Token, "%s sees another principal's grant token", token)
			} else {
				require.Equal(t, g.Token, st.Holders[0].Token, token)
			}
			require.NotEmpty(t, out.Events)
			for _, e := range out.Events {
				require.Contains(t, want, e.Holder, token)
				if e.Holder == api.HiddenHolder {
					require.Zero(t, e.Token, "%s sees a hidden holder's token in a %s event", token, e.Type)
				}
			}
		}
	})

	t.Run("decisions", func(t *testing.T) {
		decisions := []struct {
			name, token, path string
			code              int
		}{
			{"a submitter cannot decide", "alice", "/api/approvals/" + o.aliceAppr + "/approve", 403},
			{"read_all cannot decide", "auditor", "/api/approvals/" + o.bobAppr + "/approve", 403},
			{"the approver approves alice's", "oncall", "/api/approvals/" + o.aliceAppr + "/approve", 200},
			{"the approver denies bob's", "oncall", "/api/approvals/" + o.bobAppr + "/deny", 200},
		}
		for _, d := range decisions {
			code, _, raw := o.call(t, d.token, "POST", d.path, map[string]any{"reason": "test"})
			require.Equal(t, d.code, code, "%s: %s", d.name, raw)
		}
		for appr, want := range map[string]string{o.aliceAppr: store.ApprovalApproved, o.bobAppr: store.ApprovalDenied} {
			a, err := o.Store.GetApproval(context.Background(), appr)
			require.NoError(t, err)
			require.Equal(t, want, a.Status)
			require.Equal(t, "oncall", a.DecidedBy)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		steps := []struct {
			name, token, run string
			code             int
		}{
			{"alice cannot cancel bob's run", "alice", o.bobRun, 404},
			{"read_all cannot cancel", "auditor", o.bobRun, 403},
			{"the approver cannot cancel", "oncall", o.bobRun, 403},
			{"alice cancels her own run", "alice", o.aliceRun, 200},
			// 404, not 409 "already cancelled": that would tell bob the run exists.
			{"bob cannot cancel alice's finished run either", "bob", o.aliceRun, 404},
			{"admin cancels bob's run", "root", o.bobRun, 200},
		}
		for _, s := range steps {
			before, err := o.Store.GetRun(context.Background(), s.run)
			require.NoError(t, err)
			code, _, raw := o.call(t, s.token, "POST", "/api/runs/"+s.run+"/cancel", nil)
			require.Equal(t, s.code, code, "%s: %s", s.name, raw)
			after, err := o.Store.GetRun(context.Background(), s.run)
			require.NoError(t, err)
			if s.code == 200 {
				require.Equal(t, store.RunCancelled, after.Status, s.name)
			} else {
				require.Equal(t, before.Status, after.Status, s.name)
			}
		}
	})
}

func TestRunsInFlightLimitAnswers429PerPrincipal(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 2)
	first := o.submit(t, "alice")
	o.submit(t, "alice")

	code, hdr, raw := o.call(t, "alice", "POST", "/api/orchestrator/run-from-template", demoRun)
	require.Equal(t, http.StatusTooManyRequests, code, string(raw))
	require.Equal(t, "30", hdr.Get("Retry-After"))
	require.Contains(t, string(raw), "alice already has 2 runs queued or running (api.max_runs_in_flight)")

	// The limit is per principal: bob is not held back by alice's runs.
	o.submit(t, "bob")

	// A finished run frees its slot.
	code, _, raw = o.call(t, "alice", "POST", "/api/runs/"+first+"/cancel", nil)
	require.Equal(t, 200, code, string(raw))
	o.submit(t, "alice")

	// Concurrent submits never overshoot: bob has one run, so exactly one of these wins.
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _, _ = o.do("bob", "POST", "/api/orchestrator/run-from-template", demoRun)
		}()
	}
	wg.Wait()
	accepted := 0
	for _, c := range codes {
		require.Contains(t, []int{http.StatusAccepted, http.StatusTooManyRequests}, c)
		if c == http.StatusAccepted {
			accepted++
		}
	}
	require.Equal(t, 1, accepted, "codes %v", codes)
	var n int
	require.NoError(t, o.Store.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM runs WHERE owner = 'bob' AND status IN ('queued','running','waiting')`).Scan(&n))
	require.Equal(t, 2, n)
}
