package studio_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// The decisions inbox end to end (docs/humans-in-the-loop.md): alice's team
// asks her a question with ask_user and another of her runs holds a Restricted
// call. The nav's badge counts both for her and for the on-call approver; the
// approver sees both on a phone-wide screen without sideways scroll, tries two
// bad edits (the Studio's JSON check, then the API's 400), and rejects the call
// with feedback; alice answers her question by clicking a choice. Both runs
// complete, the model got the answer and the feedback as its tool results, the
// decisions are in the history, and no text the agents wrote ran as markup.
func TestStudioInboxInTheBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)

	question := "Which database should the service use? " + xssImg
	asks := submitTeam(t, f, "alice", scriptTeam("asks", []string{"workspace"},
		[]map[string]any{
			calls(call("ask_user", map[string]any{"question": question, "choices": []string{"postgres", xssScript}})),
			calls(call("reply", map[string]any{"message": "going with the answer"})),
		},
		[]map[string]any{{"say": "unused"}}), "ask which database")
	held := scriptTeam("held", []string{"workspace", "research"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "fetch the paper"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/paper.pdf?" + xssImg})),
			{"say": "could not fetch it"},
		})
	held["allowed_domains"] = []string{"127.0.0.1"} // private destinations need the allowlist
	rejected := submitTeam(t, f, "alice", held, "fetch a paper (will be rejected)")

	b := newBrowser(t, f.URL)
	alice := b.tab()
	alice.signIn("alice")
	// The count is of what alice may see: her question and her held call.
	alice.run("alice's badge counts both", chromedp.WaitVisible(css(`#inbox-count[data-count="2"]`)))
	require.Equal(t, "2", alice.text("#inbox-count"))

	oncall := b.tab()
	oncall.signIn("oncall")
	oncall.run("the approver's badge", chromedp.WaitVisible(css(`#inbox-count[data-count="2"]`)))
	oncall.run("open the inbox",
		chromedp.Click(css(`#nav a[data-nav="inbox"]`)),
		chromedp.WaitVisible(css(`article[data-kind="call"]`)),
		chromedp.WaitVisible(css(`article[data-kind="question"]`)),
	)
	callCard := `article[data-kind="call"]`
	require.Contains(t, oncall.text(callCard), "download_pdf")
	require.Contains(t, oncall.text(callCard), "writer", "the requesting agent")
	require.Contains(t, oncall.text(callCard), rejected, "its run")
	require.Contains(t, oncall.text(callCard), "http://127.0.0.1:1/paper.pdf?"+xssImg, "the URL, as text")
	require.Regexp(t, `\d+m \d+s left`, oncall.text(callCard+" [data-expires]"))
	require.Contains(t, oncall.text(`article[data-kind="question"] .question-text`), question, "the question, as text")
	require.Equal(t, 2, oncall.count(`article[data-kind="question"] button.choice`))
	require.Equal(t, xssScript, oncall.text(`article[data-kind="question"] button.choice[data-index="1"]`))
	oncall.screenshot("inbox")
	assertNoScriptRan(t, oncall, b)

	// A phone: the inbox wraps, nothing scrolls sideways.
	oncall.run("phone width", chromedp.EmulateViewport(390, 844), chromedp.WaitVisible(css(callCard)))
	require.Equal(t, "fits", oncall.evalString(`document.documentElement.scrollWidth <= window.innerWidth ? 'fits' : 'wider: ' + document.documentElement.scrollWidth`))
	oncall.screenshot("inbox-phone")
	oncall.run("desktop width", chromedp.EmulateViewport(1200, 800))

	// Edit: text that is not JSON is caught before it is sent; JSON that is
	// not an object is the API's 400, shown on the card, which stays.
	oncall.run("edit with broken JSON",
		chromedp.Click(css(callCard+" button.open-edit")),
		chromedp.WaitVisible(css(callCard+" textarea.edit-args")),
		chromedp.SetValue(css(callCard+" textarea.edit-args"), `{"url": `),
		chromedp.Click(css(callCard+" button.edit-submit")),
		chromedp.WaitVisible(css(callCard+" .outcome .error")),
	)
	require.Contains(t, oncall.text(callCard+" .outcome .error"), "not valid JSON")
	oncall.run("edit with an array",
		chromedp.SetValue(css(callCard+" textarea.edit-args"), `["http://127.0.0.1:1/other.pdf"]`),
		chromedp.Click(css(callCard+" button.edit-submit")),
		chromedp.WaitVisible(css(callCard+" .outcome .error")),
	)
	apiErr := oncall.text(callCard + " .outcome .error")
	require.NotContains(t, apiErr, "not valid JSON", "the API answered")
	require.Contains(t, apiErr, "JSON object", "the API's 400, as it said it")
	t.Logf("the API's answer to an array: %s", apiErr)
	require.Equal(t, 1, oncall.count(callCard), "a refused edit decides nothing")

	// Reject with feedback.
	feedback := "use the cached copy in docs/ " + xssScript
	oncall.run("reject with feedback",
		chromedp.Click(css(callCard+" button.open-reject")),
		chromedp.WaitVisible(css(callCard+" textarea.feedback")),
		chromedp.SetValue(css(callCard+" textarea.feedback"), feedback),
		chromedp.Click(css(callCard+" button.deny")),
		chromedp.WaitNotPresent(css(callCard)),
		chromedp.WaitVisible(css(`#inbox-count[data-count="1"]`)),
		chromedp.WaitVisible(css(`#history tr[data-status="denied"]`)),
	)
	require.Contains(t, oncall.text(`#history tr[data-status="denied"]`), "oncall", "who decided")
	require.Contains(t, oncall.text(`#history tr[data-status="denied"]`), feedback, "the feedback, as text")
	assertNoScriptRan(t, oncall, b)

	// alice answers her own question (the run's owner may) with a choice.
	alice.run("alice answers",
		chromedp.Click(css(`#nav a[data-nav="inbox"]`)),
		chromedp.WaitVisible(css(`article[data-kind="question"] button.choice[data-index="0"]`)),
	)
	require.Equal(t, 1, alice.count(`article[data-approval]`), "only the question waits")
	alice.run("click a choice",
		chromedp.Click(css(`article[data-kind="question"] button.choice[data-index="0"]`)),
		chromedp.WaitNotPresent(css(`article[data-kind="question"]`)),
		chromedp.WaitVisible(css(`#inbox p.empty`)),
		chromedp.WaitNotVisible(css(`#inbox-count`)),
		chromedp.WaitVisible(css(`#history tr[data-status="answered"]`)),
	)
	require.Contains(t, alice.text(`#history tr[data-status="answered"]`), "postgres")
	require.Equal(t, "0", alice.evalString(`document.getElementById('inbox-count').getAttribute('data-count')`))
	alice.screenshot("inbox-answered")

	// Both runs go on and complete; the timeline shows the decisions.
	alice.open("/app/runs/"+asks, `#timeline li[data-type="run.completed"]`)
	require.Contains(t, alice.text(`#timeline li[data-type="approval.decided"]`), "answered")
	require.Contains(t, alice.text(`#timeline li[data-type="approval.requested"] .question-text`), question, "the question's card shows it, as text")
	alice.open("/app/runs/"+rejected, `#timeline li[data-type="run.completed"]`)
	assertNoScriptRan(t, alice, b)

	// What the model read: the answer, and the feedback marked as a human's.
	answer := toolResult(t, f, asks, "boss", "ask_user")
	require.Contains(t, answer.Content, "postgres")
	refusal := toolResult(t, f, rejected, "writer", "download_pdf")
	require.True(t, refusal.IsError, "a rejection is an error result")
	require.Contains(t, refusal.Content, "rejected by a human reviewer (oncall)")
	require.Contains(t, refusal.Content, feedback)
	require.Zero(t, b.dialogs.Load())
}

