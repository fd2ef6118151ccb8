package research

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpfetch "github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

//go:embed play.js
var playJS string

// PlayOrigin is the origin a workspace page is opened under: the browser asks
// for it, and the tool answers from the workspace itself (the DevTools Fetch
// domain), so a workspace page needs no server and its files never leave the
// worker except into the browser.
const PlayOrigin = "http://workspace.play"

// Bounds of one play.
const (
	playMaxControls = 60
	playSettle      = 150 * time.Millisecond
	playMaxFile     = 8 << 20
	playMaxAppFiles = 500
	playMaxWalk     = 20000
	playWidth       = 1280
	playHeight      = 800
)

// PlayArgs are play_test's arguments.
type PlayArgs struct {
	Page string `json:"page" jsonschema:"description=A workspace HTML file (e.g. index.html or site/about.html) or an http(s) URL of the run's app"`
	// TimeoutSeconds bounds this call, at most research.capture_timeout.
	TimeoutSeconds int `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=300,description=Bound of this call in seconds (default and most: the deployment's research.capture_timeout)"`
}

// PlayAnswer is play_test's result.
type PlayAnswer struct {
	Page     string          `json:"page"`
	URL      string          `json:"url"`
	Controls []PlayedControl `json:"controls"`
	// Errors are every uncaught exception, unhandled rejection and
	// console.error, each with the control that triggered it ("page load"
	// before any).
	Errors []PlayError `json:"errors"`
	// Screenshots are the page before and after playing, under captures/.
	Screenshots [2]string `json:"screenshots"`
	// Files are the workspace files the page loaded with their SHA-256: what
	// was played (the QA rule compares them with the files as they are now).
	// For a URL page of the run's app they are the workspace files the app
	// served (an answer whose bytes equal a workspace file at the URL's path
	// or under a folder of the workspace); a dynamic answer matches none.
	Files map[string]string `json:"files,omitempty"`
	// Hash is the SHA-256 over Files (empty when there are none).
	Hash       string `json:"hash,omitempty"`
	Stopped    string `json:"stopped,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// PlayedControl is one control played.
type PlayedControl struct {
	N       int    `json:"n"`
	Control string `json:"control"`
	Kind    string `json:"kind"`
	Errors  int    `json:"errors"`
}

// PlayError is one error the page threw.
type PlayError struct {
	Kind    string `json:"kind"` // exception | rejection | console.error
	Message string `json:"message"`
	Control string `json:"control"`
}

func registerPlay(reg *tools.Registry, pool *browsers, cfg Config) {
	tools.Register(reg, "play_test", "Open a page the way a visitor does (a workspace HTML file, or a URL of the run's app), click each visible control once (buttons, same-page links, checkboxes, selects; typed input into text fields) and report every uncaught exception, unhandled rejection and console.error with the control that triggered it, plus screenshots before and after.",
		func(ctx context.Context, call tools.Call, a PlayArgs) (tools.Result, error) {
			if pool == nil {
				return tools.Result{}, errors.New("play_test needs the Docker sandbox: pages run in Chromium in a container of the browser image, never on the worker's host (sandbox.kind docker, and `make images`)")
			}
			if err := checkBrowserCall("play_test", call, a.TimeoutSeconds); err != nil {
				return tools.Result{}, err
			}
			s := call.Session
			ans, err := play(ctx, pool, cfg, s, a)
			if err != nil {
				return tools.Result{}, fmt.Errorf("play_test %s: %w", a.Page, err)
			}
			return tools.JSON(ans)
		}, tools.Outbound(), tools.LoopbackInSandbox(pool != nil && canDialApps(pool.host)), tools.InGroup("quality"))
}

// checkBrowserCall checks what capture_reference and play_test (tool) both
// need before a browser starts: a timeout_seconds that is not negative, and the
// run's workspace.
func checkBrowserCall(tool string, call tools.Call, timeoutSeconds int) error {
	if timeoutSeconds < 0 {
		return fmt.Errorf("%s: timeout_seconds %d: want a positive number", tool, timeoutSeconds)
	}
	if _, err := call.RunWorkspace(); err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	return nil
}

// playTarget resolves the page: an http(s) URL as it is, or a workspace HTML
// file under PlayOrigin.
func playTarget(ws, p string) (target, rel string, err error) {
	if u, perr := url.Parse(p); perr == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return p, "", nil
	}
	if strings.Contains(p, "://") {
		return "", "", fmt.Errorf("%q: only http(s) URLs or workspace files", p)
	}
	rel, err = workspace.Clean(p)
	if err != nil {
		return "", "", err
	}
	if inDotDir(rel) {
		return "", "", fmt.Errorf("%s is in a dot directory, which play_test does not open", rel)
	}
	if ext := strings.ToLower(path.Ext(rel)); ext != ".html" && ext != ".htm" {
		return "", "", fmt.Errorf("%s is not an HTML file", rel)
	}
	root, err := openPlayRoot(ws)
	if err != nil {
		return "", "", fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	if fi, err := root.Stat(rel); err != nil || !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("%s: no such file in the workspace", rel)
	}
	return PlayOrigin + "/" + (&url.URL{Path: rel}).EscapedPath(), rel, nil
}

// inDotDir reports a workspace path under a dot directory (.frame/, .git/, …),
// which play_test never opens or serves.
func inDotDir(rel string) bool {
	return slices.ContainsFunc(strings.Split(rel, "/"), func(seg string) bool { return strings.HasPrefix(seg, ".") })
}

// served answers the browser's requests for PlayOrigin from the workspace and
// remembers what it served.
type served struct {
	root *confine.Root // the workspace, opened once per play

	mu    sync.Mutex
	files map[string]string
}

// openPlayRoot opens the workspace for play_test's host-side reads: through
// confine, so no symlink leads out, a FIFO or socket is refused instead of
// blocking the open and no file over playMaxFile is read.
func openPlayRoot(ws string) (*confine.Root, error) {
	return confine.OpenRoot(ws, confine.Config{MaxBytes: playMaxFile})
}

// answer reads the file a PlayOrigin URL names, through a confine.Root (no
// symlink out, no FIFO opened, at most playMaxFile), refusing dot directories;
// a miss is a 404 the page sees.
func (sv *served) answer(raw string) (int64, []byte, string) {
	u, err := url.Parse(raw)
	if err != nil {
		return 400, nil, ""
	}
	rel, err := workspace.Clean(strings.TrimPrefix(u.Path, "/"))
	if err != nil || inDotDir(rel) {
		return 404, nil, ""
	}
	root := sv.root
	fi, err := root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > playMaxFile {
		return 404, nil, ""
	}
	data, err := root.ReadFile(rel)
	if err != nil {
		return 404, nil, ""
	}
	sum := sha256.Sum256(data)
	sv.mu.Lock()
	sv.files[rel] = hex.EncodeToString(sum[:])
	sv.mu.Unlock()
	ct := mime.TypeByExtension(path.Ext(rel))
	if ct == "" {
		ct = "application/octet-stream"
	}
	return 200, data, ct
}

// FilesHash is the hash over a play's files (sorted path and SHA-256 lines).
func FilesHash(files map[string]string) string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s %s\n", k, files[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func play(ctx context.Context, pool *browsers, cfg Config, s *tools.Session, a PlayArgs) (PlayAnswer, error) {
	start := time.Now()
	target, rel, err := playTarget(s.Workspace, a.Page)
	if err != nil {
		return PlayAnswer{}, err
	}
	limit := callLimit(cfg, a.TimeoutSeconds)
	op, err := openPage(ctx, pool, s, target, rel, limit)
	if err != nil {
		return PlayAnswer{}, err
	}
	defer op.close()
	tctx, fail, sv := op.ctx, op.fail, op.sv
	status, err := op.navigate(target)
	if err != nil {
		return PlayAnswer{}, err
	}
	if status != 0 && (status < 200 || status > 299) {
		return PlayAnswer{}, fmt.Errorf("the page answered HTTP %d", status)
	}
	ans := PlayAnswer{Page: a.Page, URL: target, Controls: []PlayedControl{}, Errors: []PlayError{}}
	take := func(control string) (int, error) {
		errs, err := op.takeErrors(control)
		if err != nil {
			return 0, err
		}
		ans.Errors = append(ans.Errors, errs...)
		return len(errs), nil
	}
	// Let the page's own start-up settle, then count what it threw loading.
	if err := op.settle(300 * time.Millisecond); err != nil {
		return PlayAnswer{}, err
	}
	if _, err := take("page load"); err != nil {
		return PlayAnswer{}, fail(err, "reading the page's errors")
	}
	before, _, err := shoot(tctx, playWidth, false, playHeight)
	if err != nil {
		return PlayAnswer{}, fail(err, "taking the first screenshot")
	}
	controls, err := chromedp.Run(tctx, chromedp.Evaluate[[]PlayedControl](fmt.Sprintf(`window.__aePlay.list(%d)`, playMaxControls)))
	if err != nil {
		return PlayAnswer{}, fail(err, "listing the page's controls")
	}
	type acted struct {
		Gone bool   `json:"gone"`
		Href string `json:"href"`
	}
	for _, c := range controls {
		r, err := chromedp.Run(tctx, chromedp.Evaluate[acted](fmt.Sprintf(`window.__aePlay.act(%d, %d)`, c.N, playSettle.Milliseconds()), chromedp.EvalAwaitPromise))
		if err != nil {
			// A control that navigated away destroys the page's context.
			ans.Stopped = fmt.Sprintf("control %d (%s) left the page; the rest were not played", c.N, c.Control)
			break
		}
		if r.Gone {
			continue
		}
		n, err := take(c.Control)
		if err != nil {
			return PlayAnswer{}, fail(err, "reading the page's errors")
		}
		c.Errors = n
		ans.Controls = append(ans.Controls, c)
	}
	after, _, err := shoot(tctx, playWidth, false, playHeight)
	if err != nil {
		return PlayAnswer{}, fail(err, "taking the second screenshot")
	}
	stem := "play_" + strings.TrimSuffix(strings.ReplaceAll(cmp.Or(rel, CaptureStem("", target)), "/", "_"), path.Ext(rel))
	ans.Screenshots, err = saveShots(s.Workspace, pool.host, safeName(stem, ".png", 80, "page"), [2]string{"-before.png", "-after.png"}, before, after)
	if err != nil {
		return PlayAnswer{}, err
	}
	if rel != "" {
		sv.mu.Lock()
		ans.Files = sv.files
		sv.mu.Unlock()
	} else {
		op.mu.Lock()
		bodies := maps.Clone(op.appBodies)
		op.mu.Unlock()
		ans.Files = appFiles(sv.root, bodies)
	}
	if len(ans.Files) > 0 {
		ans.Hash = FilesHash(ans.Files)
	}
	ans.DurationMS = time.Since(start).Milliseconds()
	return ans, nil
}

// appFiles maps the app's answers (URL path → SHA-256) to the workspace files
// they were served from: a regular file whose workspace path ends with the URL
// path (an index.html for a directory) and whose content hashes the same. The
// walk skips dot directories and stops after playMaxWalk entries; a static
// server of the workspace or of a folder in it (python3 -m http.server,
// busybox httpd -h site) is matched, a generated answer is not.
func appFiles(root *confine.Root, bodies map[string]string) map[string]string {
	if len(bodies) == 0 {
		return nil
	}
	want := map[string]string{} // URL path without the leading slash → hash
	for p, sum := range bodies {
		p = strings.TrimPrefix(path.Clean("/"+p), "/")
		if p == "" || strings.HasSuffix(p, "/") {
			p = path.Join(p, "index.html")
		}
		want[p] = sum
	}
	out := map[string]string{}
	n := 0
	_ = root.WalkDir(".", func(rel string, de fs.DirEntry, err error) error {
		if n++; err != nil || n > playMaxWalk {
			return fs.SkipAll
		}
		if de.IsDir() {
			if rel != "." && strings.HasPrefix(de.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if !de.Type().IsRegular() {
			return nil
		}
		for p, sum := range want {
			if rel != p && !strings.HasSuffix(rel, "/"+p) {
				continue
			}
			fi, err := de.Info()
			if err != nil || fi.Size() > playMaxFile {
				continue
			}
			data, err := root.ReadFile(rel)
			if err != nil {
				continue
			}
			h := sha256.Sum256(data)
			if hex.EncodeToString(h[:]) == sum {
				out[rel] = sum
			}
		}
		return nil
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// appDialer reaches a port of a run's sandbox (sandbox.Docker.DialProject).
type appDialer interface {
	DialProject(ctx context.Context, project, addr string) (net.Conn, error)
}

// appOrigin is the origin ("http://localhost:8000/") of a page of the run's
// own app — a loopback host — when the browser host can reach the run's
// sandbox; "" otherwise.
func appOrigin(target string, host BrowserHost) (string, appDialer) {
	d, ok := host.(appDialer)
	u, err := url.Parse(target)
	if !ok || err != nil || u.Scheme != "http" {
		return "", nil
	}
	if !tools.IsLoopbackHost(u.Hostname()) {
		return "", nil
	}
	return u.Scheme + "://" + u.Host + "/", d
}

// canDialApps tells a browser host that can reach a run's sandbox loopback.
func canDialApps(host BrowserHost) bool {
	_, ok := host.(appDialer)
	return ok
}

// fulfillFromApp answers one paused browser request by making it inside the
// run's sandbox (bounded); a failure is a failed request the page sees.
func fulfillFromApp(tctx context.Context, client *http.Client, rp *cdpfetch.EventRequestPaused, record func(path string, body []byte)) {
	answer := func(p cdpfetch.FulfillRequestParams) {
		_ = chromedp.Do(tctx, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, cdpfetch.FulfillRequest, p)
			return chromedp.Void{}, err
		})
	}
	fail := func() {
		_ = chromedp.Do(tctx, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, cdpfetch.FailRequest, cdpfetch.FailRequestParams{RequestID: rp.RequestID, ErrorReason: network.ErrorReasonConnectionRefused})
			return chromedp.Void{}, err
		})
	}
	var body io.Reader
	if rp.Request.HasPostData {
		var b strings.Builder
		for _, e := range rp.Request.PostDataEntries {
			b.WriteString(string(e.Bytes))
		}
		body = strings.NewReader(b.String())
	}
	req, err := http.NewRequestWithContext(tctx, rp.Request.Method, rp.Request.URL, body)
	if err != nil {
		fail()
		return
	}
	for k, v := range rp.Request.Headers {
		if s, ok := v.(string); ok {
			req.Header.Set(k, s)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		fail()
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, playMaxFile+1))
	if err != nil || len(data) > playMaxFile {
		fail()
		return
	}
	if resp.StatusCode/100 == 2 && rp.Request.Method == http.MethodGet {
		record(resp.Request.URL.Path, data)
	}
	var hdrs []*cdpfetch.HeaderEntry
	for k, vs := range resp.Header {
		for _, v := range vs {
			hdrs = append(hdrs, &cdpfetch.HeaderEntry{Name: k, Value: v})
		}
	}
	answer(cdpfetch.FulfillRequestParams{RequestID: rp.RequestID, ResponseCode: int64(resp.StatusCode), ResponseHeaders: hdrs, Body: data})
}

// callLimit is a browser call's bound: research.capture_timeout, or less when
// the caller asked for less.
func callLimit(cfg Config, seconds int) time.Duration {
	limit := cfg.CaptureTimeout
	if seconds > 0 && time.Duration(seconds)*time.Second < limit {
		limit = time.Duration(seconds) * time.Second
	}
	return limit
}
