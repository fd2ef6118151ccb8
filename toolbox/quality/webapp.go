package quality

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Defaults of WebAppConfig.
const (
	DefaultWebAppMaxBodyBytes   = 2 << 20
	DefaultWebAppRequestTimeout = 10 * time.Second
	DefaultWebAppCallTimeout    = 60 * time.Second
	DefaultWebAppMaxPaths       = 50
	DefaultWebAppMaxChecks      = 50
	DefaultWebAppMaxSchemaBytes = 4 << 20
)

// WebAppConfig bounds validate_web_app and capture_api_schema.
type WebAppConfig struct {
	// MaxBodyBytes caps one response body read (a larger one is an error, not a
	// truncated document). Default DefaultWebAppMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"webapp_max_body_bytes"`
	// RequestTimeout bounds one request. Default DefaultWebAppRequestTimeout.
	RequestTimeout time.Duration `yaml:"webapp_request_timeout"`
	// CallTimeout bounds a whole tool call (discovery, every probe or check).
	// Default DefaultWebAppCallTimeout.
	CallTimeout time.Duration `yaml:"webapp_call_timeout"`
	// MaxPaths caps capture_api_schema's probed paths. Default DefaultWebAppMaxPaths.
	MaxPaths int `yaml:"webapp_max_paths"`
	// MaxChecks caps validate_web_app's checks. Default DefaultWebAppMaxChecks.
	MaxChecks int `yaml:"webapp_max_checks"`
	// MaxSchemaBytes caps the schema files written and read (out, compare_to).
	// Default DefaultWebAppMaxSchemaBytes.
	MaxSchemaBytes int64 `yaml:"webapp_max_schema_bytes"`
}

// WithDefaults fills the zero fields.
func (c WebAppConfig) WithDefaults() WebAppConfig {
	c.MaxBodyBytes = defaults.Positive(c.MaxBodyBytes, DefaultWebAppMaxBodyBytes)
	c.RequestTimeout = defaults.Positive(c.RequestTimeout, DefaultWebAppRequestTimeout)
	c.CallTimeout = defaults.Positive(c.CallTimeout, DefaultWebAppCallTimeout)
	c.MaxPaths = defaults.Positive(c.MaxPaths, DefaultWebAppMaxPaths)
	c.MaxChecks = defaults.Positive(c.MaxChecks, DefaultWebAppMaxChecks)
	c.MaxSchemaBytes = defaults.Positive(c.MaxSchemaBytes, DefaultWebAppMaxSchemaBytes)
	return c
}

// SandboxDialer opens TCP streams that start inside a run's sandbox
// (sandbox.Docker.DialProject): there, localhost is the run's own app.
type SandboxDialer interface {
	DialProject(ctx context.Context, project, addr string) (net.Conn, error)
}

// WebAppDeps are what validate_web_app and capture_api_schema reach apps with.
type WebAppDeps struct {
	// Egress carries requests to every destination but the run's loopback; nil
	// registers the tools but they refuse to run.
	Egress *egress.Egress
	// Sandbox, when set (the Docker executor), carries requests to localhost
	// and loopback addresses from inside the calling run's sandbox, where a
	// worker's run_shell started the app. Nil (the local executor, whose
	// commands run on the worker's host): loopback is the worker's own, through
	// Egress.
	Sandbox SandboxDialer
	// Browser renders pages for validate_web_app's browser checks (selector,
	// text, no_console_errors, no_failed_requests); nil refuses those checks.
	Browser PageBrowser
	// Workspace names the owner of the schema file capture_api_schema writes.
	Workspace workspace.Config
}

// RegisterWebApp adds validate_web_app and capture_api_schema, the two quality
// tools that reach a running application. Both take a URL, so both are Outbound:
// the gate checks the destination and scans the arguments (DLP) before they run.
func RegisterWebApp(reg *tools.Registry, d WebAppDeps, cfg WebAppConfig) {
	cfg = cfg.WithDefaults()
	registerAPISchema(reg, d, cfg)
	registerValidateWebApp(reg, d, cfg)
}

// Routes a request took, as reported in Via.
const (
	ViaSandbox = "sandbox" // from inside the run's sandbox (its loopback)
	ViaEgress  = "egress"  // from the worker, through the egress client
)

// errResponseTooLarge is a body over WebAppConfig.MaxBodyBytes.
var errResponseTooLarge = errors.New("response body over the size limit")

// maxAppRedirects caps redirects on the sandbox route (the egress client has
// its own cap).
const maxAppRedirects = 5

// appClient is the client that reaches one app for the calling session, and the
// route it takes. A loopback origin with a sandbox goes through the run's
// sandbox (where the app runs); anything else through the session's egress
// client, which enforces the team's policy on every hop. Either way a redirect
// may not leave the origin the caller named: a web app that bounces a checker
// elsewhere is a finding, not a place to follow.
func appClient(s *tools.Session, d WebAppDeps, origin *url.URL) (*http.Client, string, error) {
	if d.Sandbox != nil && tools.IsLoopbackHost(origin.Hostname()) {
		if s == nil || s.RunID == "" {
			return nil, "", errors.New("no run for this session: the run's sandbox cannot be reached")
		}
		run := s.RunID
		t := &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return d.Sandbox.DialProject(ctx, run, addr)
			},
			// One exec per connection; an idle one would hold a process.
			DisableKeepAlives: true,
		}
		return &http.Client{Transport: t, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxAppRedirects {
				return fmt.Errorf("more than %d redirects", maxAppRedirects)
			}
			return leavesOrigin(req.URL, origin)
		}}, ViaSandbox, nil
	}
	c, err := egressAppClient(s, d.Egress, origin)
	return c, ViaEgress, err
}

