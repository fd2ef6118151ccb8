package api

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The API's edge: what a web page the operator's browser visits must not be able
// to do with the browser's access to the API. A loopback API without tokens is
// reachable by every page the developer opens, two ways:
//
//   - DNS rebinding: evil.example resolves to 127.0.0.1 after the page loaded, so
//     the page reads the API as its own origin. The browser still sends
//     Host: evil.example, so a Host allowlist ends it (hostGuard).
//   - Cross-site requests: a form or a no-cors fetch POSTs to the API (a
//     "simple" request, no preflight). The browser says where it comes from
//     (Sec-Fetch-Site, Origin): only the API's own origin and configured ones may
//     change state (originGuard, net/http's CrossOriginProtection), and a
//     mutation must say application/json, which no simple request can
//     (jsonGuard).
//
// A request without Origin or Sec-Fetch-Site is not from a browser page (curl,
// the CLI) and passes the origin check; it still needs a JSON content type.

// guard applies the three checks to every request before any route, then
// passes it on.
func (s *Server) guard(c *fiber.Ctx) error {
	if err := s.hostGuard(c); err != nil {
		return err
	}
	if strings.HasPrefix(c.Path(), HooksPathPrefix) {
		// Inbound webhooks: server-to-server POSTs from anywhere, any content
		// type (GitHub's form deliveries too), authenticated by the delivery's
		// signature under the hook's secret, which no cross-site page holds.
		return c.Next()
	}
	if len(c.Body()) > s.cfg.BodyLimit {
		// The app's limit is the larger of the API's and the hooks' (New).
		return fiber.ErrRequestEntityTooLarge
	}
	if err := s.originGuard(c); err != nil {
		return err
	}
	if err := jsonGuard(c); err != nil {
		return err
	}
	return c.Next()
}

// unguardedHostPaths answer whatever Host a request names: liveness and
// readiness probes reach the API by a pod address or a service name, and the
// answers hold no data.
var unguardedHostPaths = map[string]bool{"/healthz": true, "/readyz": true}

func (s *Server) hostGuard(c *fiber.Ctx) error {
	if unguardedHostPaths[c.Path()] {
		return nil
	}
	// Both the Host header (what a browser sends, the name in its address bar)
	// and an absolute request line's host (which HTTP/1.1 says wins) must pass:
	// neither can then smuggle a foreign name past the other.
	header, uri := string(c.Request().Header.Host()), string(c.Request().URI().Host())
	host := header
	ok := header != "" || uri != ""
	for _, h := range []string{header, uri} {
		if h != "" && !s.hosts.allows(h) {
			host, ok = h, false
			break
		}
	}
	if ok {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
		"Host %q is not allowed: the API answers loopback names, IP addresses and api.allowed_hosts (AETHERIUM_API_ALLOWED_HOSTS)", host)}
}

