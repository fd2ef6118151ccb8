package research

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpfetch "github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/tools"
)

// openedPage is one page of a run's browser, opened the way play_test and
// validate_web_app's browser checks open pages: play.js installed before the
// page's own scripts, workspace files answered from the workspace (PlayOrigin),
// the run's own app (a loopback origin) fetched inside the run's sandbox, every
// other request through the run's egress proxy. It records the page's
// sub-requests that failed (a network error or an HTTP error status).
type openedPage struct {
	ctx   context.Context // the chromedp target
	limit time.Duration
	sv    *served
	fail  func(err error, what string) error
	close func()

	mu       sync.Mutex
	urls     map[network.RequestID]string
	failures []FailedRequest
	// appBodies are the SHA-256 of the run's app's successful answers by URL
	// path: what a URL page loaded (appFiles maps them to workspace files).
	appBodies map[string]string
}

// openPage starts (or reuses) the run's browser and opens a fresh page in a
// browser context of its own, bounded by limit. Nothing is loaded yet: navigate
// does that. The caller must call close.
func openPage(ctx context.Context, pool *browsers, s *tools.Session, target, rel string, limit time.Duration) (*openedPage, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	pg, err := pool.acquire(ctx, s.RunID, sandbox.EgressBinding{Agent: s.Agent, Allowlist: s.AllowedDomains, Ports: s.EgressPorts, DenyPrivate: s.EgressDenyPrivate})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("starting the browser: %w", err)
	}
	tctx, tcancel := chromedp.NewContext(pg.live.ctx, chromedp.WithNewBrowserContext())
	stopAfter := context.AfterFunc(ctx, tcancel)
	op := &openedPage{ctx: tctx, limit: limit, urls: map[network.RequestID]string{}, appBodies: map[string]string{}}
	var wsRoot *confine.Root
	op.close = func() {
		stopAfter()
		tcancel()
		if wsRoot != nil {
			_ = wsRoot.Close()
		}
		pg.release()
		cancel()
	}
	op.fail = func(err error, what string) error {
		if pg.live.dead() {
			return fmt.Errorf("%w %s (its log: %s)", ErrBrowserCrashed, what, tailText(pg.live.att.Stderr(), 600))
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("timed out %s after %s", what, limit)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if wsRoot, err = openPlayRoot(s.Workspace); err != nil {
		op.close()
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	op.sv = &served{root: wsRoot, files: map[string]string{}}
	// A page of the run's own app (localhost) is fetched inside the run's
	// sandbox, where the app runs: the browser's requests for that origin are
	// answered through the sandbox, never from the browser's own loopback.
	app, appHost := appOrigin(target, pool.host)
	var client *http.Client
	if app != "" {
		client = &http.Client{Timeout: limit, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return appHost.DialProject(ctx, s.RunID, addr)
			}},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	// One listener for every event: paused requests are answered in a
	// goroutine (a listener must not call the browser).
	if err := chromedp.Listen(tctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpfetch.EventRequestPaused:
			switch {
			case app != "" && strings.HasPrefix(ev.Request.URL, app):
				go fulfillFromApp(tctx, client, ev, op.recordApp)
			case rel != "" && strings.HasPrefix(ev.Request.URL, PlayOrigin+"/"):
				go op.fulfillFromWorkspace(ev)
			}
		case *network.EventRequestWillBeSent:
			op.mu.Lock()
			op.urls[ev.RequestID] = ev.Request.URL
			op.mu.Unlock()
		case *network.EventResponseReceived:
			if ev.Response != nil && ev.Response.Status >= 400 {
				op.failed(FailedRequest{URL: ev.Response.URL, Type: string(ev.Type), Status: int(ev.Response.Status), Error: fmt.Sprintf("HTTP %d", ev.Response.Status)})
			}
		case *network.EventLoadingFailed:
			if ev.Canceled {
				return
			}
			op.mu.Lock()
			u := op.urls[ev.RequestID]
			op.mu.Unlock()
			msg := ev.ErrorText
			if ev.BlockedReason != "" {
				msg += " (blocked: " + ev.BlockedReason.String() + ")"
			}
			op.failed(FailedRequest{URL: u, Type: string(ev.Type), Error: msg})
		}
	}); err != nil {
		op.close()
		return nil, op.fail(err, "opening a page")
	}
	setup := func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: playJS}); err != nil {
			return chromedp.Void{}, err
		}
		var patterns []*cdpfetch.RequestPattern
		if rel != "" {
			patterns = append(patterns, &cdpfetch.RequestPattern{URLPattern: PlayOrigin + "/*"})
		}
		if app != "" {
			patterns = append(patterns, &cdpfetch.RequestPattern{URLPattern: app + "*"})
		}
		if len(patterns) > 0 {
			if _, err := cdp.Call(ctx, t, cdpfetch.Enable, cdpfetch.EnableParams{Patterns: patterns}); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	}
	if err := chromedp.Do(tctx, viewport(playWidth, playHeight, false), setup); err != nil {
		op.close()
		return nil, op.fail(err, "opening a page")
	}
	return op, nil
}