// egressAppClient is the session's egress client narrowed to one origin.
func egressAppClient(s *tools.Session, eg *egress.Egress, origin *url.URL) (*http.Client, error) {
	if eg == nil {
		return nil, errors.New("no egress client configured")
	}
	var allow []string
	denyPrivate := false
	if s != nil {
		allow, denyPrivate = s.AllowedDomains, s.EgressDenyPrivate
	}
	base := eg.ClientFor(allow, denyPrivate)
	c := *base
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := base.CheckRedirect(req, via); err != nil {
			return err
		}
		return leavesOrigin(req.URL, origin)
	}
	return &c, nil
}

// leavesOrigin refuses a redirect target outside the app's origin.
func leavesOrigin(target, origin *url.URL) error {
	if sameOrigin(target, origin) {
		return nil
	}
	return fmt.Errorf("%w: redirect to %s leaves the app's origin %s", egress.ErrEgressDenied, target.Redacted(), originOf(origin))
}

func originOf(u *url.URL) string { return u.Scheme + "://" + u.Host }

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// parseAppURL checks a caller's base URL up front so a file:// or ftp:// URL is
// a clear error before anything is dialed (the gate refuses it too; this keeps
// the tool honest when called without the gate, as in tests).
func parseAppURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: only http and https URLs are checked (scheme %q)", raw, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("url %q has no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url %q carries credentials; pass none", u.Redacted())
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// joinAppPath resolves an app path ("/api/users", "health?x=1") against base,
// keeping base's own path prefix (http://host/app + /api → /app/api). An absolute
// URL is refused: every probe stays on the app the caller named.
func joinAppPath(base *url.URL, p string) (*url.URL, error) {
	if strings.ContainsAny(p, "\x00\r\n") {
		return nil, fmt.Errorf("path %q contains a control character", p)
	}
	ref, err := url.Parse(p)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", p, err)
	}
	if ref.Scheme != "" || ref.Host != "" {
		return nil, fmt.Errorf("path %q is a URL: give paths on the app (e.g. /api/users)", p)
	}
	u := *base
	u.Path = path.Join("/", base.Path, ref.Path)
	if strings.HasSuffix(ref.Path, "/") && !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawPath = ""
	u.RawQuery = ref.RawQuery
	return &u, nil
}

// appResponse is one GET's outcome.
type appResponse struct {
	URL         string
	Status      int
	ContentType string // media type without parameters
	Body        []byte
	// Elapsed is the response time without connection setup (Connect): on the
	// sandbox route each connection is a docker exec (tens of milliseconds),
	// which is not the app's latency and would skew every max_ms check.
	Elapsed time.Duration
	Connect time.Duration
}

// getApp issues one bounded GET. A body over limit is errResponseTooLarge: a
// schema inferred from half a document would be wrong.
func getApp(ctx context.Context, client *http.Client, u *url.URL, accept string, timeout time.Duration, limit int64) (appResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return appResponse{}, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header.Set("User-Agent", "aetherium-quality/1.0")
	// Connection waits are summed over every hop (redirects) and left out of
	// Elapsed; the callbacks run on the request's goroutine, one hop at a time.
	var getAt time.Time
	var connect time.Duration
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { getAt = time.Now() },
		GotConn: func(httptrace.GotConnInfo) {
			if !getAt.IsZero() {
				connect += time.Since(getAt)
			}
		},
	}))
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return appResponse{}, fmt.Errorf("GET %s: timed out after %s", u.Redacted(), timeout)
		}
		return appResponse{}, fmt.Errorf("GET %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.ContentLength > limit {
		return appResponse{}, fmt.Errorf("GET %s: %w: %d bytes announced, limit %d", u.Redacted(), errResponseTooLarge, resp.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	elapsed := time.Since(start) - connect
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return appResponse{}, fmt.Errorf("GET %s: timed out after %s reading the body", u.Redacted(), timeout)
		}
		return appResponse{}, fmt.Errorf("GET %s: reading the body: %w", u.Redacted(), err)
	}
	if int64(len(body)) > limit {
		return appResponse{}, fmt.Errorf("GET %s: %w: more than %d bytes", u.Redacted(), errResponseTooLarge, limit)
	}
	media := ""
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		if m, _, err := mime.ParseMediaType(ct); err == nil {
			media = m
		} else {
			media = strings.ToLower(strings.TrimSpace(ct))
		}
	}
	return appResponse{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: media, Body: body, Elapsed: elapsed, Connect: connect}, nil
}

// isJSONMedia tells JSON media types (application/json, application/problem+json…).
func isJSONMedia(m string) bool {
	return m == "application/json" || strings.HasSuffix(m, "+json")
}
