package research_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/tools"
)

// playPage has three buttons; the third's handler throws. app.js is loaded
// from the workspace beside it.
const playPage = `<!doctype html><html><head><title>Play</title><script src="js/app.js"></script></head><body>
<h1>Play fixture</h1>
<button id="one" onclick="document.title='one'">One</button>
<button id="two" onclick="console.log('two')">Two</button>
<button id="three" onclick="explode()">Three</button>
<a href="#top">Top</a>
<input type="checkbox" id="agree">
<select id="size"><option>S</option><option>M</option></select>
<input type="text" id="name" oninput="window.typed = this.value">
<a href="https://elsewhere.invalid/">Away</a>
<button style="display:none" onclick="throw new Error('hidden control played')">Hidden</button>
</body></html>`

const playScript = `function explode() { const config = undefined; return config.depth; }
window.addEventListener('load', () => { Promise.reject(new Error('load-time rejection')); });`

const quietPage = `<!doctype html><html><body><button onclick="document.body.dataset.n = 1">Fine</button>
<input type="text"><select><option>a</option><option>b</option></select></body></html>`

func TestPlayTest(t *testing.T) {
	t.Parallel()
	e := newCaptureEnv(t, research.Config{CaptureTimeout: 60 * time.Second, CaptureIdleTimeout: 4 * time.Second})
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, "js"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(e.ws, ".frame"), 0o755))
	for name, body := range map[string]string{"index.html": playPage, "js/app.js": playScript, "quiet.html": quietPage, ".frame/x.html": quietPage, "notes.txt": "x"} {
		require.NoError(t, os.WriteFile(filepath.Join(e.ws, name), []byte(body), 0o644))
	}
	run := "run-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	reg := tools.NewRegistry()
	research.Register(reg, nil, research.Config{CaptureTimeout: 60 * time.Second, CaptureIdleTimeout: 4 * time.Second, CaptureImage: e.image}, e.d)
	router := tools.NewRouter(reg)
	call := func(page string) (research.PlayAnswer, error) {
		raw, _ := json.Marshal(research.PlayArgs{Page: page})
		ctx, caller := context.Background(), &tools.Session{RunID: run, SessionID: "s", Agent: "qa", Workspace: e.ws,
			Access: tools.Access{Tools: []string{"play_test"}}, AllowedDomains: []string{"fixture.test"}}
		res, err := router.Dispatch(ctx, tools.Call{Session: caller, ID: "c", Name: "play_test", Args: raw})
		if err != nil {
			return research.PlayAnswer{}, err
		}
		var ans research.PlayAnswer
		require.NoError(t, json.Unmarshal([]byte(res.Content), &ans), res.Content)
		return ans, nil
	}

	ans, err := call("index.html")
	require.NoError(t, err)
	out, _ := json.MarshalIndent(ans, "", " ")
	t.Logf("play: %s", out)
	controls := []string{}
	for _, c := range ans.Controls {
		controls = append(controls, c.Control)
	}
	require.Equal(t, []string{`button#one "One"`, `button#two "Two"`, `button#three "Three"`, `a "Top"`, `input#agree`, `select#size "S M"`, `input#name`}, controls,
		"visible controls that stay on the page, in document order")
	byControl := map[string][]research.PlayError{}
	for _, e := range ans.Errors {
		byControl[e.Control] = append(byControl[e.Control], e)
	}
	require.Len(t, byControl[`button#three "Three"`], 1, "the third button's error, named by it: %+v", ans.Errors)
	require.Equal(t, "exception", byControl[`button#three "Three"`][0].Kind)
	require.Contains(t, byControl[`button#three "Three"`][0].Message, "depth")
	require.Len(t, byControl["page load"], 1)
	require.Equal(t, "rejection", byControl["page load"][0].Kind)
	require.Len(t, ans.Errors, 2, "nothing else threw; the hidden control was not played")
	require.Equal(t, 1, ans.Controls[2].Errors)
	require.Equal(t, []string{"index.html", "js/app.js"}, keys(ans.Files), "what was played")
	require.Equal(t, research.FilesHash(ans.Files), ans.Hash)
	for _, p := range ans.Screenshots {
		raw, err := os.ReadFile(filepath.Join(e.ws, p))
		require.NoError(t, err, p)
		img, err := png.Decode(bytes.NewReader(raw))
		require.NoError(t, err, p)
		require.Equal(t, 1280, img.Bounds().Dx())
	}
	require.Equal(t, [2]string{"captures/play_index-before.png", "captures/play_index-after.png"}, ans.Screenshots)

	quiet, err := call("quiet.html")
	require.NoError(t, err)
	require.Empty(t, quiet.Errors, "a page with no errors reports none")
	require.Len(t, quiet.Controls, 3)

	for _, bad := range []string{"../etc/passwd.html", "/etc/x.html", ".frame/x.html", "notes.txt", "missing.html", "file:///etc/passwd"} {
		_, err := call(bad)
		require.Error(t, err, bad)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
