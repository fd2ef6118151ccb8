package quality

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tools/workspace"
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
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultWebAppMaxBodyBytes
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultWebAppRequestTimeout
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultWebAppCallTimeout
	}
	if c.MaxPaths <= 0 {
		c.MaxPaths = DefaultWebAppMaxPaths
	}
	if c.MaxChecks <= 0 {
		c.MaxChecks = DefaultWebAppMaxChecks
	}
	if c.MaxSchemaBytes <= 0 {
		c.MaxSchemaBytes = DefaultWebAppMaxSchemaBytes
	}
	return c
}

// RegisterWebApp adds validate_web_app and capture_api_schema, the two quality
// tools that reach a running application. Both take a URL, so both are Outbound:
// the gate checks the destination and scans the arguments (DLP) before they run,
// and every request goes through eg, which re-checks each dialed address and
// redirect. A nil eg registers them but they refuse to run. ws names the owner of
// the schema file capture_api_schema writes.
func RegisterWebApp(reg *tools.Registry, eg *security.Egress, cfg WebAppConfig, ws workspace.Config) {
	cfg = cfg.WithDefaults()
	registerAPISchema(reg, eg, cfg, ws)
	registerValidateWebApp(reg, eg, cfg)
}

// errResponseTooLarge is a body over WebAppConfig.MaxBodyBytes.
var errResponseTooLarge = errors.New("response body over the size limit")

// appClient is the egress client of the calling session, narrowed to one app:
// a redirect may not leave the origin the caller named (a web app that bounces a
// checker elsewhere is a finding, not a place to follow), on top of the egress
// policy's own check of every hop.
func appClient(ctx context.Context, eg *security.Egress, origin *url.URL) (*http.Client, error) {
	if eg == nil {
		return nil, errors.New("no egress client configured")
	}
	s := tools.SessionFrom(ctx)
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
		if !sameOrigin(req.URL, origin) {
			return fmt.Errorf("%w: redirect to %s leaves the app's origin %s", security.ErrEgressDenied, req.URL.Redacted(), originOf(origin))
		}
		return nil
	}
	return &c, nil
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
	Elapsed     time.Duration
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
	elapsed := time.Since(start)
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
	return appResponse{URL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: media, Body: body, Elapsed: elapsed}, nil
}

// isJSONMedia tells JSON media types (application/json, application/problem+json…).
func isJSONMedia(m string) bool {
	return m == "application/json" || strings.HasSuffix(m, "+json")
}
