package research

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

//go:embed capture.js
var captureJS string

// CaptureArgs are capture_reference's arguments.
type CaptureArgs struct {
	URL         string `json:"url" jsonschema:"description=http(s) URL of the page; the host must be in the team's allowed_domains"`
	Name        string `json:"name,omitempty" jsonschema:"description=Base name of the screenshots under captures/ (letters digits . _ - kept); default: the URL's host and last path segment. Existing files are never overwritten: -2 -3 … is added"`
	PaletteSize int    `json:"palette_size,omitempty" jsonschema:"minimum=1,maximum=16,description=Most colours in the palette (default 8)"`
	// TimeoutSeconds bounds this call, at most research.capture_timeout.
	TimeoutSeconds int `json:"timeout_seconds,omitempty" jsonschema:"minimum=1,maximum=300,description=Bound of this call in seconds (default and most: the deployment's research.capture_timeout, 45 by default)"`
}

// CaptureAnswer is capture_reference's result.
type CaptureAnswer struct {
	URL      string `json:"url"`
	FinalURL string `json:"final_url"`
	Status   int    `json:"status"`
	Title    string `json:"title"`
	// Screenshots are the full-page PNGs saved in the workspace (desktop first).
	Screenshots []Screenshot `json:"screenshots"`
	// Palette is the desktop screenshot's colours by share of its area.
	Palette []Swatch `json:"palette"`
	Facts
	// Refused are the page's requests the egress proxy refused (or could not
	// connect), with its reasons; FailedRequests what the browser saw fail.
	Refused        []Refusal       `json:"refused"`
	FailedRequests []FailedRequest `json:"failed_requests,omitempty"`
	DurationMS     int64           `json:"duration_ms"`
}

// Screenshot is one saved screenshot.
type Screenshot struct {
	Viewport string `json:"viewport"` // desktop | mobile
	Path     string `json:"path"`     // relative to the workspace
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	Bytes    int    `json:"bytes"`
	// Cut reports that the page was longer than research.capture_max_height.
	Cut bool `json:"cut,omitempty"`
}

// Refusal is a connection of the page that the egress proxy refused.
type Refusal struct {
	Method string `json:"method"` // CONNECT for https and WebSockets, else the HTTP method
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// FailedRequest is a request of the page that did not complete, or (in
// validate_web_app's browser checks) was answered with an HTTP error status.
type FailedRequest struct {
	URL  string `json:"url"`
	Type string `json:"type"`
	// Status is the HTTP status of an answer of 400 or more; 0 for a request
	// that got no answer (Error says why).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error"`
}

// Viewports of the screenshots, in CSS pixels (device scale 1: one PNG pixel each).
const (
	DesktopWidth = 1440
	MobileWidth  = 390
	// CapturesDir is where capture_reference saves, relative to the workspace.
	CapturesDir = "captures"
	// defaultPaletteSize is the palette's default length.
	defaultPaletteSize = 8
	maxFailedRequests  = 50
)

func registerCapture(reg *tools.Registry, host BrowserHost, cfg Config) *Browser {
	var pool *browsers
	if host != nil {
		pool = newBrowsers(host, cfg, nil)
	}
	registerPlay(reg, pool, cfg)
	tools.Register(reg, "capture_reference", "Screenshot a page (desktop 1440 px and mobile 390 px, full page, saved under captures/) in a sandboxed browser and return its computed design facts: palette by share of painted area, type scale, fonts, measure, vertical rhythm, breakpoints, and the requests the egress proxy refused.",
		func(ctx context.Context, call tools.Call, a CaptureArgs) (tools.Result, error) {
			if pool == nil {
				return tools.Result{}, errors.New("capture_reference needs the Docker sandbox: pages are rendered by Chromium in a container of the browser image, never on the worker's host (sandbox.kind docker, and `make images`)")
			}
			if a.PaletteSize == 0 {
				a.PaletteSize = defaultPaletteSize
			}
			if a.PaletteSize < 1 || a.PaletteSize > 16 {
				return tools.Result{}, fmt.Errorf("capture_reference: palette_size %d: want 1-16", a.PaletteSize)
			}
			u, err := url.Parse(a.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return tools.Result{}, fmt.Errorf("capture_reference: %q is not an http(s) URL", a.URL)
			}
			if err := checkBrowserCall("capture_reference", call, a.TimeoutSeconds); err != nil {
				return tools.Result{}, err
			}
			s := call.Session
			ans, err := capture(ctx, pool, cfg, s, a)
			if err != nil {
				return tools.Result{}, fmt.Errorf("capture_reference %s: %w", a.URL, err)
			}
			return tools.JSON(ans)
		}, tools.Returns[CaptureAnswer](), tools.Outbound(), tools.Reads(tools.Untrusted), tools.InGroup("research"), tools.WithTier(tools.Elevated))
	if pool == nil {
		return nil
	}
	return &Browser{pool: pool, cfg: cfg}
}

// egressLog collects the proxy's records for the run during one call.
type egressLog struct {
	mu   sync.Mutex
	recs []store.EgressConnection
}

func (l *egressLog) add(ev store.EgressConnection) {
	if ev.Allowed && ev.Reason == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) < 1000 {
		l.recs = append(l.recs, ev)
	}
}

