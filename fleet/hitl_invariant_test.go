package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/shell"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
)

// The decisions the invariant workload makes on a held call.
const (
	decApprove = "approve"
	decGrant   = "approve+grant"
	decEdit    = "edit"
	decDeny    = "reject"
	decExpire  = "expire"
	decCancel  = "cancel"
)

// decisionWeights are the odds of each decision (out of their sum).
var decisionWeights = []struct {
	kind   string
	weight int
}{{decApprove, 18}, {decGrant, 22}, {decEdit, 22}, {decDeny, 14}, {decExpire, 12}, {decCancel, 12}}

// invariantSeedEnv replays a failed workload: the test logs the seed it used.
const invariantSeedEnv = "AETHERIUM_HITL_SEED"

// TestApprovalAuditInvariant is the acceptance check of issue 40 (humans in the
// loop): over 200 runs whose every run_shell call escalates, decided at random
// (approve, approve with a grant, edit, reject, let expire, cancel the run),
// every executed call's audit row names exactly one approval or grant with the
// same argument hash and policy revision, and no command ran without one. The
// command log (written by run_shell itself, after the gate) is the independent
// record of what ran.
//
// The seed is logged; AETHERIUM_HITL_SEED=<seed> replays the same decision for
// the same (run, call). Which approvals exist still depends on timing: a team
// grant covers its partner run's calls only if it is made before they are held.
func TestApprovalAuditInvariant(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	if s := os.Getenv(invariantSeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, invariantSeedEnv)
	}
	t.Logf("seed %d (replay: %s=%d)", seed, invariantSeedEnv, seed)

	x, err := sandbox.NewLocal(sandbox.Config{AllowLocal: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	// A short window: "expire" is leaving an approval alone, and the run goes on
	// after it.
	f := fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) { c.Security.ApprovalWindow = 3 * time.Second },
		Fleet:     fleet.Options{Executor: x},
	})
	ctx := context.Background()

	const runs = 200
	w := &invariantWorkload{f: f, seed: seed, index: map[string]int{}, decided: map[string]string{}}

	// The decider runs while the runs are submitted and until they all ended.
	deciderCtx, stopDecider := context.WithCancel(ctx)
	deciderDone := make(chan struct{})
	go func() { defer close(deciderDone); w.decide(deciderCtx) }()
	t.Cleanup(func() { stopDecider(); <-deciderDone })

	// Each run is one agent (the supervisor holds the shell) making two
	// destructive calls, then replying: minimal runs, so 200 stay cheap. Runs
	// 2k and 2k+1 share their commands, so a team grant of one may cover the
	// other's calls; the second call repeats the first (an exact grant covers it)
	// or adds an argument (only a "… *" command grant covers it).
	start := time.Now()
	ids := make([]string, runs)
	var submitters sync.WaitGroup
	sem := make(chan struct{}, 4) // a few clients submitting at once
	for i := range runs {
		first, second := w.commands(i)
		tm := map[string]any{
			"name": "hitl-inv", "model": map[string]any{"provider": "script"},
			"supervisor": map[string]any{"name": "boss", "prompt": "clean up", "mcp_servers": []string{"orchestration", "shell"}},
			"workers":    []map[string]any{},
			"script": map[string]any{"agents": map[string]any{"boss": []map[string]any{
				call("run_shell", map[string]any{"command": first}),
				call("run_shell", map[string]any{"command": second}),
				call("reply", map[string]any{"message": "done"}),
			}}},
		}
		submitters.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; submitters.Done() }()
			var out struct {
				RunID string `json:"run_id"`
			}
			code, raw, err := w.do(ctx, "POST", "/api/orchestrator/run", map[string]any{"team": tm, "prompt": fmt.Sprintf("clean up build %d", i)})
			if err == nil && code == http.StatusAccepted {
				err = json.Unmarshal(raw, &out)
			}
			if err != nil || code != http.StatusAccepted || out.RunID == "" {
				w.fail("submit run #%d: HTTP %d %s: %v", i, code, raw, err)
				return
			}
			w.mu.Lock()
			ids[i] = out.RunID
			w.index[out.RunID] = i
			w.mu.Unlock()
		}()
	}
	submitters.Wait()
	w.mu.Lock()
	require.Empty(t, w.errs, "submissions")
	w.mu.Unlock()

	submitted := time.Since(start)
	// Every run ends (each approval is decided, expires or is closed with its run).
	require.Eventually(t, func() bool {
		var open int
		err := f.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE id = ANY($1::uuid[])
			AND status NOT IN ('completed','failed','cancelled')`, ids).Scan(&open)
		return err == nil && open == 0
	}, 150*time.Second, 100*time.Millisecond, "every run ends")
	stopDecider()
	<-deciderDone
	w.mu.Lock()
	require.Empty(t, w.errs, "every decision the API refused other than as too late")
	w.mu.Unlock()

	statuses := map[string]int{}
	cancelledRuns := map[string]bool{}
	for _, id := range ids {
		r := f.GetRun(id)
		statuses[r.Status]++
		require.NotEqual(t, "failed", r.Status, "run %s (#%d): %s", id, w.index[id], r.Error)
		cancelledRuns[id] = r.Status == "cancelled"
	}
	t.Logf("runs: %v (submitted in %s, all ended within %s)", statuses, submitted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	f.Audit.Flush()

	approvals := loadInvariantApprovals(t, f, ids)
	grants := loadInvariantGrants(t, f)
	byCall := map[string]*invApproval{}
	for _, a := range approvals {
		require.Equal(t, store.KindCall, a.Kind)
		require.Equal(t, "run_shell", a.Tool)
		require.NotEqual(t, store.ApprovalPending, a.Status, "approval %s outlived its run", a.ID)
		require.NotEmpty(t, a.PolicyRevision, "approval %s records the policy revision", a.ID)
		byCall[a.SessionID+":"+a.CallID] = a
	}

	// The audit rows of the workload's run_shell calls.
	rows, err := f.Store.Pool.Query(ctx, `SELECT call_key, run_id::text, team, decision, coalesce(args::text, ''), args_hash,
			policy_revision, approval_id, grant_id, edited_by
		FROM tool_audit WHERE run_id = ANY($1::uuid[]) AND tool = 'run_shell' ORDER BY id`, ids)
	require.NoError(t, err)
	var audit []invAudit
	for rows.Next() {
		var r invAudit
		require.NoError(t, rows.Scan(&r.CallKey, &r.RunID, &r.Team, &r.Decision, &r.Args, &r.ArgsHash, &r.PolicyRevision, &r.ApprovalID, &r.GrantID, &r.EditedBy))
		audit = append(audit, r)
	}
	require.NoError(t, rows.Err())

	// Every executed call is bound to exactly one approval or grant, with the
	// hash of the arguments it ran with and the revision it was judged under.
	// Violations are collected, not fatal at the first: a failure reports every
	// case (seed, run, call, hashes) at once.
	violations := map[string][]string{}
	violate := func(kind, format string, a ...any) {
		violations[kind] = append(violations[kind], fmt.Sprintf(format, a...))
	}
	executed := map[string]int{}   // call_key → executed rows
	executedOf := map[string]int{} // approval id → executed rows naming it
	var underGrant, crossRun int
	var ran []string // "run_id command" of every executed row
	for _, r := range audit {
		switch r.Decision {
		case "allowed", "error":
		case "denied", "timed_out":
			continue
		default:
			violate("unexpected decision", "audit row %s: decision %q (the workload makes none of these)", r.CallKey, r.Decision)
			continue
		}
		executed[r.CallKey]++
		var args struct {
			Command string `json:"command"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.Args), &args), "row %s: args %s", r.CallKey, r.Args)
		ran = append(ran, r.RunID+" "+args.Command)
		where := fmt.Sprintf("row %s (run #%d, ran %q)", r.CallKey, w.index[r.RunID], args.Command)
		// No secrets here, so the audited (redacted) arguments are the arguments
		// that ran: the bound hash must be theirs.
		h, err := egress.ArgsHash(json.RawMessage(r.Args))
		require.NoError(t, err)
		if a := approvals[r.ApprovalID]; h != r.ArgsHash && knownEditHashBug(a, r) {
			violate(knownEditHashKind, "%s: args_hash %s is the model's (approval %s), the edit's is %s", where, r.ArgsHash, a.ID, a.EditedArgsHash)
		} else if h != r.ArgsHash {
			violate("args_hash is not the hash of the arguments that ran", "%s: args_hash %s, the arguments hash %s (approval %q, grant %q)",
				where, r.ArgsHash, h, r.ApprovalID, r.GrantID)
		}
		if r.PolicyRevision == "" {
			violate("no policy revision", "%s", where)
		}

		if (r.ApprovalID == "") == (r.GrantID == "") {
			violate("executed without exactly one approval or grant", "%s: approval_id %q, grant_id %q", where, r.ApprovalID, r.GrantID)
			continue
		}
		if r.ApprovalID != "" {
			a, ok := approvals[r.ApprovalID]
			if !ok {
				violate("names a missing approval", "%s: approval %s is none of its run's", where, r.ApprovalID)
				continue
			}
			executedOf[a.ID]++
			if a.SessionID+":"+a.CallID != r.CallKey || a.RunID != r.RunID {
				violate("names another call's approval", "%s: approval %s held %s:%s of run %s", where, a.ID, a.SessionID, a.CallID, a.RunID)
			}
			if a.PolicyRevision != r.PolicyRevision {
				violate("policy revision differs from the approval's", "%s: %s, approval %s %s", where, r.PolicyRevision, a.ID, a.PolicyRevision)
			}
			switch a.Status {
			case store.ApprovalApproved:
				if a.ArgsHash != r.ArgsHash {
					violate("args_hash differs from the approval's", "%s: %s, approved %s binds %s", where, r.ArgsHash, a.ID, a.ArgsHash)
				}
				if r.EditedBy != "" {
					violate("edited_by on an unedited call", "%s: %s", where, r.EditedBy)
				}
			case store.ApprovalEdited:
				if a.EditedArgsHash != r.ArgsHash && !knownEditHashBug(a, r) {
					violate("args_hash differs from the edit's", "%s: %s, edited %s binds %s (the model's arguments hash %s; edited to %s)",
						where, r.ArgsHash, a.ID, a.EditedArgsHash, a.ArgsHash, a.EditedArgs)
				}
				if r.EditedBy == "" {
					violate("edited call without edited_by", "%s: approval %s", where, a.ID)
				}
			default:
				violate("ran under an approval that is not approved or edited", "%s: approval %s is %s", where, a.ID, a.Status)
			}
			continue
		}
		underGrant++
		g, ok := grants[r.GrantID]
		if !ok {
			violate("names a missing grant", "%s: grant %s", where, r.GrantID)
			continue
		}
		if g.Tool != "run_shell" || g.PolicyRevision != r.PolicyRevision {
			violate("grant of another tool or revision", "%s: grant %s is of %s at %s, the row at %s", where, g.ID, g.Tool, g.PolicyRevision, r.PolicyRevision)
		}
		if r.EditedBy != "" {
			violate("edited_by on a granted call", "%s: %s", where, r.EditedBy)
		}
		if a, held := byCall[r.CallKey]; held {
			violate("ran under a grant although held", "%s: grant %s, but the call has approval %s (%s), whose decision wins", where, g.ID, a.ID, a.Status)
		}
		switch g.Match {
		case store.GrantExact:
			if g.Pattern != r.ArgsHash {
				violate("exact grant of another hash", "%s: grant %s binds %s, the row %s", where, g.ID, g.Pattern, r.ArgsHash)
			}
		case store.GrantCommand:
			if !commandCovers(g.Pattern, args.Command) {
				violate("command grant does not cover the command", "%s: grant %s's pattern %q", where, g.ID, g.Pattern)
			}
		default:
			violate("grant of an unexpected match", "%s: grant %s is %s", where, g.ID, g.Match)
		}
		if (g.Scope == store.GrantScopeRun && g.ScopeID != r.RunID) || (g.Scope == store.GrantScopeTeam && g.ScopeID != r.Team) ||
			(g.Scope != store.GrantScopeRun && g.Scope != store.GrantScopeTeam) {
			violate("grant of another scope", "%s: grant %s is of %s %s", where, g.ID, g.Scope, g.ScopeID)
		}
		// The grant came with an approval (approved, naming it).
		if from, ok := approvals[g.ApprovalID]; !ok || from.Status != store.ApprovalApproved || from.GrantID != g.ID {
			violate("grant without its approval", "%s: grant %s from approval %s (%+v)", where, g.ID, g.ApprovalID, from)
		} else if from.RunID != r.RunID {
			crossRun++
		}
	}
	for key, n := range executed {
		if n != 1 {
			violate("a call executed more than once", "call %s executed %d times", key, n)
		}
	}

	// Every approval's call ran once if it was approved or edited, never otherwise.
	counts := map[string]int{}
	for _, a := range approvals {
		key := a.SessionID + ":" + a.CallID
		switch a.Status {
		case store.ApprovalApproved, store.ApprovalEdited:
			// A run is cancelled only while one of its calls waits, and its calls
			// come one at a time: an approved call ran before (or is the call that
			// waits, which then is not approved). So none ended early.
			if executed[key] != 1 || executedOf[a.ID] != 1 {
				violate("approved call did not run exactly once", "%s approval %s (run #%d, cancelled %v): %d executions, %d naming it",
					a.Status, a.ID, w.index[a.RunID], cancelledRuns[a.RunID], executed[key], executedOf[a.ID])
			}
		default:
			if executed[key] != 0 || executedOf[a.ID] != 0 {
				violate("call ran without a yes", "%s approval %s (run #%d): %d executions, %d naming it",
					a.Status, a.ID, w.index[a.RunID], executed[key], executedOf[a.ID])
			}
		}
		switch {
		case a.Status == store.ApprovalApproved && a.GrantID != "":
			counts[decGrant]++
		case a.Status == store.ApprovalApproved:
			counts[decApprove]++
		case a.Status == store.ApprovalEdited:
			counts[decEdit]++
			var e struct{ Command string }
			require.NoError(t, json.Unmarshal(a.EditedArgs, &e))
			if d, _ := shell.Destructive(e.Command); !d {
				counts["edit to a harmless command"]++
			}
		case a.Status == store.ApprovalDenied:
			counts[decDeny]++
		case a.Status == store.ApprovalTimedOut:
			counts[decExpire]++
		case a.Status == store.ApprovalCancelled:
			counts[decCancel]++
		}
	}
	counts["ran under a grant"], counts["ran under another run's grant"] = underGrant, crossRun

	// The independent record: run_shell writes every command it ran to the
	// command log. Each one is an audited execution with its binding, and back.
	cmdRows, err := f.Store.Pool.Query(ctx, `SELECT run_id::text || ' ' || command FROM command_log WHERE run_id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	logged, err := pgx.CollectRows(cmdRows, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(logged)
	slices.Sort(ran)
	require.Equal(t, ran, logged, "the command log holds exactly the audited executions")

	w.mu.Lock()
	late, taken := w.late, map[string]int{}
	for _, kind := range w.decided {
		taken[kind]++
	}
	w.mu.Unlock()
	t.Logf("approvals %d, executed calls %d (%d under a grant); decisions taken: %v; as recorded: %v; refused as too late (409): %d",
		len(approvals), len(ran), underGrant, taken, counts, late)
	// Not vacuous: every kind of decision happened, and grants were spent.
	for _, kind := range []string{decApprove, decGrant, decEdit, decDeny, decExpire, decCancel, "edit to a harmless command", "ran under a grant"} {
		require.GreaterOrEqual(t, counts[kind], 3, "decisions %q (seed %d)", kind, seed)
	}
	total := 0
	for kind, list := range violations {
		total += len(list)
		t.Errorf("%d × %s (seed %d), e.g.:\n  %s", len(list), kind, seed, strings.Join(list[:min(len(list), 5)], "\n  "))
	}
	require.Zero(t, total, "violations of the audit invariant")
}

// knownEditHashKind is a violation of the invariant this test found (fixed in
// eb809bd), kept apart so a regression names it: a call edited into one that no longer escalates (rm -rf … edited to
// echo) runs under its approval, but its audit row keeps the hash of the model's
// arguments, which did not run. The gate's first pass sets the row's hash before
// it re-judges the edit, and the second pass, asking nobody, leaves it there (the
// fallback after the loop fills the hash only when it is empty).
const knownEditHashKind = "edited into a call that does not escalate: audit args_hash is the model's, not the edit's"

// knownEditHashBug tells that case: the row ran under edited approval a, with the
// model's hash, and the edited command is one that does not escalate.
func knownEditHashBug(a *invApproval, r invAudit) bool {
	if a == nil || a.Status != store.ApprovalEdited || r.ArgsHash != a.ArgsHash {
		return false
	}
	var e struct{ Command string }
	if json.Unmarshal(a.EditedArgs, &e) != nil {
		return false
	}
	d, _ := shell.Destructive(e.Command)
	return !d
}

// invariantWorkload decides the workload's approvals.
type invariantWorkload struct {
	f    *fleettest.Fleet
	seed uint64

	mu      sync.Mutex
	index   map[string]int    // run id → run number
	decided map[string]string // approval id → the decision taken
	errs    []string
	late    int // decisions answered 409: the approval expired or its run closed first
}

// commands are run i's two commands: runs 2k and 2k+1 share build_k.
func (w *invariantWorkload) commands(i int) (first, second string) {
	first = fmt.Sprintf("rm -rf build_%d", i/2)
	second = first
	if w.rng(i, "second").IntN(2) == 0 {
		second = fmt.Sprintf("rm -rf build_%d cache_%d", i/2, i/2)
	}
	return first, second
}

// rng is the generator of one (run, purpose): a decision does not depend on the
// order approvals appear in.
func (w *invariantWorkload) rng(run int, purpose string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for _, b := range []byte(strconv.Itoa(run) + "/" + purpose) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return rand.New(rand.NewPCG(w.seed, h))
}

// decide polls the pending approvals and decides each once, concurrently, until
// ctx ends.
func (w *invariantWorkload) decide(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 8)
	for ctx.Err() == nil {
		var list struct {
			Approvals []store.Approval `json:"approvals"`
		}
		code, raw, err := w.do(ctx, "GET", "/api/approvals?status=pending&kind=call&limit=1000", nil)
		if err == nil && code == http.StatusOK {
			err = json.Unmarshal(raw, &list)
		}
		if err != nil || code != http.StatusOK {
			if ctx.Err() == nil {
				w.fail("list approvals: HTTP %d %s: %v", code, raw, err)
			}
			return
		}
		for _, a := range list.Approvals {
			w.mu.Lock()
			run, known := w.index[a.RunID]
			_, done := w.decided[a.ID]
			if !known || done {
				// Not yet indexed (its submission has not returned): next round.
				w.mu.Unlock()
				continue
			}
			kind := w.pick(run, a.CallID)
			w.decided[a.ID] = kind
			w.mu.Unlock()
			if kind == decExpire {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				w.apply(ctx, run, a, kind)
			}()
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (w *invariantWorkload) pick(run int, callID string) string {
	total := 0
	for _, d := range decisionWeights {
		total += d.weight
	}
	n := w.rng(run, callID).IntN(total)
	for _, d := range decisionWeights {
		if n < d.weight {
			return d.kind
		}
		n -= d.weight
	}
	panic("unreachable")
}

// apply takes one decision through the API.
func (w *invariantWorkload) apply(ctx context.Context, run int, a store.Approval, kind string) {
	r := w.rng(run, a.CallID+"/how")
	var cmd struct{ Command string }
	if err := json.Unmarshal(a.Args, &cmd); err != nil {
		w.fail("approval %s: args %s: %v", a.ID, a.Args, err)
		return
	}
	var path string
	var body any
	switch kind {
	case decApprove:
		path, body = "/api/approvals/"+a.ID+"/approve", map[string]any{"reason": "fine"}
	case decGrant:
		grant := store.GrantRequest{Scope: store.GrantScopeRun, Match: store.GrantExact, TTL: "10m"}
		if r.IntN(3) == 0 {
			grant.Scope = store.GrantScopeTeam
		}
		if r.IntN(2) == 0 {
			// The call's own words, or its first three (rm -rf build_k) and any
			// further arguments: narrow, and either covers the call it approves.
			grant.Match, grant.Pattern = store.GrantCommand, cmd.Command
			if r.IntN(2) == 0 {
				grant.Pattern = strings.Join(strings.Fields(cmd.Command)[:3], " ") + " *"
			}
		}
		path, body = "/api/approvals/"+a.ID+"/approve", map[string]any{"reason": "fine, and the like", "grant": grant}
	case decEdit:
		edited := cmd.Command + "_edited"
		if r.IntN(2) == 0 {
			edited = "echo edited" // no longer escalates: still bound to the edit
		}
		path, body = "/api/approvals/"+a.ID+"/edit", map[string]any{"args": map[string]any{"command": edited}, "reason": "this instead"}
	case decDeny:
		path, body = "/api/approvals/"+a.ID+"/deny", map[string]any{"reason": "not now"}
	case decCancel:
		path = "/api/runs/" + a.RunID + "/cancel"
	}
	code, raw, err := w.do(ctx, "POST", path, body)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			w.fail("%s %s: %v", kind, a.ID, err)
		}
	case code == http.StatusConflict:
		// Decided too late (the window closed): recorded as what it became.
		w.mu.Lock()
		w.late++
		w.mu.Unlock()
	case code != http.StatusOK:
		w.fail("%s %s (run #%d): HTTP %d: %s", kind, a.ID, run, code, raw)
	}
}

// do is Fleet.Do for the decider's goroutines: errors are returned, not fatal.
func (w *invariantWorkload) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.f.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.f.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func (w *invariantWorkload) fail(format string, a ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, fmt.Sprintf(format, a...))
}

// invApproval is an approval row as the invariant reads it.
type invApproval struct {
	ID, RunID, SessionID, CallID, Kind, Tool, Status  string
	ArgsHash, EditedArgsHash, PolicyRevision, GrantID string
	EditedArgs                                        json.RawMessage
}

func loadInvariantApprovals(t *testing.T, f *fleettest.Fleet, ids []string) map[string]*invApproval {
	t.Helper()
	rows, err := f.Store.Pool.Query(context.Background(), `SELECT id, run_id::text, session_id, call_id, kind, tool, status,
			args_hash, edited_args_hash, policy_revision, grant_id, coalesce(edited_args, 'null'::jsonb)
		FROM approvals WHERE run_id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]*invApproval{}
	for rows.Next() {
		var a invApproval
		require.NoError(t, rows.Scan(&a.ID, &a.RunID, &a.SessionID, &a.CallID, &a.Kind, &a.Tool, &a.Status,
			&a.ArgsHash, &a.EditedArgsHash, &a.PolicyRevision, &a.GrantID, &a.EditedArgs))
		out[a.ID] = &a
	}
	require.NoError(t, rows.Err())
	return out
}

