package studio_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/lease"
)

// viewports the Studio is laid out for: the narrowest phone it supports, a
// common phone and a laptop (the last two pictured).
var viewports = []struct {
	name          string
	width, height int64
	pictured      bool
}{
	{"360", 360, 740, false},
	{"390", 390, 844, true},
	{"1440", 1440, 900, true},
}

// toolCardsJS reads every tool call card of the timeline in one evaluation (the
// run page re-renders while the audit fills the cards in): its outcome class,
// label, whether it draws a diff, and the arguments it shows.
const toolCardsJS = `JSON.stringify([...document.querySelectorAll('#timeline li[data-type="tool.call"]')].map((li) => ({
	agent: (li.querySelector('.agent') || {}).innerText || '',
	tool: li.getAttribute('data-tool'),
	outcome: [...li.classList].filter((c) => c.startsWith('outcome-')).join(' '),
	label: (li.querySelector('.outcome-label') || {}).innerText || '',
	diff: li.querySelector('.diff') ? li.querySelector('.diff').innerText : null,
	args: li.querySelector('pre.args') ? li.querySelector('pre.args').innerText : null,
})))`

type toolCardView struct {
	Agent, Tool, Outcome, Label string
	Diff, Args                  *string
}

// overflowJS is "" when the page is no wider than the viewport, else the
// widths and the first elements that stick out.
const overflowJS = `(() => {
	const w = window.innerWidth, sw = document.documentElement.scrollWidth;
	if (sw <= w) return '';
	const out = [...document.querySelectorAll('body *')]
		.filter((e) => e.getBoundingClientRect().right > w + 1)
		.slice(0, 6).map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + String(e.className).replace(/ /g, '.') : '') +
			' right=' + Math.round(e.getBoundingClientRect().right));
	return 'scrollWidth ' + sw + ' > innerWidth ' + w + ': ' + out.join('; ');
})()`

