package studio_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
)

var screenshots = flag.String("screenshots", "", "save the Studio's screenshots in this directory (../docs/screenshots refreshes the README's)")

// tokens of the browser fleet: two submitters, the on-call approver and an admin.
var tokens = map[string][]string{
	"alice":  {api.RoleSubmit, api.RoleRead},
	"bob":    {api.RoleSubmit, api.RoleRead},
	"oncall": {api.RoleRead, api.RoleApprove},
	"admin":  {api.RoleRead, api.RoleAdmin},
}

func secret(name string) string { return name + "-secret" }

// chromiumPath finds Debian's chromium. CI must run the browser tests, so there
// a missing browser fails the test instead of skipping it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (make services installs it): CI runs the Studio's browser tests")
	}
	t.Skip("chromium is not installed (make services installs it)")
	return ""
}

// startFleet starts the browser fleet; configure, if any, changes its config
// after the common settings.
func startFleet(t *testing.T, configure ...func(*config.Config)) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleettest.Options{
		Configure: func(c *config.Config) {
			c.Security.ApprovalWindow = 5 * time.Minute
			// The Studio's fleet has its own approver (oncall): the production
			// default, where nobody decides a call of a run of its own.
			c.Security.AllowSelfApproval = false
			c.API.Tokens = nil
			for name, roles := range tokens {
				c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(secret(name)), Roles: roles})
			}
			for _, fn := range configure {
				fn(c)
			}
		},
		Fleet: fleet.Options{ExtraTools: fleettest.StandInPDF},
	})
}

// submitTeam posts an inline team as token's principal.
func submitTeam(t *testing.T, f *fleettest.Fleet, token string, team map[string]any, prompt string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"team": team, "prompt": prompt})
	require.NoError(t, err)
	req, err := http.NewRequest("POST", f.URL+"/api/orchestrator/run", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+secret(token))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		RunID string `json:"run_id"`
		Error string `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, http.StatusAccepted, resp.StatusCode, out.Error)
	return out.RunID
}

func scriptTeam(name string, workerServers []string, boss, writer []map[string]any) map[string]any {
	return map[string]any{
		"name":  name,
		"model": map[string]any{"provider": "script"},
		"supervisor": map[string]any{
			"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration", "planning", "comms"},
		},
		"workers": []map[string]any{{"name": "writer", "prompt": "write", "mcp_servers": workerServers}},
		"script":  map[string]any{"agents": map[string]any{"boss": boss, "writer": writer}},
	}
}

func calls(cs ...map[string]any) map[string]any { return map[string]any{"calls": cs} }

func call(tool string, args map[string]any) map[string]any {
	return map[string]any{"tool": tool, "args": args}
}

// studioBrowser is one headless chromium; tabs are its pages, each with its own
// sessionStorage (so its own signed-in token).
type studioBrowser struct {
	t       *testing.T
	base    string
	root    context.Context
	dialogs atomic.Int32
	shots   string
}

func newBrowser(t *testing.T, base string) *studioBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		// Root in a container: chromium's own sandbox cannot start here.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 800),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	root, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(root), "start chromium")
	shots := *screenshots
	if shots != "" {
		require.NoError(t, os.MkdirAll(shots, 0o755))
	}
	return &studioBrowser{t: t, base: base, root: root, shots: shots}
}

type tab struct {
	b   *studioBrowser
	ctx context.Context
}

// tab opens a page. A JavaScript dialog (alert, confirm) is counted and
// dismissed: the XSS payloads call alert, and none may ever open.
func (b *studioBrowser) tab() *tab {
	ctx, cancel := chromedp.NewContext(b.root)
	b.t.Cleanup(cancel)
	require.NoError(b.t, chromedp.Do(ctx))
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			b.dialogs.Add(1)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return &tab{b: b, ctx: ctx}
}

func (tb *tab) fail(what string, err error) {
	tb.b.t.Helper()
	text, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	tb.b.t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
}

func (tb *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.fail(what, err)
	}
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

func (tb *tab) signIn(token string) {
	tb.b.t.Helper()
	tb.run("sign in as "+token,
		chromedp.Navigate(tb.b.base+"/"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), secret(token)),
		chromedp.Click(css("#signin-submit")),
		chromedp.WaitNotPresent(css("#signin")),
	)
}

// open navigates inside the signed-in tab (the token stays in its sessionStorage).
func (tb *tab) open(path, waitFor string) {
	tb.b.t.Helper()
	tb.run("open "+path, chromedp.Navigate(tb.b.base+path), chromedp.WaitVisible(css(waitFor)))
}

func (tb *tab) location() string {
	tb.b.t.Helper()
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		tb.fail("location", err)
	}
	return loc
}

func (tb *tab) screenshot(name string) {
	tb.b.t.Helper()
	if tb.b.shots == "" {
		return
	}
	time.Sleep(300 * time.Millisecond)
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.fail("screenshot "+name, err)
	}
	require.NoError(tb.b.t, os.WriteFile(filepath.Join(tb.b.shots, name+".png"), png, 0o644))
}

// text reads an element's visible text in one evaluation in the page: the run
// page re-renders its header as events arrive, and a node found first and read
// second may be gone in between ("No node with given id found").
func (tb *tab) text(sel string) string {
	tb.b.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e && e.getClientRects().length > 0 ? e.innerText : null; })()`, sel)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[*string](js))
		if err != nil {
			tb.fail("text of "+sel, err)
		}
		if s != nil {
			return *s
		}
		if time.Now().After(deadline) {
			tb.fail("text of "+sel, fmt.Errorf("no visible element after 30 s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tb *tab) evalString(js string) string {
	tb.b.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		tb.fail("evaluate "+js, err)
	}
	return s
}

func (tb *tab) count(sel string) int {
	tb.b.t.Helper()
	n, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		tb.fail("count "+sel, err)
	}
	return n
}

