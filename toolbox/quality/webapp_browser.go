package quality

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/tools"
)

// maxBrowserArg caps a selector or text a browser check looks for.
const maxBrowserArg = 2000

// PageBrowser loads a page the way a visitor's browser does, in the calling
// run's sandboxed browser (research.Browser, adapted by package toolbox): the run's
// own app (a loopback URL) inside the run's sandbox, anything else through the
// run's egress proxy. Nil in WebAppDeps: the browser checks are refused with a
// clear error. s is the calling session, whose run owns the browser.
type PageBrowser interface {
	LoadPage(ctx context.Context, s *tools.Session, rawURL string, q PageQuery) (PageLoad, error)
}

// PageQuery is what the browser checks of one path ask of its page.
type PageQuery struct {
	Selectors []string
	Texts     []string
	Wait      time.Duration
}

// PageLoad is one page after its scripts ran.
type PageLoad struct {
	Status int
	// Errors are uncaught exceptions, unhandled rejections and console.error
	// calls, as "kind: message".
	Errors []string
	// Failed are sub-requests with no answer or an HTTP status of 400 or
	// more, as "url → reason".
	Failed []string
	// Selectors counts the elements each selector matched (-1: invalid);
	// Texts tells whether each text is rendered.
	Selectors map[string]int
	Texts     map[string]bool
	MS        int64
}

// pageResult is one path's load, or why it did not load.
type pageResult struct {
	load PageLoad
	err  error
}

// loadPages loads each path that has browser checks once, with every
// selector and text those checks ask for. A page that does not load is a FAIL
// of its checks (the evidence says why), not an error of the call; an egress
// refusal is not reached here, since the browser's requests go through the
// run's egress proxy, which refuses on its own.
func loadPages(ctx context.Context, s *tools.Session, d WebAppDeps, base *url.URL, checks []preparedCheck) (map[string]pageResult, error) {
	queries := map[string]*PageQuery{}
	var order []string
	for _, c := range checks {
		if !browserCheckTypes[c.Type] {
			continue
		}
		q := queries[c.Path]
		if q == nil {
			q = &PageQuery{}
			queries[c.Path] = q
			order = append(order, c.Path)
		}
		switch c.Type {
		case WebCheckSelector:
			if !slices.Contains(q.Selectors, c.Selector) {
				q.Selectors = append(q.Selectors, c.Selector)
			}
		case WebCheckText:
			if !slices.Contains(q.Texts, c.Text) {
				q.Texts = append(q.Texts, c.Text)
			}
		}
		q.Wait = max(q.Wait, time.Duration(c.WaitMS)*time.Millisecond)
	}
	if len(order) == 0 {
		return nil, nil
	}
	if d.Browser == nil {
		return nil, errors.New("selector, text, no_console_errors and no_failed_requests checks need the headless browser, which runs only with the Docker sandbox (sandbox.kind docker, and `make images`); status, max_ms and json_schema checks work without it")
	}
	out := map[string]pageResult{}
	for _, p := range order {
		u, _ := joinAppPath(base, p) // validated before
		load, err := d.Browser.LoadPage(ctx, s, u.String(), *queries[p])
		out[p] = pageResult{load: load, err: err}
	}
	return out, nil
}

// browserRow judges one browser check from its page's load.
func browserRow(c preparedCheck, pr pageResult) WebCheckRow {
	row := WebCheckRow{Check: c.Type, Path: c.Path, Result: "FAIL", HTTPStatus: pr.load.Status, MS: pr.load.MS}
	if pr.err != nil {
		row.Evidence = "the page did not load in the browser: " + pr.err.Error()
		return row
	}
	l := pr.load
	page := fmt.Sprintf("page %s → %d", c.Path, l.Status)
	if l.Status >= 400 {
		// A visitor got an error page: whatever it contains, the page the
		// check is about was not served.
		row.Evidence = page + ": the page answered an error status, so it was not served"
		return row
	}
	pass := func(ev string) {
		row.Result, row.Evidence = "PASS", ev
	}
	switch c.Type {
	case WebCheckSelector:
		switch n := l.Selectors[c.Selector]; {
		case n < 0:
			row.Evidence = fmt.Sprintf("%s: %q is not a valid CSS selector", page, c.Selector)
		case n == 0:
			row.Evidence = fmt.Sprintf("%s: no element matches %q after the page's scripts ran", page, c.Selector)
		default:
			pass(fmt.Sprintf("%s: %d element(s) match %q", page, n, c.Selector))
		}
	case WebCheckText:
		if l.Texts[c.Text] {
			pass(fmt.Sprintf("%s: the rendered page contains %q", page, c.Text))
		} else {
			row.Evidence = fmt.Sprintf("%s: the rendered page does not contain %q", page, c.Text)
		}
	case WebCheckNoConsoleErrors:
		if len(l.Errors) == 0 {
			pass(page + ": no uncaught exception, unhandled rejection or console.error")
		} else {
			row.Evidence = fmt.Sprintf("%s: %d error(s): %s", page, len(l.Errors), listCapped(l.Errors, 5))
		}
	case WebCheckNoFailedRequests:
		if len(l.Failed) == 0 {
			pass(page + ": every sub-request was answered below 400")
		} else {
			row.Evidence = fmt.Sprintf("%s: %d failed sub-request(s): %s", page, len(l.Failed), listCapped(l.Failed, 5))
		}
	}
	return row
}

// listCapped joins the first n items and counts the rest.
func listCapped(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, "; ")
	}
	return strings.Join(xs[:n], "; ") + fmt.Sprintf("; … %d more", len(xs)-n)
}