// toolResult is the tool message agent's session of run got for its call of
// tool: what the model read.
func toolResult(t *testing.T, f *fleettest.Fleet, run, agent, tool string) llm.Message {
	t.Helper()
	ctx := context.Background()
	sessions, err := f.Store.RunSessions(ctx, run)
	require.NoError(t, err)
	for _, s := range sessions {
		if s.Agent != agent {
			continue
		}
		msgs, _, err := f.Store.SessionHistory(ctx, s.ID, -1, 1000)
		require.NoError(t, err)
		for _, m := range msgs {
			if m.Message.Role == llm.RoleTool && m.Message.Name == tool {
				return m.Message
			}
		}
	}
	t.Fatalf("run %s: no %s result in %s's sessions", run, tool, agent)
	return llm.Message{}
}

// Approve with a grant from the inbox: the writer grabs the headset's picture
// twice with the same arguments (frame_grab is Restricted and reads nothing
// untrusted, so a grant may cover it; no headset is configured, so each call
// that passes the gate fails after it, which is enough here). The approver
// approves the first call with a run-scoped exact grant, the second call runs
// without asking, and the grant is listed and then revoked.
func TestStudioInboxGrantInTheBrowser(t *testing.T) {
	t.Parallel()
	// The fleet's own copy of the permissions, watched: a change of it
	// suspends the grant until an approver confirms it.
	rules, err := os.ReadFile(fleettest.RepoPath(t, "config/permissions.yaml"))
	require.NoError(t, err)
	rulesPath := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rulesPath, rules, 0o644))
	f := startFleet(t, func(c *config.Config) { c.Security.PermissionsFile = rulesPath })
	watch, stopWatch := context.WithCancel(context.Background())
	t.Cleanup(stopWatch)
	require.NoError(t, f.WatchRules(watch))
	team := scriptTeam("granted", []string{"workspace", "device"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "grab the headset twice"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("frame_grab", map[string]any{})),
			calls(call("frame_grab", map[string]any{})),
			{"say": "tried both"},
		})
	run := submitTeam(t, f, "alice", team, "grab twice (one grant)")

	b := newBrowser(t, f.URL)
	oncall := b.tab()
	oncall.signIn("oncall")
	callCard := `article[data-kind="call"]`
	oncall.open("/app/inbox", callCard)
	oncall.run("open the grant form",
		chromedp.Click(css(callCard+" button.open-grant")),
		chromedp.WaitVisible(css(callCard+" select.grant-scope")),
	)
	require.Equal(t, "exact", oncall.evalString(`document.querySelector('`+callCard+` select.grant-match').value`), "no URL, no command: the same arguments")
	require.Equal(t, "true", oncall.evalString(`String(document.querySelector('`+callCard+` input.grant-pattern').disabled)`))
	require.Equal(t, "run", oncall.evalString(`document.querySelector('`+callCard+` select.grant-scope').value`))
	oncall.screenshot("inbox-grant")
	oncall.run("approve with the grant",
		chromedp.Click(css(callCard+" button.grant-submit")),
		chromedp.WaitNotPresent(css(callCard)),
		chromedp.WaitVisible(css(`#grants tr[data-status="active"]`)),
		chromedp.WaitVisible(css(`#history tr[data-status="approved"] code`)),
	)
	row := oncall.text(`#grants tr[data-status="active"]`)
	require.Contains(t, row, "frame_grab")
	require.Contains(t, row, "exact")
	require.Contains(t, row, "oncall", "who made it")
	require.Contains(t, row, "for alice", "whose runs it covers")
	require.Contains(t, oncall.text(`#history tr[data-status="approved"]`), "grant grt_", "the decision names its grant")

	// The second grab ran under the grant: the run completes and no second
	// approval was asked (alice watches: the approver does not read her runs).
	alice := b.tab()
	alice.signIn("alice")
	// The terminal card comes last: every card before it is in the timeline.
	alice.open("/app/runs/"+run, `#timeline li[data-type="run.completed"]`)
	require.Equal(t, 1, alice.count(`#timeline li[data-type="approval.requested"]`), "the grant covered the second call")
	rows, err := f.Store.RunAudit(context.Background(), run, 100)
	require.NoError(t, err)
	var grabs []string
	for _, r := range rows {
		if r.Tool == "frame_grab" {
			grabs = append(grabs, r.ApprovedBy)
		}
	}
	require.Len(t, grabs, 2)
	require.Contains(t, strings.Join(grabs, " | "), "grant grt_", "one grab ran under the grant")

	oncall.open("/app/inbox", `#grants tr[data-status="active"]`)
	require.Zero(t, oncall.count(callCard))

	// A change of the permissions suspends the grant; Confirm rebinds it to
	// the permissions in force.
	require.NoError(t, os.WriteFile(rulesPath, append(rules, []byte("\n# changed\n")...), 0o644))
	require.Eventually(t, func() bool {
		gs, err := f.Store.ListGrants(context.Background(), store.GrantFilter{Limit: 10}, f.Rules.Current().Revision())
		return err == nil && len(gs) == 1 && gs[0].Status == store.GrantSuspended
	}, 20*time.Second, 100*time.Millisecond, "the reload suspends the grant")
	oncall.open("/app/inbox", `#grants tr[data-status="suspended"] button.confirm`)
	require.Equal(t, 1, oncall.count(`#grants tr[data-status="suspended"] button.revoke`), "a suspended grant may be revoked too")
	oncall.screenshot("inbox-grant-suspended")
	oncall.run("confirm",
		chromedp.Click(css(`#grants tr[data-status="suspended"] button.confirm`)),
		chromedp.WaitVisible(css(`#grants tr[data-status="active"]`)),
	)
	require.Contains(t, oncall.text(`#grants tr[data-status="active"]`), f.Rules.Current().Revision(), "bound to the permissions in force")

	// On a phone the grants and the history are one block per row.
	oncall.run("phone width", chromedp.EmulateViewport(390, 844), chromedp.WaitVisible(css(`#grants tr[data-status="active"]`)))
	require.Equal(t, "fits", oncall.evalString(`document.documentElement.scrollWidth <= window.innerWidth ? 'fits' : 'wider: ' + document.documentElement.scrollWidth`))
	oncall.screenshot("inbox-grants-phone")
	oncall.run("desktop width", chromedp.EmulateViewport(1200, 800))

	oncall.run("revoke",
		chromedp.Click(css(`#grants tr[data-status="active"] button.revoke`)),
		chromedp.WaitVisible(css(`#grants tr[data-status="revoked"]`)),
	)
	require.Zero(t, oncall.count(`#grants tr[data-status="revoked"] button`), "a revoked grant has no buttons")
	assertNoScriptRan(t, oncall, b)
}