func (l *egressLog) all() []store.EgressConnection {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// pageLog collects what the page requested and what failed (browser events).
type pageLog struct {
	mu     sync.Mutex
	hosts  map[string]bool // host:port the page asked for
	urls   map[network.RequestID]string
	failed []FailedRequest
}

func hostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "wss": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

func (l *pageLog) event(ev any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if ev.Request != nil {
			l.hosts[hostPort(ev.Request.URL)] = true
			l.urls[ev.RequestID] = ev.Request.URL
		}
	case *network.EventWebSocketCreated:
		l.hosts[hostPort(ev.URL)] = true
		l.urls[ev.RequestID] = ev.URL
	case *network.EventLoadingFailed:
		if len(l.failed) < maxFailedRequests {
			l.failed = append(l.failed, FailedRequest{URL: l.urls[ev.RequestID], Type: string(ev.Type), Error: ev.ErrorText})
		}
	}
	// A WebSocket the proxy refused just closes: its refusal comes from the
	// proxy's log (refusals), matched by the host the page asked for.
}

func capture(ctx context.Context, pool *browsers, cfg Config, s *tools.Session, a CaptureArgs) (CaptureAnswer, error) {
	start := time.Now()
	limit, bound := cfg.CaptureTimeout, "research.capture_timeout"
	if a.TimeoutSeconds > 0 && time.Duration(a.TimeoutSeconds)*time.Second < limit {
		limit, bound = time.Duration(a.TimeoutSeconds)*time.Second, "timeout_seconds"
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	timedOut := func(err error, what string) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("timed out %s after %s (%s)", what, limit, bound)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	pg, err := pool.acquire(ctx, s.RunID, sandbox.EgressBinding{Agent: s.Agent, Allowlist: s.AllowedDomains, Ports: s.EgressPorts, DenyPrivate: s.EgressDenyPrivate})
	if err != nil {
		return CaptureAnswer{}, timedOut(err, "starting the browser")
	}
	defer pg.release()
	crashed := func(err error, what string) error {
		if pg.live.dead() {
			return fmt.Errorf("%w %s (its log: %s)", ErrBrowserCrashed, what, tailText(pg.live.att.Stderr(), 600))
		}
		return timedOut(err, what)
	}

	var egress egressLog
	stopWatch := pg.live.att.Watch(egress.add)
	defer stopWatch()

	// A tab in a browser context of its own: no cookie or storage of another
	// call. It closes with tcancel, and at the call's deadline at the latest.
	tctx, tcancel := chromedp.NewContext(pg.live.ctx, chromedp.WithNewBrowserContext())
	defer tcancel()
	stopAfter := context.AfterFunc(ctx, tcancel)
	defer stopAfter()
	rctx, rcancel := context.WithCancel(tctx)
	defer rcancel()
	go func() {
		select {
		case <-ctx.Done():
			rcancel()
		case <-rctx.Done():
		}
	}()

	if err := chromedp.Do(rctx, viewport(DesktopWidth, 900, false)); err != nil {
		return CaptureAnswer{}, crashed(err, "opening a page")
	}
	plog := &pageLog{hosts: map[string]bool{}, urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(rctx, plog.event); err != nil {
		return CaptureAnswer{}, crashed(err, "opening a page")
	}
	resp, err := chromedp.RunResponse(rctx, chromedp.Navigate(a.URL))
	if err != nil {
		var le *chromedp.LoadError
		if errors.As(err, &le) {
			return CaptureAnswer{}, loadFailure(a.URL, le.ErrorText, egress.all())
		}
		return CaptureAnswer{}, crashed(err, "loading the page")
	}
	ans := CaptureAnswer{URL: a.URL, FinalURL: a.URL}
	if resp != nil {
		ans.FinalURL, ans.Status = resp.URL, int(resp.Status)
		if resp.Status < 200 || resp.Status > 299 {
			return CaptureAnswer{}, statusFailure(resp, egress.all())
		}
	}
	// Web fonts decide the layout: wait for them (bounded by the deadline), then
	// one more frame.
	if _, err := chromedp.Run(rctx, chromedp.Evaluate[bool](`document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
		return CaptureAnswer{}, crashed(err, "waiting for the page's fonts")
	}
	pr, err := chromedp.Run(rctx, chromedp.Evaluate[probe](captureJS))
	if err != nil {
		return CaptureAnswer{}, crashed(err, "measuring the page")
	}
	ans.Title = pr.Title
	ans.Facts = aggregate(pr)

	desktop, dcut, err := shoot(rctx, DesktopWidth, false, cfg.CaptureMaxHeight)
	if err != nil {
		return CaptureAnswer{}, crashed(err, "taking the desktop screenshot")
	}
	mobile, mcut, err := shoot(rctx, MobileWidth, true, cfg.CaptureMaxHeight)
	if err != nil {
		return CaptureAnswer{}, crashed(err, "taking the mobile screenshot")
	}
	dimg, err := png.Decode(bytes.NewReader(desktop))
	if err != nil {
		return CaptureAnswer{}, fmt.Errorf("the desktop screenshot is no PNG: %w", err)
	}
	mcfg, err := png.DecodeConfig(bytes.NewReader(mobile))
	if err != nil {
		return CaptureAnswer{}, fmt.Errorf("the mobile screenshot is no PNG: %w", err)
	}
	ans.Palette = palette(dimg, a.PaletteSize)

	paths, err := saveCaptures(s.Workspace, pool.host, CaptureStem(a.Name, a.URL), desktop, mobile)
	if err != nil {
		return CaptureAnswer{}, err
	}
	ans.Screenshots = []Screenshot{
		{Viewport: "desktop", Path: paths[0], Width: dimg.Bounds().Dx(), Height: dimg.Bounds().Dy(), Bytes: len(desktop), Cut: dcut},
		{Viewport: "mobile", Path: paths[1], Width: mcfg.Width, Height: mcfg.Height, Bytes: len(mobile), Cut: mcut},
	}
	plog.mu.Lock()
	ans.FailedRequests = slices.Clone(plog.failed)
	hosts := plog.hosts
	plog.mu.Unlock()
	ans.Refused = refusals(egress.all(), hosts)
	ans.DurationMS = time.Since(start).Milliseconds()
	return ans, nil
}

func viewport(width, height int64, mobile bool) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: width, Height: height, DeviceScaleFactor: 1, Mobile: mobile,
		})
		return chromedp.Void{}, err
	}
}

// shoot takes a full-page PNG at width: the viewport grows to the page's height
// (cut at maxHeight), so the image is exactly width pixels wide.
func shoot(ctx context.Context, width int64, mobile bool, maxHeight int) ([]byte, bool, error) {
	if err := chromedp.Do(ctx, viewport(width, 900, mobile)); err != nil {
		return nil, false, err
	}
	// One frame for the new layout before it is measured.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => r(true)))`, chromedp.EvalAwaitPromise)); err != nil {
		return nil, false, err
	}
	type shot struct {
		data []byte
		cut  bool
	}
	sh, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (shot, error) {
		m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return shot{}, err
		}
		h := int64(900)
		if m.CSSContentSize != nil {
			h = max(int64(m.CSSContentSize.Height+0.5), 1)
		}
		cut := h > int64(maxHeight)
		h = min(h, int64(maxHeight))
		if _, err := cdp.Call(ctx, t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: width, Height: h, DeviceScaleFactor: 1, Mobile: mobile,
		}); err != nil {
			return shot{}, err
		}
		yes := true
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format: page.CaptureScreenshotFormatPng, FromSurface: &yes,
			Clip: &page.Viewport{X: 0, Y: 0, Width: float64(width), Height: float64(h), Scale: 1},
		})
		if err != nil {
			return shot{}, err
		}
		return shot{r.Data, cut}, nil
	})
	return sh.data, sh.cut, err
}