func (s *Server) originGuard(c *fiber.Ctx) error {
	// CrossOriginProtection reads only the method, Host, Origin and Sec-Fetch-Site.
	req := &http.Request{Method: c.Method(), Host: string(c.Request().Host()), URL: &url.URL{Path: c.Path()}, Header: http.Header{}}
	for _, h := range []string{"Origin", "Sec-Fetch-Site"} {
		if v := c.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	if err := s.csrf.Check(req); err != nil {
		return &Error{Status: http.StatusForbidden, Message: fmt.Sprintf(
			"cross-origin %s refused (Origin %q, Sec-Fetch-Site %q): only the API's own pages and api.allowed_origins may change state",
			req.Method, c.Get("Origin"), c.Get("Sec-Fetch-Site"))}
	}
	return nil
}

// jsonGuard answers 415 to a POST, PUT or PATCH that is not application/json
// (with or without a body: a body-less no-cors POST is a simple request too),
// and to a DELETE with a body of another type. Every body the API takes is
// JSON: there are no uploads. asynqmon (/monitoring, admin) sends its own
// requests without a body type; the origin check covers it.
func jsonGuard(c *fiber.Ctx) error {
	switch c.Method() {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	case http.MethodDelete:
		if len(c.Body()) == 0 && c.Request().Header.ContentLength() <= 0 {
			return nil
		}
	default:
		return nil
	}
	if strings.HasPrefix(c.Path(), "/monitoring/") || c.Path() == "/monitoring" {
		return nil
	}
	ct := c.Get(fiber.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == fiber.MIMEApplicationJSON {
		return nil
	}
	return &Error{Status: http.StatusUnsupportedMediaType, Message: fmt.Sprintf(
		"%s needs Content-Type: application/json, got %q", c.Method(), ct)}
}

// hostSet is the Host allowlist: loopback names, every IP literal, and the
// configured names (exact, or "*.suffix" for its subdomains), any port.
type hostSet struct {
	any      bool
	exact    map[string]bool
	suffixes []string
}

// AnyHost in api.allowed_hosts turns the Host check off (an API behind a proxy
// that checks Host itself).
const AnyHost = "*"

func newHostSet(cfg Config) hostSet {
	hs := hostSet{exact: map[string]bool{"localhost": true}}
	if h, _, err := net.SplitHostPort(cfg.Addr); err == nil && h != "" {
		hs.exact[normalizeHost(h)] = true
	}
	for _, h := range cfg.AllowedHosts {
		h = normalizeHost(h)
		switch {
		case h == AnyHost:
			hs.any = true
		case strings.HasPrefix(h, "*."):
			hs.suffixes = append(hs.suffixes, h[1:])
		default:
			hs.exact[h] = true
		}
	}
	return hs
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// allows reports whether a Host header value is allowed. An IP literal is: DNS
// rebinding needs a name the attacker controls, and a page at an address's own
// origin is served by that address.
func (hs hostSet) allows(host string) bool {
	if hs.any {
		return true
	}
	name, ok := hostName(host)
	if !ok {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	name = normalizeHost(name)
	if hs.exact[name] {
		return true
	}
	for _, s := range hs.suffixes {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			return true
		}
	}
	return false
}

// hostName splits a Host header into its name or address, dropping the port
// and an IPv6 literal's brackets; ok is false for a malformed value.
func hostName(host string) (string, bool) {
	if host == "" || strings.ContainsAny(host, "/@ \\") {
		return "", false
	}
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "", false
		}
		rest := host[end+1:]
		if rest != "" && (!strings.HasPrefix(rest, ":") || !digits(rest[1:])) {
			return "", false
		}
		a, err := netip.ParseAddr(host[1:end])
		if err != nil || a.Zone() != "" {
			return "", false
		}
		return a.String(), true
	}
	name, port, found := strings.Cut(host, ":")
	if found && !digits(port) {
		return "", false
	}
	return name, name != ""
}

func digits(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// newCSRF is the origin check: the API's own origin (Origin's host equal to the
// Host) and api.allowed_origins.
func newCSRF(origins []string) (*http.CrossOriginProtection, error) {
	p := http.NewCrossOriginProtection()
	for _, o := range origins {
		if err := p.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("api.allowed_origins: %w", err)
		}
	}
	return p, nil
}

// validateHosts checks api.allowed_hosts: names or *.domain, no port (the check
// ignores ports), or AnyHost.
func validateHosts(hosts []string) error {
	var errs []error
	for i, h := range hosts {
		n := normalizeHost(h)
		if n == AnyHost {
			continue
		}
		name := strings.TrimPrefix(n, "*.")
		if name == "" || strings.ContainsAny(name, ":/@[]* \\") {
			errs = append(errs, fmt.Errorf("api.allowed_hosts[%d] (AETHERIUM_API_ALLOWED_HOSTS): want a host name or *.domain without a port, got %q", i, h))
		}
	}
	return errors.Join(errs...)
}
