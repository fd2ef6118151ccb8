package studio_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
)

// The operator's surfaces of issue 41 in a real browser: the run list's id,
// duration and error columns, relative times and owner/team filters; a run's
// finished time, duration, step durations and waterfall (every tool call a bar
// as long as the call took); its actions: cancel, retry (a new run of the same
// request), clone with edits (the form filled from the run's request), fork
// (disabled, saying why) and export (every stored event, as JSON); the fleet
// page; and asynqmon opened from the Studio by an admin's sign-in (a cookie
// only /monitoring reads), refused to a non-admin.
func TestStudioOperatorSurfacesInTheBrowser(t *testing.T) {
	t.Parallel()
	f := startFleet(t)
	ctx := context.Background()

	done := submitTeam(t, f, "alice", scriptTeam("writers", []string{"workspace"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "write the notes"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("write_file", map[string]any{"path": "notes/a.md", "content": "a\n"})),
			calls(call("list_files", map[string]any{"path": "notes"})),
			{"say": "wrote it"},
		}), "write the notes")
	heldTeam := scriptTeam("held", []string{"workspace", "research"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "fetch the paper"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/papers/p.pdf"})),
			{"say": "fetched"},
		})
	heldTeam["allowed_domains"] = []string{"127.0.0.1"}
	held := submitTeam(t, f, "alice", heldTeam, "fetch a paper (held)")
	require.Eventually(t, func() bool {
		r, err := f.Store.GetRun(ctx, done)
		return err == nil && r.Status == "completed"
	}, time.Minute, 50*time.Millisecond, "the writers' run completes")

	b := newBrowser(t, f.URL)
	alice := b.tab()
	alice.signIn("alice")

	// The run list: id, a relative time, a duration and the filters.
	alice.open("/app/runs", `#runs tr[data-run="`+done+`"]`)
	row := alice.text(`#runs tr[data-run="` + done + `"]`)
	require.Contains(t, row, done[:8])
	require.Contains(t, row, "ago")
	require.Regexp(t, `\d+(\.\d)? s|\d+ ms|\dm`, alice.text(`#runs tr[data-run="`+done+`"] td.duration`))
	alice.run("filter by team", chromedp.SendKeys(css("#filter-team"), "held"))
	alice.waitJS("only the held run listed", `!document.querySelector('#runs tr[data-run="`+done+`"]') && !!document.querySelector('#runs tr[data-run="`+held+`"]')`)
	require.Contains(t, alice.location(), "team=held")
	alice.open("/app/runs?owner=bob", "#runs-body ~ * .error, section .error")
	require.Contains(t, alice.text("section .error"), "alice may list only its own runs", "another's runs need read_all")
	require.Equal(t, "bob", alice.evalString(`document.querySelector('#filter-owner').value`))

	// The finished run: its finished time, duration, step durations, waterfall.
	alice.open("/app/runs/"+done, `#timeline li[data-type="run.completed"]`)
	alice.waitJS("the waterfall drawn with the writer's calls", `document.querySelectorAll('#waterfall .wf-lane[data-lane="writer"] .wf-bar.tool').length === 2`)
	require.NotEmpty(t, alice.text("#finished"))
	require.NotEqual(t, "—", alice.text("#duration"))
	stored, err := f.Store.EventsAfter(ctx, done, 0, 1000)
	require.NoError(t, err)
	want := map[string]int64{} // a tool call's event id → its duration
	for _, ev := range stored {
		if ev.Type != events.ToolCall {
			continue
		}
		var d struct {
			DurationMS int64 `json:"duration_ms"`
		}
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		want[strconv.FormatInt(ev.ID, 10)] = d.DurationMS
	}
	require.Len(t, want, 4, "boss: delegate, reply; writer: write_file, list_files")
	var bars []struct {
		Href string
		MS   int64
		Lane string
	}
	require.NoError(t, json.Unmarshal([]byte(alice.evalString(`JSON.stringify([...document.querySelectorAll('#waterfall .wf-bar.tool')].map((b) => ({
		Href: b.getAttribute('href'), MS: Number(b.getAttribute('data-ms')), Lane: b.closest('.wf-lane').getAttribute('data-lane') })))`)), &bars))
	require.Len(t, bars, 4)
	for _, bar := range bars {
		id := bar.Href[strings.LastIndex(bar.Href, "#ev-")+4:]
		ms, ok := want[id]
		require.True(t, ok, "a bar for a tool call event: %+v", bar)
		require.Equal(t, ms, bar.MS, "the bar is as long as the call took: %+v", bar)
	}
	require.Equal(t, 1, alice.count(`#waterfall .wf-lane[data-lane="writer"] .wf-life.delegation.completed`), "the delegation's life in the delegate's lane")
	require.Equal(t, 1, alice.count(`#waterfall .wf-lane[data-lane="run"] .wf-bar.run.completed`))
	require.Equal(t, 4, alice.count(`#timeline li[data-type="tool.call"] .dur`), "every tool card says how long it took")
	alice.screenshot("run-waterfall")

	// Fork waits for replay and says so; export saves every stored event.
	require.Equal(t, "true|issue 44", alice.evalString(`(() => { const b = document.querySelector('#fork'); return b.disabled + '|' + (b.title.match(/issue 44/) || [''])[0]; })()`))
	var exported struct {
		Events []struct {
			ID   int64  `json:"id"`
			Type string `json:"type"`
		} `json:"events"`
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
		Delegations []any `json:"delegations"`
		Audit       []any `json:"audit"`
	}
	require.NoError(t, json.Unmarshal([]byte(alice.evalAwait(`exportRun(document.body.getAttribute('data-run')).then((d) => JSON.stringify(d))`)), &exported))
	require.Equal(t, done, exported.Run.ID)
	require.Len(t, exported.Events, len(stored))
	for i, ev := range stored {
		require.Equal(t, ev.ID, exported.Events[i].ID)
		require.Equal(t, ev.Type, exported.Events[i].Type)
	}
	require.Len(t, exported.Delegations, 1)
	require.NotEmpty(t, exported.Audit)

	// Clone with edits: the form holds the inline team; an edited prompt starts
	// a new run of the same team.
	alice.clickJS("clone", "#clone")
	alice.waitJS("the form filled from the request", `!!document.querySelector('#team-json') && document.querySelector('#team-json').value.includes('"writers"') && document.querySelector('#prompt').value === 'write the notes'`)
	alice.run("edit the prompt", chromedp.SetValue(css("#prompt"), "write the notes again"), chromedp.Click(css("#start-run")))
	alice.waitJS("on the new run's page", `/\/app\/runs\/[0-9a-f-]{36}$/.test(location.pathname) && !location.pathname.endsWith('`+done+`')`)
	cloned := alice.location()[strings.LastIndex(alice.location(), "/")+1:]
	cr, err := f.Store.GetRun(ctx, cloned)
	require.NoError(t, err)
	require.Equal(t, "write the notes again", cr.Prompt)
	require.Equal(t, "alice", cr.Owner)
	require.Contains(t, string(cr.Team), `"writers"`)

	// Cancel the held run from its page, then retry it: a new run of the same
	// request, which holds its call again.
	alice.open("/app/runs/"+held, `#timeline li[data-type="approval.requested"]`)
	require.Zero(t, alice.count("#retry"), "a live run is cancelled, not retried")
	alice.clickJS("cancel", "#cancel")
	alice.waitJS("cancelled", `document.querySelector('#run-status').getAttribute('data-status') === 'cancelled'`)
	alice.clickJS("retry", "#retry")
	alice.waitJS("on the retry's page", `/\/app\/runs\/[0-9a-f-]{36}$/.test(location.pathname) && !location.pathname.endsWith('`+held+`')`)
	retried := alice.location()[strings.LastIndex(alice.location(), "/")+1:]
	rr, err := f.Store.GetRun(ctx, retried)
	require.NoError(t, err)
	require.Equal(t, "fetch a paper (held)", rr.Prompt)
	alice.waitJS("the retry holds its call again", `!!document.querySelector('#timeline li[data-type="approval.requested"]')`)
	alice.clickJS("cancel the retry", "#cancel")
	alice.waitJS("the retry cancelled", `document.querySelector('#run-status').getAttribute('data-status') === 'cancelled'`)

	// The fleet page: a worker, the queues, the runs and limits; asynqmon only
	// for an admin.
	alice.open("/app/fleet", "#fleet-workers tbody tr[data-worker]")
	require.Positive(t, alice.count("#fleet-queues tbody tr[data-queue]"))
	require.Positive(t, alice.count("#fleet-limits tbody tr[data-limit]"))
	require.Equal(t, "401", alice.evalAwait(`fetch('/monitoring/', { credentials: 'same-origin' }).then((r) => String(r.status))`))
	alice.clickJS("open asynqmon as alice", "#open-monitor")
	alice.waitJS("refused to a non-admin", `(document.querySelector('#fleet .error') || {}).innerText === 'The queue monitor is for admin tokens.'`)

	admin := b.tab()
	admin.signIn("admin")
	admin.open("/app/fleet", "#open-monitor")
	require.Equal(t, "401", admin.evalAwait(`fetch('/monitoring/', { credentials: 'same-origin' }).then((r) => String(r.status))`))
	admin.clickJS("open asynqmon as admin", "#open-monitor")
	admin.waitJS("no error", `!document.querySelector('#fleet .error')`)
	require.Equal(t, "200", admin.evalAwait(`new Promise((ok) => setTimeout(ok, 300)).then(() => fetch('/monitoring/', { credentials: 'same-origin' })).then((r) => String(r.status))`))

	// Triggers: a schedule made, paused and resumed from the page; a webhook
	// made from the page, its secret shown once, and a delivery signed with it
	// listed with the run it started.
	alice.open("/app/triggers", "#schedules-table")
	// The forms are in closed <details>: opened here rather than by a click on
	// the summary, which a loaded CI machine once raced ("not focusable").
	alice.evalString(`document.querySelectorAll('details.create').forEach((d) => { d.open = true; }); ''`)
	alice.run("new schedule", chromedp.WaitVisible(css("#schedule-name")),
		chromedp.SendKeys(css("#schedule-name"), "nightly"), chromedp.SetValue(css("#schedule-cron"), "30 2 * * *"),
		chromedp.SetValue(css("#schedule-tz"), "Europe/Paris"), chromedp.SendKeys(css("#schedule-prompt"), "the nightly notes"),
		chromedp.WaitVisible(css(`#schedule-form input[data-var="topic"]`)), chromedp.SendKeys(css(`#schedule-form input[data-var="topic"]`), "tides"),
		chromedp.Click(css("#schedule-create")))
	alice.waitJS("the schedule listed with its next fire", `(() => { const r = document.querySelector('#schedules-table tr[data-schedule]');
		return !!r && r.innerText.includes('30 2 * * *') && r.innerText.includes('Europe/Paris') && !!r.querySelector('td[data-label="next"] time'); })()`)
	alice.clickJS("pause", "#schedules-table tr[data-schedule] button.pause")
	alice.waitJS("paused", `!!document.querySelector('#schedules-table tr[data-paused="true"] button.resume')`)
	alice.clickJS("resume", "#schedules-table tr[data-schedule] button.resume")
	alice.waitJS("resumed", `!!document.querySelector('#schedules-table tr[data-paused="false"] button.pause')`)

	alice.evalString(`document.querySelectorAll('details.create').forEach((d) => { d.open = true; }); ''`)
	alice.run("new webhook", chromedp.WaitVisible(css("#hook-name")),
		chromedp.SendKeys(css("#hook-name"), "pushes"), chromedp.SendKeys(css("#hook-prompt"), "write about {{.topic}}"),
		chromedp.WaitVisible(css(`#hook-form input[data-var="topic"]`)), chromedp.SendKeys(css(`#hook-form input[data-var="topic"]`), "/topic"),
		chromedp.Click(css("#hook-create")))
	alice.waitJS("the secret shown once", `!!document.querySelector('#hook-secret pre') && !!document.querySelector('#hooks-table tr[data-hook]')`)
	hookSecret := alice.text("#hook-secret pre")
	hookURL := alice.text("#hooks-table tr[data-hook] code.url")
	payload := []byte(`{"topic":"the moon"}`)
	mac := hmac.New(sha256.New, []byte(hookSecret))
	mac.Write(payload)
	req, err := http.NewRequest(http.MethodPost, f.URL+hookURL, bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", "d-1")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	alice.open("/app/triggers", "#hooks-table tr[data-hook]")
	alice.evalString(`document.querySelector('#hooks-table tr[data-hook] details.deliveries').open = true; ''`)
	alice.waitJS("the delivery listed with its run", `!!document.querySelector('#hooks-table li[data-outcome="accepted"] a[href^="/app/runs/"]')`)
	alice.screenshot("triggers")
	require.Zero(t, b.dialogs.Load())
}

// clickJS clicks the element sel matches once there is one, found at the
// moment of the click: the run page re-renders its header and the fleet page
// its tables, so a node found first and clicked second may be gone.
func (tb *tab) clickJS(what, sel string) {
	tb.b.t.Helper()
	q := "document.querySelector(" + jsString(tb.b.t, sel) + ")"
	tb.waitJS(what, "!!"+q)
	tb.evalString(q + ".click(); ''")
}