// failed records a failed request; a request both answered with an error
// status and then failed is reported once, by its first outcome. The
// browser's own favicon probe (type Other) is not a request of the page's:
// check_finishing judges favicons.
func (op *openedPage) failed(f FailedRequest) {
	if u, err := url.Parse(f.URL); err == nil && u.Path == "/favicon.ico" && f.Type == string(network.ResourceTypeOther) {
		return
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	for _, have := range op.failures {
		if have.URL == f.URL && f.URL != "" {
			return
		}
	}
	if len(op.failures) < 200 {
		op.failures = append(op.failures, f)
	}
}

// failedRequests are the failed sub-requests so far, the page itself excluded
// (its own status is reported as the page's).
func (op *openedPage) failedRequests(pageURL string) []FailedRequest {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := []FailedRequest{}
	for _, f := range op.failures {
		if f.URL != pageURL {
			out = append(out, f)
		}
	}
	return out
}

// recordApp remembers one successful answer of the run's app.
func (op *openedPage) recordApp(path string, body []byte) {
	sum := sha256.Sum256(body)
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.appBodies) < playMaxAppFiles {
		op.appBodies[path] = hex.EncodeToString(sum[:])
	}
}

// fulfillFromWorkspace answers one paused PlayOrigin request from the workspace.
func (op *openedPage) fulfillFromWorkspace(rp *cdpfetch.EventRequestPaused) {
	code, body, ct := op.sv.answer(rp.Request.URL)
	_ = chromedp.Do(op.ctx, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		p := cdpfetch.FulfillRequestParams{RequestID: rp.RequestID, ResponseCode: code, Body: body}
		if ct != "" {
			p.ResponseHeaders = []*cdpfetch.HeaderEntry{{Name: "Content-Type", Value: ct}}
		}
		_, err := cdp.Call(ctx, t, cdpfetch.FulfillRequest, p)
		return chromedp.Void{}, err
	})
}

// navigate loads target and returns its HTTP status; a page that did not load
// at all is an error naming the browser's reason.
func (op *openedPage) navigate(target string) (int, error) {
	resp, err := chromedp.RunResponse(op.ctx, chromedp.Navigate(target))
	if err != nil {
		var le *chromedp.LoadError
		if errors.As(err, &le) {
			return 0, fmt.Errorf("the page did not load: %s", le.ErrorText)
		}
		return 0, op.fail(err, "loading the page")
	}
	if resp == nil {
		return 0, nil
	}
	return int(resp.Status), nil
}

// settle waits d for the page's start-up scripts to run.
func (op *openedPage) settle(d time.Duration) error {
	_, err := chromedp.Run(op.ctx, chromedp.Evaluate[bool](fmt.Sprintf(`new Promise(r => setTimeout(() => r(true), %d))`, d.Milliseconds()), chromedp.EvalAwaitPromise))
	if err != nil {
		return op.fail(err, "waiting for the page")
	}
	return nil
}

// takeErrors drains what play.js recorded (exceptions, rejections,
// console.error) and tags each with control.
func (op *openedPage) takeErrors(control string) ([]PlayError, error) {
	errs, err := chromedp.Run(op.ctx, chromedp.Evaluate[[]PlayError](`window.__aePlay ? window.__aePlay.take() : []`))
	if err != nil {
		return nil, err
	}
	for i := range errs {
		errs[i].Control = control
	}
	return errs, nil
}
