package research

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/aetherium-engine/aetherium/sandbox"
)

// BrowserHost starts helper containers of the sandbox image family on a run's
// egress network (sandbox.Docker implements it). capture_reference runs its
// browser there, never on the worker's host.
type BrowserHost interface {
	StartAttached(ctx context.Context, job sandbox.AttachedJob) (*sandbox.Attached, error)
}

// ErrBrowserCrashed is a browser that died during a call (the next call starts a
// new one).
var ErrBrowserCrashed = errors.New("the browser crashed")

// chromiumScript starts Debian's Chromium with the DevTools protocol on a pipe:
// the container's stdin becomes fd 3 (commands), its stdout fd 4 (answers and
// events), and Chromium's own output goes to stderr. The engine's attach stream
// carries the pipe, so the worker needs no connection into the sandbox network
// (whose firewall drops everything but the proxy port) and no published port.
// Every request the page makes goes to the run's egress proxy, loopback included
// (<-loopback undoes Chromium's implicit bypass), and WebRTC may not send UDP
// around it; without a proxy the script refuses to start. --no-sandbox: the
// container is the sandbox (no user namespaces, every capability dropped), and
// there is no /dev/shm, so shared memory lives in /tmp.
const chromiumScript = `[ -n "$HTTP_PROXY" ] || { echo "no egress proxy: refusing to start a browser without one" >&2; exit 64; }
exec /usr/lib/chromium/chromium --headless --remote-debugging-pipe \
 --proxy-server="$HTTP_PROXY" --proxy-bypass-list='<-loopback>' \
 --force-webrtc-ip-handling-policy=disable_non_proxied_udp \
 --no-sandbox --disable-dev-shm-usage --disable-gpu --user-data-dir=/tmp/chromium \
 --no-first-run --no-default-browser-check --disable-background-networking \
 --disable-component-update --disable-sync --disable-extensions --disable-default-apps \
 --disable-breakpad --disable-crash-reporter --metrics-recording-only --mute-audio \
 --hide-scrollbars --font-render-hinting=none --disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication \
 about:blank 3<&0 4>&1 </dev/null >&2`

// browsers keeps one browser container per run, reused by the run's calls (a page,
// in a browser context of its own, per call), at most cfg.CaptureMaxPages pages at
// once. A browser whose connection died is replaced at the next call; one idle for
// cfg.CaptureIdleTimeout is closed; the run's end removes its container (Release,
// the orphan sweep).
type browsers struct {
	host BrowserHost
	cfg  Config
	log  *slog.Logger

	mu      sync.Mutex
	runs    map[string]*runBrowser
	reaping bool
}

type runBrowser struct {
	pages chan struct{}

	mu       sync.Mutex
	live     *liveBrowser
	busy     int
	lastUsed time.Time
}

type liveBrowser struct {
	att    *sandbox.Attached
	ctx    context.Context // chromedp context holding the Browser
	cancel context.CancelFunc
	lost   <-chan struct{}
}

func (l *liveBrowser) dead() bool {
	select {
	case <-l.lost:
		return true
	case <-l.att.Done():
		return true
	default:
		return false
	}
}

func (l *liveBrowser) close() {
	l.cancel()
	_ = l.att.Close()
}

func newBrowsers(host BrowserHost, cfg Config, log *slog.Logger) *browsers {
	if log == nil {
		log = slog.Default()
	}
	return &browsers{host: host, cfg: cfg, log: log, runs: map[string]*runBrowser{}}
}

// page is one call's share of a run's browser.
type pageSlot struct {
	live    *liveBrowser
	source  string // the browser's address on the run network
	release func()
}

// acquire waits for a free page slot of the run's browser (starting or
// restarting the browser as needed) and binds the run's egress to the caller.
func (b *browsers) acquire(ctx context.Context, run string, bind sandbox.EgressBinding) (*pageSlot, error) {
	rb, err := b.slot(ctx, run)
	if err != nil {
		return nil, err
	}
	freeSlot := func() { <-rb.pages }
	defer rb.mu.Unlock()
	if rb.live != nil && rb.live.dead() {
		b.log.Warn("capture_reference: the run's browser died; starting a new one", "run", run, "stderr", tailText(rb.live.att.Stderr(), 500))
		rb.live.close()
		rb.live = nil
	}
	if rb.live == nil {
		live, err := b.start(ctx, run, bind)
		if err != nil {
			freeSlot()
			return nil, err
		}
		rb.live = live
	} else if err := rb.live.att.Rebind(ctx, bind); err != nil {
		freeSlot()
		return nil, fmt.Errorf("bind the run's egress: %w", err)
	}
	rb.busy++
	live := rb.live
	return &pageSlot{live: live, source: live.att.Source, release: func() {
		rb.mu.Lock()
		rb.busy--
		rb.lastUsed = time.Now()
		rb.mu.Unlock()
		freeSlot()
	}}, nil
}