// The Studio end to end in a real browser: sign in; start the demo run from the
// form and see its timeline fill to completed with its typed cards; open a run
// that waits for an approval, approve it from the on-call approver's inbox in
// another tab and see the first tab's timeline go on live; another submitter
// cannot see the run. Saves a screenshot of each page with -screenshots.
func TestStudioInTheBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	b := newBrowser(t, f.URL)
	alice := b.tab()

	alice.run("sign-in page", chromedp.Navigate(f.URL+"/"), chromedp.WaitVisible(css("#token")))
	require.Equal(t, f.URL+"/app", alice.location(), "/ redirects to the Studio")
	alice.screenshot("signin")
	alice.signIn("alice")

	// The demo run, from the form: the template's variable is asked for.
	alice.run("new run form",
		chromedp.WaitVisible(css(`#variables input[data-var="topic"]`)),
		chromedp.SendKeys(css("#prompt"), "Say hello in a file"),
		chromedp.SendKeys(css(`#variables input[data-var="topic"]`), "greetings"),
	)
	alice.screenshot("runs-new")
	alice.run("start the demo run",
		chromedp.Click(css("#start-run")),
		chromedp.WaitVisible(css("#run-head")),
		chromedp.WaitVisible(css(`#timeline li[data-type="run.completed"]`)),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
	)
	loc := alice.location()
	demoRun := strings.TrimPrefix(loc, f.URL+"/app/runs/")
	require.Len(t, demoRun, 36, loc)
	// The typed cards: plan with its step ticked, progress, the delegation and
	// its tree, the write as a diff, the result and tokens against the budget.
	alice.run("typed cards",
		chromedp.WaitVisible(css(`#plan li.step.completed`)),
		chromedp.WaitVisible(css(`.diff .add`)),
		chromedp.WaitVisible(css(`#delegations li[data-delegation]`)),
	)
	for _, typ := range []string{"run.queued", "run.started", "progress", "delegation.created", "delegation.finished", "tool.call", "agent.message"} {
		require.Positive(t, alice.count(`#timeline li[data-type="`+typ+`"]`), "a %s card", typ)
	}
	require.Contains(t, alice.text(".diff"), "+ hello from the aetherium fleet")
	require.Contains(t, alice.text("#plan"), "Write hello.txt")
	require.Contains(t, alice.text("#run-result"), "hello.txt is written")
	require.Regexp(t, `^\d+ used of 200000$`, alice.text("#tokens"))
	require.Contains(t, alice.text("#delegations"), "writer")
	alice.screenshot("run")

	// A post-run event, stored after the terminal one, is read by resuming
	// past it; an event type without a card of its own gets the generic one.
	require.NoError(t, f.Events.Emit(context.Background(), demoRun, "postrun-test", events.PostRunFinishImage, "", events.FinishImageData{Status: "skipped", RunStatus: "completed"}))
	alice.open("/app/runs/"+demoRun, `#timeline li[data-type="postrun.finish_image"].generic`)
	require.Contains(t, alice.text(`#stream-state`), "finished")

	// The run list, newest first, with a status filter.
	alice.open("/app/runs?status=completed", `#runs tr[data-run="`+demoRun+`"]`)
	alice.screenshot("runs")
	// An MCP client's session run is labelled as one, without a token count.
	session, err := f.Store.EnsureMCPRun(context.Background(), "alice", "ide", json.RawMessage(`{"name":"mcp:ide"}`), "")
	require.NoError(t, err)
	alice.open("/app/runs?status=running", `#runs tr[data-run="`+session.ID+`"] .kind-mcp`)
	require.Contains(t, alice.text(`#runs tr[data-run="`+session.ID+`"]`), "MCP session · ide")

	// The workspace browser, the audit, the catalog and the leases.
	alice.open("/app/runs/"+demoRun+"/files", `#files tr[data-file="hello.txt"]`)
	alice.screenshot("files")
	alice.open("/app/audit?run="+demoRun, "#audit tbody tr[data-audit]")
	require.Contains(t, alice.text("#audit"), "write_file")
	alice.screenshot("audit")
	alice.open("/app/tools", "#tools .group")
	require.Contains(t, alice.text("#tools"), "run_shell")
	require.Contains(t, alice.text("#tools"), "restricted")
	alice.screenshot("tools")
	alice.open("/app/leases", "main section")
	alice.screenshot("leases")

	// A run that waits for a human: its writer downloads a PDF (Restricted).
	needsApproval := scriptTeam("needs-approval", []string{"workspace", "research"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "fetch the paper"})),
			calls(call("reply", map[string]any{"message": "the paper is fetched"})),
		},
		[]map[string]any{
			calls(call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/paper.pdf"})),
			{"say": "fetched"},
		})
	needsApproval["allowed_domains"] = []string{"127.0.0.1"} // private destinations need the allowlist
	waiting := submitTeam(t, f, "alice", needsApproval, "fetch a paper (needs approval)")
	alice.open("/app/runs", `#runs tr[data-run="`+waiting+`"]`)
	alice.run("open the waiting run",
		chromedp.Click(css(`#runs tr[data-run="`+waiting+`"] a`)),
		chromedp.WaitVisible(css(`#timeline li[data-type="approval.requested"]`)),
	)
	require.Zero(t, alice.count(`#timeline li[data-type="run.completed"]`), "the run waits")
	require.Contains(t, alice.text(`#timeline li[data-type="approval.requested"]`), "restricted tool", "the timeline says why it waits")
	alice.screenshot("run-waiting")

	oncall := b.tab()
	oncall.signIn("oncall")
	oncall.open("/app/approvals", "article[data-approval]")
	require.Contains(t, oncall.text("article[data-approval]"), "http://127.0.0.1:1/paper.pdf", "the exact URL")
	require.Contains(t, oncall.text("article[data-approval]"), "writer", "the requesting agent")
	require.Contains(t, oncall.text("article[data-approval]"), waiting, "its run")
	require.Regexp(t, `\d+m \d+s left`, oncall.text("article[data-approval] [data-expires]"))
	oncall.screenshot("approvals")
	oncall.run("approve",
		chromedp.SendKeys(css("article[data-approval] input.reason"), "paper is fine"),
		chromedp.Click(css("article[data-approval] button.approve")),
		chromedp.WaitNotPresent(css("article[data-approval]")),
	)

	// The first tab was not reloaded: its stream brings the rest.
	alice.run("the run goes on live",
		chromedp.WaitVisible(css(`#timeline li[data-type="approval.decided"]`)),
		chromedp.WaitVisible(css(`#timeline li[data-type="run.completed"]`)),
		chromedp.WaitVisible(css(`#run-status[data-status="completed"]`)),
	)
	require.Contains(t, alice.text(`#timeline li[data-type="approval.decided"]`), "approved")
	alice.screenshot("run-approved")

	// The search box asks the API (every run alice may see, not only one page).
	alice.open("/app/runs?q=HELLO+in+a", `#runs tr[data-run="`+demoRun+`"]`)
	require.Zero(t, alice.count(`#runs tr[data-run="`+waiting+`"]`), "the search leaves out the run whose prompt does not match")
	require.Equal(t, "HELLO in a", alice.evalString(`document.querySelector("#search").value`))

	// Another submitter sees neither the run nor its files.
	bob := b.tab()
	bob.signIn("bob")
	bob.open("/app/runs", "#runs tbody tr")
	require.Zero(t, bob.count(`#runs tr[data-run="`+demoRun+`"]`))
	require.Zero(t, bob.count(`#runs tr[data-run="`+waiting+`"]`))
	bob.open("/app/runs/"+demoRun, "main .error")
	require.Contains(t, bob.text("main .error"), "not found")
	bob.open("/app/runs/"+demoRun+"/files", "main .error")
	require.Contains(t, bob.text("main .error"), "not found")
	bob.screenshot("other-owner")
	require.Zero(t, b.dialogs.Load())
}