// loadFailure explains a navigation the browser could not complete, with the
// proxy's word when it has one (a refusal, a name that does not resolve).
func loadFailure(raw, errorText string, recs []store.EgressConnection) error {
	hp := hostPort(raw)
	for _, r := range recs {
		if net.JoinHostPort(strings.ToLower(r.Host), strconv.Itoa(r.Port)) != hp {
			continue
		}
		switch {
		case !r.Allowed:
			return fmt.Errorf("the egress proxy refused %s: %s (%s)", hp, r.Reason, errorText)
		case isDNSFailure(r.Reason):
			return fmt.Errorf("DNS: %s does not resolve (%s; %s)", r.Host, r.Reason, errorText)
		case r.Reason != "":
			return fmt.Errorf("%s could not be reached: %s (%s)", hp, r.Reason, errorText)
		}
	}
	switch errorText {
	case "net::ERR_NAME_NOT_RESOLVED":
		return fmt.Errorf("DNS: %s does not resolve (%s)", hp, errorText)
	case "net::ERR_TIMED_OUT", "net::ERR_CONNECTION_TIMED_OUT":
		return fmt.Errorf("timed out connecting to %s (%s)", hp, errorText)
	}
	return fmt.Errorf("the page did not load: %s", errorText)
}

func isDNSFailure(reason string) bool {
	return strings.Contains(reason, "no such host") || strings.Contains(reason, "server misbehaving") || strings.Contains(reason, "lookup ")
}