// Edit from the inbox: the approver changes the URL of a held download; the
// edited call passes the gate again and runs, the history shows the edited
// arguments, and the model reads that a human edited its call and the edited
// call's result.
func TestStudioInboxEditInTheBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	team := scriptTeam("edited", []string{"workspace", "research"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "fetch the paper"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/mirror-of-evil.pdf"})),
			{"say": "fetched"},
		})
	team["allowed_domains"] = []string{"127.0.0.1"}
	run := submitTeam(t, f, "alice", team, "fetch a paper (will be edited)")

	b := newBrowser(t, f.URL)
	oncall := b.tab()
	oncall.signIn("oncall")
	callCard := `article[data-kind="call"]`
	oncall.open("/app/inbox", callCard)
	require.Contains(t, oncall.evalString(`document.querySelector('`+callCard+` textarea.edit-args').value`), `"url": "http://127.0.0.1:1/mirror-of-evil.pdf"`, "prefilled with the arguments")
	oncall.run("edit",
		chromedp.Click(css(callCard+" button.open-edit")),
		chromedp.SetValue(css(callCard+" textarea.edit-args"), `{"url": "http://127.0.0.1:1/papers/the-real-one.pdf"}`),
		chromedp.SendKeys(css(callCard+" input.reason"), "the official copy"),
		chromedp.Click(css(callCard+" button.edit-submit")),
		chromedp.WaitNotPresent(css(callCard)),
		chromedp.WaitVisible(css(`#history tr[data-status="edited"]`)),
	)
	hist := oncall.evalString(`document.querySelector('#history tr[data-status="edited"]').textContent`)
	require.Contains(t, hist, "the-real-one.pdf", "the edited arguments")
	require.Contains(t, hist, "the official copy")
	require.Contains(t, hist, "oncall")

	alice := b.tab()
	alice.signIn("alice")
	alice.open("/app/runs/"+run, `#timeline li[data-type="run.completed"]`)
	require.Contains(t, alice.text(`#timeline li[data-type="approval.decided"]`), "edited")
	got := toolResult(t, f, run, "writer", "download_pdf")
	require.False(t, got.IsError, got.Content)
	require.Contains(t, got.Content, "downloaded http://127.0.0.1:1/papers/the-real-one.pdf", "the edited call ran")
	require.Contains(t, strings.ToLower(got.Content), "edited", "the model is told a human edited its call")
	assertNoScriptRan(t, oncall, b)
}