func loadInvariantGrants(t *testing.T, f *fleettest.Fleet) map[string]store.Grant {
	t.Helper()
	rows, err := f.Store.Pool.Query(context.Background(), `SELECT id, approval_id, owner, scope, scope_id, tool, match, pattern, policy_revision FROM grants`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]store.Grant{}
	for rows.Next() {
		var g store.Grant
		require.NoError(t, rows.Scan(&g.ID, &g.ApprovalID, &g.Owner, &g.Scope, &g.ScopeID, &g.Tool, &g.Match, &g.Pattern, &g.PolicyRevision))
		out[g.ID] = g
	}
	require.NoError(t, rows.Err())
	return out
}

// invAudit is a tool_audit row as the invariant reads it.
type invAudit struct {
	CallKey, RunID, Team, Decision, Args, ArgsHash, PolicyRevision, ApprovalID, GrantID, EditedBy string
}

// commandCovers re-judges a command grant as the contract states it: every
// command the shell parse yields starts with the pattern's words (exactly the
// words without a final *).
func commandCovers(pattern, command string) bool {
	words := strings.Fields(pattern)
	rest := len(words) > 0 && words[len(words)-1] == "*"
	if rest {
		words = words[:len(words)-1]
	}
	cmds, err := shell.Words(command)
	if err != nil || len(cmds) == 0 {
		return false
	}
	for _, c := range cmds {
		if len(c) < len(words) || (!rest && len(c) != len(words)) || !slices.Equal(c[:len(words)], words) {
			return false
		}
	}
	return true
}