// statusFailure is a main document that is not 2xx, with its status line (and
// the proxy's word when the proxy answered for an upstream it could not reach).
func statusFailure(resp *network.Response, recs []store.EgressConnection) error {
	text := resp.StatusText
	if text == "" {
		text = http.StatusText(int(resp.Status))
	}
	line := fmt.Sprintf("HTTP %d %s", resp.Status, text)
	if resp.Status == http.StatusBadGateway || resp.Status == http.StatusForbidden {
		if err := loadFailure(resp.URL, line, recs); !strings.HasPrefix(err.Error(), "the page did not load") {
			return err
		}
	}
	return fmt.Errorf("GET %s: %s", resp.URL, line)
}

// refusals are the proxy's refusals and failed dials for hosts the page asked
// for, one entry per host, port and reason.
func refusals(recs []store.EgressConnection, hosts map[string]bool) []Refusal {
	out := []Refusal{}
	idx := map[string]int{}
	for _, r := range recs {
		if !hosts[net.JoinHostPort(strings.ToLower(r.Host), strconv.Itoa(r.Port))] {
			continue
		}
		key := r.Method + " " + r.Host + " " + strconv.Itoa(r.Port) + " " + r.Reason
		if i, ok := idx[key]; ok {
			out[i].Count++
			continue
		}
		idx[key] = len(out)
		out = append(out, Refusal{Method: r.Method, Host: r.Host, Port: r.Port, Reason: r.Reason, Count: 1})
	}
	slices.SortStableFunc(out, func(a, b Refusal) int { return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port)) })
	return out
}