// A question without choices is answered in the inbox's free answer box, here
// by the on-call approver (any approver may answer), and the model reads it.
func TestStudioInboxFreeAnswerInTheBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	run := submitTeam(t, f, "alice", scriptTeam("asks-free", []string{"workspace"},
		[]map[string]any{
			calls(call("ask_user", map[string]any{"question": "What should the service be called?"})),
			calls(call("reply", map[string]any{"message": "named"})),
		},
		[]map[string]any{{"say": "unused"}}), "ask for a name")

	b := newBrowser(t, f.URL)
	oncall := b.tab()
	oncall.signIn("oncall")
	card := `article[data-kind="question"]`
	oncall.open("/app/inbox", card+" textarea.answer")
	require.Zero(t, oncall.count(card+" button.choice"), "no choices, no choice buttons")
	answer := "aetherium-docs </textarea><img src=x onerror=alert(1)>"
	oncall.run("answer",
		chromedp.SendKeys(css(card+" textarea.answer"), answer),
		chromedp.Click(css(card+" button.answer-submit")),
		chromedp.WaitNotPresent(css(card)),
		chromedp.WaitVisible(css(`#history tr[data-status="answered"]`)),
	)
	require.Contains(t, oncall.text(`#history tr[data-status="answered"]`), answer)
	require.Contains(t, oncall.text(`#history tr[data-status="answered"]`), "oncall")

	alice := b.tab()
	alice.signIn("alice")
	alice.open("/app/runs/"+run, `#timeline li[data-type="run.completed"]`)
	require.Contains(t, toolResult(t, f, run, "boss", "ask_user").Content, answer)
	assertNoScriptRan(t, oncall, b)
}