// slot takes a page slot of the run's browser and returns it locked. The reaper
// may have forgotten an idle entry between the lookup and the slot: then the
// slot is given back and a fresh entry taken, so no browser starts untracked.
func (b *browsers) slot(ctx context.Context, run string) (*runBrowser, error) {
	for {
		b.mu.Lock()
		rb, ok := b.runs[run]
		if !ok {
			rb = &runBrowser{pages: make(chan struct{}, b.cfg.CaptureMaxPages), lastUsed: time.Now()}
			b.runs[run] = rb
		}
		if !b.reaping {
			b.reaping = true
			go b.reap()
		}
		b.mu.Unlock()

		select {
		case rb.pages <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a page of this run's browser (%d open, research.capture_max_pages): %w", b.cfg.CaptureMaxPages, ctx.Err())
		}
		rb.mu.Lock()
		b.mu.Lock()
		current := b.runs[run] == rb
		b.mu.Unlock()
		if current {
			return rb, nil
		}
		rb.mu.Unlock()
		<-rb.pages
	}
}

// start runs a browser container and connects chromedp to it over the pipe.
func (b *browsers) start(ctx context.Context, run string, bind sandbox.EgressBinding) (*liveBrowser, error) {
	att, err := b.host.StartAttached(ctx, sandbox.AttachedJob{
		Image: b.cfg.CaptureImage, Cmd: []string{"/bin/sh", "-c", chromiumScript}, Service: "browser", Project: run,
		Egress: &bind, MemoryBytes: b.cfg.CaptureMemoryBytes, CPUs: 1, PidsLimit: 1024, TmpfsBytes: b.cfg.CaptureTmpfsBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("start the browser: %w", err)
	}
	tr := chromedp.NewPipeConn(att.Stdout, att.Stdin)
	// The browser lives beyond this call: its contexts hang off Background, and
	// close() (idle, death, restart) ends them.
	actx, acancel := chromedp.NewAllocatorContext(context.Background(), pipeAllocator{tr: tr})
	bctx, bcancel := chromedp.NewContext(actx,
		chromedp.WithLogf(func(f string, a ...any) { b.log.Debug("chromedp: "+fmt.Sprintf(f, a...), "run", run) }),
		chromedp.WithErrorf(func(f string, a ...any) { b.log.Debug("chromedp error: "+fmt.Sprintf(f, a...), "run", run) }))
	live := &liveBrowser{att: att, ctx: bctx, cancel: func() { bcancel(); acancel() }}
	// The first Run connects (and opens the root context's tab): the browser
	// answers once it is up. Its context becomes the browser's own, so it
	// carries no deadline; the caller's bounds the wait instead.
	up := make(chan error, 1)
	go func() {
		_, err := chromedp.Run(bctx, chromedp.Evaluate[int]("1"))
		up <- err
	}()
	select {
	case err := <-up:
		if err != nil {
			live.close()
			return nil, fmt.Errorf("start the browser: %w (its log: %s)", err, tailText(att.Stderr(), 800))
		}
	case <-ctx.Done():
		live.close()
		return nil, fmt.Errorf("start the browser: %w (its log: %s)", ctx.Err(), tailText(att.Stderr(), 800))
	}
	live.lost = chromedp.FromContext(bctx).Browser.LostConnection
	b.log.Info("capture_reference: browser started", "run", run, "container", att.Name)
	return live, nil
}

// reap closes browsers idle for cfg.CaptureIdleTimeout and forgets dead ones; it
// stops when no browser is left.
func (b *browsers) reap() {
	tick := max(b.cfg.CaptureIdleTimeout/4, time.Second)
	for {
		time.Sleep(tick)
		var closing []*liveBrowser
		b.mu.Lock()
		for run, rb := range b.runs {
			// A run whose entry is locked is starting a browser or taking a
			// page: not idle.
			if !rb.mu.TryLock() {
				continue
			}
			unused := rb.busy == 0 && len(rb.pages) == 0
			if unused && (time.Since(rb.lastUsed) > b.cfg.CaptureIdleTimeout || (rb.live != nil && rb.live.dead())) {
				if rb.live != nil {
					closing = append(closing, rb.live)
					rb.live = nil
				}
				delete(b.runs, run)
			}
			rb.mu.Unlock()
		}
		done := len(b.runs) == 0
		if done {
			b.reaping = false
		}
		b.mu.Unlock()
		// Removing a container takes a moment: not under the lock.
		for _, l := range closing {
			l.close()
		}
		if done {
			return
		}
	}
}

// closeAll closes every browser (tests, shutdown).
func (b *browsers) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for run, rb := range b.runs {
		rb.mu.Lock()
		if rb.live != nil {
			rb.live.close()
			rb.live = nil
		}
		rb.mu.Unlock()
		delete(b.runs, run)
	}
}

// pipeAllocator hands chromedp the pipe to a browser that runs already.
type pipeAllocator struct{ tr chromedp.Transport }

func (a pipeAllocator) Allocate(ctx context.Context, opts ...chromedp.BrowserOption) (*chromedp.Browser, error) {
	return chromedp.NewBrowserTransport(ctx, a.tr, opts...)
}

func (pipeAllocator) Wait() {}

// Attaches tells chromedp that every context opens a tab of its own.
func (pipeAllocator) Attaches() bool { return true }

func tailText(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