// Payloads an agent may write. Each sets window.__xss and opens a dialog if it
// ever runs.
const (
	xssImg    = `<img src=x onerror="window.__xss='img';alert('img')">`
	xssScript = `<script>window.__xss='script';alert('script')</script>`
	xssHTML   = `<!doctype html><html><body onload="window.__xss='body'">` + xssScript + xssImg + `</body></html>`
	xssSVG    = `<svg xmlns="http://www.w3.org/2000/svg" onload="window.__xss='svg';alert('svg')"><script>window.__xss='svg-script'</script>` +
		`<image href="x" onerror="window.__xss='svg-image'"/></svg>`
	xssName = `x<img src=x onerror=window.__xss=1>.txt`
)

// A run whose agents write XSS payloads into every string the Studio shows:
// messages, the plan, a notification, the delegation task and result, file
// names and contents (an .html and an .svg), the result. The Studio shows them
// as text or offers them as downloads, and no script runs.
func TestStudioShowsAgentOutputAsText(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	payload := xssImg + xssScript
	id := submitTeam(t, f, "alice", scriptTeam("xss", []string{"workspace"},
		[]map[string]any{
			calls(call("create_plan", map[string]any{"goal": payload, "steps": []string{xssImg, xssScript}}),
				call("notify_user", map[string]any{"message": payload}),
				call("report_progress", map[string]any{"percent": 40, "message": payload})),
			calls(call("delegate", map[string]any{"agent": "writer", "task": payload})),
			calls(call("update_plan", map[string]any{"step": 1, "status": "completed", "result": payload})),
			calls(call("reply", map[string]any{"message": "result " + payload})),
		},
		[]map[string]any{
			calls(call("write_file", map[string]any{"path": xssName, "content": payload})),
			calls(call("write_file", map[string]any{"path": "evil.html", "content": xssHTML})),
			calls(call("write_file", map[string]any{"path": "evil.svg", "content": xssSVG})),
			calls(call("edit_file", map[string]any{"path": "evil.html", "search": "<body", "replace": "<body onpageshow=\"window.__xss='edit'\""})),
			// Not in the writer's catalog: refused by the gate's capability layer.
			calls(call("run_shell", map[string]any{"command": payload})),
			{"say": "wrote " + payload},
		}), "prompt "+payload)

	b := newBrowser(t, f.URL)
	alice := b.tab()
	alice.signIn("alice")
	alice.open("/app/runs/"+id, `#timeline li[data-type="run.completed"]`)
	alice.run("cards filled from the audit", chromedp.WaitVisible(css(`#plan li.step`)), chromedp.WaitVisible(css(`.diff`)))
	time.Sleep(2 * time.Second) // the audit-backed cards fill in; anything that would run has run
	body := alice.text("main")
	for _, want := range []string{"result " + payload, "wrote " + payload, "prompt " + payload, xssName} {
		require.Contains(t, body, want, "shown as text")
	}
	require.Contains(t, alice.text("#plan"), xssImg)
	require.Contains(t, alice.text(`#timeline li[data-type="notification"]`), payload)
	require.Contains(t, alice.text(`#timeline li[data-type="delegation.created"]`), payload)
	require.NotEmpty(t, alice.text(`#timeline li.refusal .layer`), "a refusal names its layer")
	require.Contains(t, alice.text(`#timeline li.outcome-refused[data-tool="run_shell"] .outcome-label`), "refused by capability")
	alice.screenshot("xss-run")
	assertNoScriptRan(t, alice, b)

	// An event type the Studio does not know gets the generic card, its data as text.
	require.Equal(t, "ev generic", alice.evalString(`document.getElementById('timeline').appendChild(card({id: 1e9, type: 'future.event', agent: `+
		"`"+xssImg+"`"+`, time: '', data: {x: `+"`"+xssScript+"`"+`}}, {auditWanted: []})).className`))
	require.Contains(t, alice.text(`#timeline li[data-type="future.event"]`), "future.event")
	assertNoScriptRan(t, alice, b)

	// A test report and a lint report become tables, and an edit a diff, with
	// the payloads in their cells as text (run_tests needs the toolchain
	// sandbox, so its answer is fed to the card's renderer here).
	report, err := json.Marshal(map[string]any{
		"framework": "pytest", "passed": 3, "failed": 1, "skipped": 0, "errors": 0, "duration": 1.5, "exit_code": 1,
		"failures":    []map[string]any{{"name": "test_" + xssImg, "message": xssScript}},
		"output_tail": xssScript,
	})
	require.NoError(t, err)
	lint, err := json.Marshal(map[string]any{
		"findings": []map[string]any{{"file": xssName, "line": 3, "column": 1, "rule": "E1", "severity": "major", "message": xssImg}},
		"counts":   map[string]int{"major": 1},
	})
	require.NoError(t, err)
	for _, tc := range []struct{ js, want string }{
		{"resultTable(" + jsString(t, string(report)) + ")", xssImg},
		{"resultTable(" + jsString(t, string(lint)) + ")", xssName},
		{"diffView('edit_file', {path: " + jsString(t, xssName) + ", search: " + jsString(t, xssScript) + ", replace: " + jsString(t, xssImg) + "})", "+ " + xssImg},
	} {
		got := alice.evalString(`(() => { const n = ` + tc.js + `; n.id = 'probe-report'; document.getElementById('timeline').appendChild(n); return n.innerText; })()`)
		require.Contains(t, got, tc.want)
		require.Positive(t, alice.count("#probe-report table, #probe-report.diff .add"))
		alice.evalString(`document.getElementById('probe-report').remove(); ''`)
	}
	assertNoScriptRan(t, alice, b)

	alice.open("/app/runs", `#runs tr[data-run="`+id+`"]`)
	require.Contains(t, alice.text(`#runs tr[data-run="`+id+`"]`), "prompt "+payload)
	assertNoScriptRan(t, alice, b)

	// Files: their names as text; the .html and .svg are not media by their
	// bytes, so they are never shown inline, only downloaded.
	// Pictures are shown only when their bytes are one: a real PNG inline, an
	// SVG or HTML named .png or .gif not at all.
	ws := f.Workspaces.Dir(id)
	require.NoError(t, os.WriteFile(filepath.Join(ws, "picture.png"), pngBytes(t), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake.png"), []byte(xssSVG), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "fake.gif"), []byte(xssHTML), 0o644))
	downloads := t.TempDir()
	_, err = chromedp.CallBrowser(alice.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads,
	})
	require.NoError(t, err)
	alice.open("/app/runs/"+id+"/files", `#files tr[data-file="evil.svg"]`)
	require.Equal(t, 1, alice.count(`#files tr[data-file="`+strings.ReplaceAll(xssName, `"`, `\"`)+`"]`))
	require.Contains(t, alice.text("#files"), xssName)
	for _, name := range []string{"evil.svg", "evil.html"} {
		row := `#files tr[data-file="` + name + `"]`
		alice.run("preview "+name, chromedp.Click(css(row+" button.link")), chromedp.WaitVisible(css(row+" .not-media")))
		alice.run("download "+name, chromedp.Click(css(row+" button.download")))
	}
	require.Eventually(t, func() bool {
		html, err1 := os.ReadFile(filepath.Join(downloads, "evil.html"))
		svg, err2 := os.ReadFile(filepath.Join(downloads, "evil.svg"))
		return err1 == nil && err2 == nil && strings.Contains(string(html), xssScript) && string(svg) == xssSVG
	}, 20*time.Second, 100*time.Millisecond, "both files downloaded, byte for byte")
	require.Equal(t, f.URL+"/app/runs/"+id+"/files", alice.location(), "a download never navigates")
	alice.run("media previews",
		chromedp.WaitVisible(css(`#files tr[data-file="picture.png"] img.media`)),
		chromedp.WaitVisible(css(`#files tr[data-file="fake.png"] .not-media`)),
		chromedp.WaitVisible(css(`#files tr[data-file="fake.gif"] .not-media`)))
	require.Equal(t, 1, alice.count("#files img"), "only the real picture")
	require.Equal(t, "blob:", alice.evalString(`document.querySelector('#files img.media').src.slice(0, 5)`))
	require.Zero(t, alice.count("#files video, #files iframe, #files object, #files embed"))
	alice.screenshot("xss-files")
	assertNoScriptRan(t, alice, b)

	// The run page shows the same pictures, by the same rule.
	alice.open("/app/runs/"+id, `#media [data-media="picture.png"] img.media`)
	alice.run("run page media", chromedp.WaitVisible(css(`#media [data-media="fake.png"] .not-media`)))
	require.Equal(t, 1, alice.count("#media img"))
	assertNoScriptRan(t, alice, b)

	// Defence in depth: markup that did reach the DOM still could not run, the
	// CSP refuses inline script and inline handlers.
	require.Equal(t, "undefined", alice.evalString(`(() => {
		const s = document.createElement('script'); s.textContent = 'window.__csp = 1'; document.body.appendChild(s);
		const d = document.createElement('div'); d.setAttribute('onclick', 'window.__csp = 2'); document.body.appendChild(d); d.click();
		return typeof window.__csp; })()`))

	// Even opened directly, a workspace file is an attachment the browser does
	// not render (and without the token it is not served at all).
	alice.run("open a file URL", chromedp.Navigate(f.URL+"/api/runs/"+id+"/file?path=evil.html"))
	require.Contains(t, alice.text("body"), "missing bearer token")
	assertNoScriptRan(t, alice, b)

	// The detector itself: a dialog that does open is counted.
	probe := b.tab()
	probe.run("probe page", chromedp.Navigate(f.URL+"/app"))
	probe.evalString(`setTimeout(() => alert('probe'), 0); 'ok'`)
	require.Eventually(t, func() bool { return b.dialogs.Load() == 1 }, 10*time.Second, 50*time.Millisecond, "the dialog detector works")
}

func assertNoScriptRan(t *testing.T, tb *tab, b *studioBrowser) {
	t.Helper()
	require.Equal(t, "undefined", tb.evalString("typeof window.__xss"), "an agent's payload ran")
	require.Zero(t, b.dialogs.Load(), "a dialog opened")
	require.Zero(t, tb.count("#main script, #main img:not(.media), #main iframe, #main object, #main embed, #main svg"), "agent markup reached the DOM")
}

func jsString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

func pngBytes(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 48, 32))
	for x := range 48 {
		for y := range 32 {
			img.Set(x, y, color.RGBA{R: uint8(x * 5), G: 90, B: uint8(y * 7), A: 255})
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}
