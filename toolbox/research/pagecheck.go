package research

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/aetherium-engine/aetherium/tools"
)

// Browser is a run's sandboxed browser offered to other tool classes:
// validate_web_app's browser checks load pages through it, exactly as
// play_test does (the run's own app inside its sandbox, everything else
// through the run's egress proxy). Register returns nil without a browser
// host (no Docker sandbox).
type Browser struct {
	pool *browsers
	cfg  Config
}

// Bounds of CheckPage.
const (
	// DefaultPageWait is how long a selector or text may take to appear after
	// the page loaded (scripts that render late).
	DefaultPageWait = 2 * time.Second
	// MaxPageWait caps a caller's wait.
	MaxPageWait = 30 * time.Second
	// pageSettle lets start-up scripts throw before the errors are read.
	pageSettle = 300 * time.Millisecond
)

// PageQuery is what a caller asks of one page.
type PageQuery struct {
	Selectors []string
	Texts     []string
	// Wait bounds how long the selectors and texts may take to appear after
	// the load event; default DefaultPageWait, at most MaxPageWait.
	Wait time.Duration
}

// PageCheck is one page as a visitor's browser saw it, after its scripts ran.
type PageCheck struct {
	URL    string
	Status int
	// Errors are the uncaught exceptions, unhandled rejections and
	// console.error calls from the start of the load to the end of the wait.
	Errors []PlayError
	// Failed are the page's sub-requests that got no answer or an HTTP status
	// of 400 or more.
	Failed []FailedRequest
	// Selectors maps each queried selector to the number of elements it
	// matched (-1: not a valid CSS selector); Texts whether each text is in
	// the page's rendered text (document.body.innerText).
	Selectors map[string]int
	Texts     map[string]bool
	Duration  time.Duration
}

// queryJS polls for the selectors and texts until all are present or the
// wait is over; an invalid selector counts -1 (never present).
const queryJS = `(async (sels, texts, wait) => {
  const deadline = Date.now() + wait;
  const count = (s) => { try { return document.querySelectorAll(s).length; } catch (_) { return -1; } };
  const has = (t) => ((document.body && document.body.innerText) || '').includes(t);
  for (;;) {
    const counts = sels.map(count), found = texts.map(has);
    if ((counts.every((n) => n > 0) && found.every(Boolean)) || Date.now() >= deadline) return { counts, found };
    await new Promise((r) => setTimeout(r, 50));
  }
})(%s, %s, %d)`

// CheckPage loads rawURL (http or https) in the calling run's browser and
// answers q. A page that does not load at all is an error; a page answered
// with an error status is reported with that status. s is the calling session,
// whose run's browser loads the page.
func (b *Browser) CheckPage(ctx context.Context, s *tools.Session, rawURL string, q PageQuery) (PageCheck, error) {
	if b == nil || b.pool == nil {
		return PageCheck{}, errors.New("browser checks need the Docker sandbox: pages run in Chromium in a container of the browser image, never on the worker's host (sandbox.kind docker, and `make images`)")
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return PageCheck{}, fmt.Errorf("%q is not an http(s) URL", rawURL)
	}
	if s == nil || s.Workspace == "" || s.RunID == "" {
		return PageCheck{}, tools.ErrNoWorkspace
	}
	wait := q.Wait
	if wait <= 0 {
		wait = DefaultPageWait
	}
	wait = min(wait, MaxPageWait)
	start := time.Now()
	op, err := openPage(ctx, b.pool, s, rawURL, "", b.cfg.CaptureTimeout)
	if err != nil {
		return PageCheck{}, err
	}
	defer op.close()
	status, err := op.navigate(rawURL)
	if err != nil {
		return PageCheck{}, err
	}
	if err := op.settle(pageSettle); err != nil {
		return PageCheck{}, err
	}
	out := PageCheck{URL: rawURL, Status: status, Selectors: map[string]int{}, Texts: map[string]bool{}}
	if len(q.Selectors)+len(q.Texts) > 0 {
		sels, _ := json.Marshal(nonNil(q.Selectors))
		texts, _ := json.Marshal(nonNil(q.Texts))
		type found struct {
			Counts []int  `json:"counts"`
			Found  []bool `json:"found"`
		}
		r, err := chromedp.Run(op.ctx, chromedp.Evaluate[found](fmt.Sprintf(queryJS, sels, texts, wait.Milliseconds()), chromedp.EvalAwaitPromise))
		if err != nil {
			return PageCheck{}, op.fail(err, "querying the page")
		}
		for i, sel := range q.Selectors {
			if i < len(r.Counts) {
				out.Selectors[sel] = r.Counts[i]
			}
		}
		for i, t := range q.Texts {
			if i < len(r.Found) {
				out.Texts[t] = r.Found[i]
			}
		}
	}
	if out.Errors, err = op.takeErrors(""); err != nil {
		return PageCheck{}, op.fail(err, "reading the page's errors")
	}
	out.Failed = op.failedRequests(rawURL)
	out.Duration = time.Since(start)
	return out, nil
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