// CaptureStem is the base name of a capture's screenshots under captures/: the
// requested name, else the URL's host and last path segment; only [A-Za-z0-9._-]
// kept (anything else becomes "_"), no leading dot or dash, at most 80
// characters. It never names anything outside captures/.
func CaptureStem(name, rawURL string) string {
	if strings.TrimSpace(name) == "" {
		if u, err := url.Parse(rawURL); err == nil {
			name = strings.ToLower(u.Hostname())
			if b := path.Base(u.Path); b != "/" && b != "." && b != "" {
				name += "_" + b
			}
		}
	}
	return safeName(name, ".png", 80, "page")
}

// saveCaptures writes captures/<stem>-desktop.png and -mobile.png through an
// os.Root (no symlink out of the workspace), never over an existing file: both
// names take the first free suffix (-2, -3 …) together.
func saveCaptures(workspace string, host BrowserHost, stem string, desktop, mobile []byte) ([2]string, error) {
	return saveShots(workspace, host, stem, [2]string{"-desktop.png", "-mobile.png"}, desktop, mobile)
}

// saveShots writes captures/<stem><suffix> for both suffixes, never over an
// existing file (both take the first free -2, -3 … together).
func saveShots(workspace string, host BrowserHost, stem string, suffixes [2]string, desktop, mobile []byte) ([2]string, error) {
	var paths [2]string
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return paths, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	if err := root.Mkdir(CapturesDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return paths, fmt.Errorf("create %s/: %w", CapturesDir, err)
	}
	if fi, err := root.Stat(CapturesDir); err != nil || !fi.IsDir() {
		return paths, fmt.Errorf("%s/ is not a directory in the workspace", CapturesDir)
	}
	var uid, gid int
	chown := false
	if o, ok := host.(interface{ Owner() (int, int, bool) }); ok {
		// The sandbox's user owns the workspace: the files are the agent's.
		uid, gid, chown = o.Owner()
		if chown {
			_ = root.Lchown(CapturesDir, uid, gid)
		}
	}
	for i := 1; i <= 100; i++ {
		suffix := ""
		if i > 1 {
			suffix = "-" + strconv.Itoa(i)
		}
		names := [2]string{path.Join(CapturesDir, stem+suffix+suffixes[0]), path.Join(CapturesDir, stem+suffix+suffixes[1])}
		if _, err := root.Lstat(names[1]); err == nil {
			continue
		}
		f, err := root.OpenFile(names[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return paths, fmt.Errorf("create %s: %w", names[0], err)
		}
		g, err := root.OpenFile(names[1], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			f.Close()
			_ = root.Remove(names[0])
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return paths, fmt.Errorf("create %s: %w", names[1], err)
		}
		werr := errors.Join(write(f, desktop), write(g, mobile))
		if werr != nil {
			_ = root.Remove(names[0])
			_ = root.Remove(names[1])
			return paths, fmt.Errorf("save the screenshots: %w", werr)
		}
		if chown {
			_ = root.Lchown(names[0], uid, gid)
			_ = root.Lchown(names[1], uid, gid)
		}
		return names, nil
	}
	return paths, fmt.Errorf("%s/%s%s and 99 numbered variants exist: choose another name", CapturesDir, stem, suffixes[0])
}

func write(f *os.File, data []byte) error {
	_, err := f.Write(data)
	return errors.Join(err, f.Sync(), f.Close())
}