// The Studio's layout and its tool call cards in a real browser (issue 41):
// every page at 360×740, a phone's 390×844 and a laptop's 1440×900 is no wider
// than the viewport; the run page stacks its side panels under the timeline on the
// phone and keeps them beside it on the laptop; wide tables scroll in their
// own box. A run with an allowed write, a write the rules refuse, two failed
// writes (a path that escapes, bad arguments), a failed read and a generic
// call draws each by its outcome: a class and a label per outcome, a diff only
// for the allowed write, the arguments on the others; a held call's card says
// it waits. The tab has the Studio's icon. With -screenshots the runs, run,
// inbox and audit pages are saved at both sizes.
func TestStudioLayoutInTheBrowser(t *testing.T) {
	t.Parallel()
	started := time.Now()
	// A rule refuses writes under secret/: the gate's rules layer, not the tool.
	rules, err := os.ReadFile(fleettest.RepoPath(t, "config/permissions.yaml"))
	require.NoError(t, err)
	rulesPath := filepath.Join(t.TempDir(), "permissions.yaml")
	require.NoError(t, os.WriteFile(rulesPath, append(rules, []byte(`
  - match:
      tool: write_file
      path_pattern: "^secret(/|$)"
    action: always_deny
    reason: "secret/ is read-only for agents"
`)...), 0o644))
	f := startFleet(t, func(c *config.Config) {
		c.Security.PermissionsFile = rulesPath
		// A GPU service declared, so the leases page has its table.
		c.Streams.Leases = lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}
	})

	longID := "a-long-unbroken-identifier-" + strings.Repeat("x", 120)
	outcomes := submitTeam(t, f, "alice", scriptTeam("outcomes", []string{"workspace"},
		[]map[string]any{
			calls(call("create_plan", map[string]any{"goal": "write the notes", "steps": []string{"write notes/ok.md", "report " + longID}})),
			calls(call("delegate", map[string]any{"agent": "writer", "task": "write the notes " + longID})),
			calls(call("reply", map[string]any{"message": "done: " + longID})),
		},
		[]map[string]any{
			calls(call("write_file", map[string]any{"path": "notes/ok-" + longID + ".md", "content": "fine\n"})),
			calls(call("write_file", map[string]any{"path": "secret/keys.md", "content": "leak"})),
			calls(call("write_file", map[string]any{"path": "../escape.md", "content": "out"})),
			calls(call("write_file", map[string]any{"path": 5})),
			calls(call("read_file", map[string]any{"path": "missing.md"})),
			calls(call("list_files", map[string]any{"path": "notes"})),
			{"say": "wrote " + longID},
		}), "outcomes of tool calls "+longID)
	// A second run holds a Restricted call for a person: the inbox has a card,
	// its run page a waiting one.
	heldTeam := scriptTeam("held", []string{"workspace", "research"},
		[]map[string]any{
			calls(call("delegate", map[string]any{"agent": "writer", "task": "fetch the paper"})),
			calls(call("reply", map[string]any{"message": "done"})),
		},
		[]map[string]any{
			calls(call("download_pdf", map[string]any{"url": "http://127.0.0.1:1/papers/" + longID + ".pdf"})),
			{"say": "fetched"},
		})
	heldTeam["allowed_domains"] = []string{"127.0.0.1"}
	held := submitTeam(t, f, "alice", heldTeam, "fetch a paper (held)")

	b := newBrowser(t, f.URL)
	alice := b.tab()
	alice.signIn("alice")

	// The outcome cards: the writer's calls in the order it made them.
	alice.open("/app/runs/"+outcomes, `#timeline li[data-type="run.completed"]`)
	var cards []toolCardView
	alice.waitJS("every writer card filled from the audit", `(() => {
		const cs = [...document.querySelectorAll('#timeline li[data-type="tool.call"]')].filter((li) => (li.querySelector('.agent') || {}).innerText === 'writer');
		return cs.length === 6 && cs.every((li) => li.querySelector('.diff, pre.args'));
	})()`)
	require.NoError(t, json.Unmarshal([]byte(alice.evalString(toolCardsJS)), &cards))
	var writer []toolCardView
	for _, c := range cards {
		if c.Agent == "writer" {
			writer = append(writer, c)
		}
	}
	require.Len(t, writer, 6, "%+v", cards)
	for i, want := range []struct {
		tool, outcome, label string
		diff                 string // "" when the card must draw none
		args                 string
	}{
		{"write_file", "outcome-allowed", "allowed", "+ fine", ""},
		{"write_file", "outcome-refused", "refused by rules: secret/ is read-only for agents", "", `"path": "secret/keys.md"`},
		{"write_file", "outcome-failed", "failed: write_file: path escapes the workspace", "", `"path": "../escape.md"`},
		{"write_file", "outcome-failed", "failed: write_file: invalid tool arguments", "", `"path": 5`},
		{"read_file", "outcome-failed", "failed: read_file: missing.md does not exist", "", `"path": "missing.md"`},
		{"list_files", "outcome-allowed", "allowed", "", `"path": "notes"`},
	} {
		got := writer[i]
		require.Equal(t, want.tool, got.Tool, "card %d", i)
		require.Equal(t, want.outcome, got.Outcome, "card %d (%s)", i, got.Label)
		require.True(t, strings.HasPrefix(got.Label, want.label), "card %d: label %q, want %q…", i, got.Label, want.label)
		if want.diff == "" {
			require.Nil(t, got.Diff, "card %d (%s): a call that wrote nothing draws no diff", i, got.Label)
		} else {
			require.NotNil(t, got.Diff, "card %d", i)
			require.Contains(t, *got.Diff, want.diff)
		}
		if want.args != "" {
			require.NotNil(t, got.Args, "card %d (%s): its arguments are shown", i, got.Label)
			require.Contains(t, *got.Args, want.args, "card %d", i)
		}
	}
	// The outcomes look different, not only their classes: each its own left
	// edge and background.
	looks := alice.evalString(`JSON.stringify(['allowed', 'refused', 'failed'].map((o) => {
		const s = getComputedStyle(document.querySelector('#timeline li.outcome-' + o));
		return s.borderLeftColor + ' ' + s.borderLeftStyle + ' ' + s.backgroundColor;
	}))`)
	var styles []string
	require.NoError(t, json.Unmarshal([]byte(looks), &styles))
	require.Len(t, styles, 3)
	require.NotEqual(t, styles[0], styles[1], "allowed and refused look alike")
	require.NotEqual(t, styles[0], styles[2], "allowed and failed look alike")
	require.NotEqual(t, styles[1], styles[2], "refused and failed look alike")

	// A call a stopped worker left without an outcome (no run here can make
	// one on purpose): fed to the card renderer, it is neither allowed nor failed.
	require.Equal(t, "ev call bad outcome-unknown|outcome unknown: started before a worker stopped|0", alice.evalString(`(() => {
		const c = card({ id: 1e9, type: 'tool.call', agent: 'writer', time: '', data: { tool: 'run_shell', call_id: 'c9', decision: 'unknown',
			error: 'started before a worker stopped' } }, { auditWanted: [], refreshPlan: () => {} });
		return c.className + '|' + c.querySelector('.outcome-label').innerText.trim() + '|' + c.querySelectorAll('.diff').length; })()`))

	// The held call: its run page says it waits, in the waiting look.
	alice.open("/app/runs/"+held, `#timeline li[data-type="approval.requested"].outcome-waiting`)
	require.Equal(t, "waiting for approval", alice.text(`#timeline li[data-type="approval.requested"] .outcome-label`))

	// The tab's icon is served by the Studio itself.
	require.Equal(t, "200 image/svg+xml", alice.evalAwait(`fetch(document.querySelector('link[rel="icon"]').href).then((r) => r.status + ' ' + r.headers.get('content-type'))`))

	// Every page at both sizes; the sign-in page in a tab that has no token.
	anon := b.tab()
	pages := []struct {
		name, path, ready string
		tb                *tab
		shot              bool
	}{
		{"signin", "/app", "#token", anon, false},
		{"home", "/app", `#runs tr[data-run="` + outcomes + `"]`, alice, false},
		{"runs", "/app/runs", `#runs tr[data-run="` + outcomes + `"]`, alice, true},
		{"run", "/app/runs/" + outcomes, `#timeline li[data-tool="list_files"] pre.args`, alice, true},
		{"run-waiting", "/app/runs/" + held, `#timeline li[data-type="approval.requested"]`, alice, false},
		{"files", "/app/runs/" + outcomes + "/files", `#files tr[data-file="notes/ok-` + longID + `.md"]`, alice, false},
		{"inbox", "/app/inbox", "article[data-approval]", alice, true},
		{"approvals", "/app/approvals", "article[data-approval]", alice, false},
		{"audit", "/app/audit", "#audit tbody tr[data-audit]", alice, true},
		{"leases", "/app/leases", "#leases tbody tr", alice, false},
		{"tools", "/app/tools", "#tools .group", alice, false},
		{"fleet", "/app/fleet", "#fleet-workers tbody tr[data-worker]", alice, true},
		{"triggers", "/app/triggers", "#schedules-table", alice, false},
	}
	for _, vp := range viewports {
		for _, tb := range []*tab{alice, anon} {
			tb.run("viewport "+vp.name, chromedp.EmulateViewport(vp.width, vp.height))
		}
		for _, p := range pages {
			p.tb.open(p.path, p.ready)
			require.Empty(t, p.tb.evalString(overflowJS), "%s at %s px scrolls sideways", p.name, vp.name)
			if p.shot && vp.pictured {
				if p.name == "run" {
					// The run's picture is of its outcome cards, not its header.
					p.tb.evalString(`document.querySelector('#timeline li.outcome-refused').previousElementSibling.scrollIntoView(); ''`)
				}
				p.tb.screenshot("layout-" + p.name + "-" + vp.name)
			}
			switch p.name {
			case "run":
				// The side panels: under the timeline on the phone, beside it on
				// the laptop, where the timeline keeps most of the width.
				var box struct {
					Wide, Side struct{ Left, Right, Top, Bottom, Width float64 }
				}
				require.NoError(t, json.Unmarshal([]byte(p.tb.evalString(`JSON.stringify(Object.fromEntries(['wide', 'side'].map((c) => {
					const r = document.querySelector('.cols > .' + c).getBoundingClientRect();
					return [c[0].toUpperCase() + c.slice(1), { Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom, Width: r.width }];
				})))`)), &box))
				if vp.width < 900 {
					require.GreaterOrEqual(t, box.Side.Top, box.Wide.Bottom, "the side panels go under the timeline: %+v", box)
					require.Greater(t, box.Wide.Width, float64(vp.width)*0.8, "the timeline takes the width: %+v", box)
				} else {
					require.GreaterOrEqual(t, box.Side.Left, box.Wide.Right, "the side panels stay beside the timeline: %+v", box)
					require.Greater(t, box.Wide.Width, 2*box.Side.Width, "%+v", box)
				}
			case "audit":
				if vp.width < 900 {
					// Nine columns do not fit a phone: the table scrolls in its box.
					require.Equal(t, "scrolls", p.tb.evalString(`(() => { const s = document.querySelector('#audit').parentElement;
						return s.classList.contains('table-scroll') && s.scrollWidth > s.clientWidth ? 'scrolls' : s.className + ' ' + s.scrollWidth + '/' + s.clientWidth; })()`))
				}
			}
		}
	}
	require.Zero(t, b.dialogs.Load())
	t.Logf("layout test: %s", time.Since(started).Round(100*time.Millisecond))
}

// waitJS polls a boolean expression until it holds (30 s at most).
func (tb *tab) waitJS(what, js string) {
	tb.b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			tb.fail(what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.fail(what, fmt.Errorf("not true after 30 s: %s", js))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// evalAwait evaluates an expression whose value is a promise of a string.
func (tb *tab) evalAwait(js string) string {
	tb.b.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.fail("evaluate "+js, err)
	}
	return s
}
