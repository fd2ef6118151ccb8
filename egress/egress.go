package egress

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrEgressDenied is a destination outside policy.
var ErrEgressDenied = errors.New("egress denied")

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
	awsIMDS6   = netip.MustParseAddr("fd00:ec2::254")
	// Alibaba Cloud's metadata service sits in the shared (CGNAT) range.
	alibabaMeta = netip.MustParseAddr("100.100.100.200")
	// IPv6 forms that carry an IPv4 address a gateway may translate to: NAT64
	// (well-known and local-use prefixes, RFC 6052/8215), 6to4 (RFC 3056) and the
	// deprecated IPv4-compatible ::a.b.c.d.
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64User = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	v4compat  = netip.MustParsePrefix("::/96")
)

// embeddedV4 returns the IPv4 address an IPv6 address carries in one of the
// translation forms above.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64User.Contains(a), v4compat.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// ipVerdict classifies an address: denied always (link-local, cloud metadata,
// unspecified, multicast), private (loopback and private ranges: allowed without an
// allowlist entry), or public (allowed only for an allowlisted name).
func ipVerdict(a netip.Addr) (denied bool, private bool) {
	// ::ffff:169.254.169.254 is 169.254.169.254, and fe80::1%eth0 is link-local
	// (netip prefixes never contain a zoned address).
	a = a.Unmap().WithZone("")
	if v4, ok := embeddedV4(a); ok {
		// Judged as the IPv4 address it reaches: 64:ff9b::a9fe:a9fe is the
		// metadata service behind a NAT64 gateway. A translated private address
		// is not "private" here (it is not this host's network), only denied or not.
		if denied, _ := ipVerdict(v4); denied {
			return true, false
		}
		return false, false
	}
	switch {
	case !a.IsValid(), a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return true, false
	case linkLocal4.Contains(a), linkLocal6.Contains(a), a == awsIMDS6, a == alibabaMeta:
		return true, false
	case a.IsLoopback(), a.IsPrivate():
		return false, true
	}
	return false, false
}

// DomainAllowed matches host against an allowlist of exact names and *.example.com
// wildcards (the wildcard matches subdomains, not the apex).
func DomainAllowed(host string, allowlist []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range allowlist {
		d = strings.ToLower(strings.TrimSuffix(d, "."))
		if suffix, ok := strings.CutPrefix(d, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
			continue
		}
		if host == d {
			return true
		}
	}
	return false
}

// CheckURL applies the destination policy before a call runs: http(s) only, and the
// host must be allowlisted, or an IP literal in loopback / private ranges, or
// localhost. Link-local and metadata addresses are denied whatever the allowlist says.
func CheckURL(raw string, allowlist []string) error {
	return checkURL(raw, allowlist, false)
}

// checkURL is CheckURL; freePrivate lets a loopback or private-range address
// literal (and localhost) through without an allowlist entry, as
// security.egress.private: allow does.
func checkURL(raw string, allowlist []string, freePrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: unparsable URL: %v", ErrEgressDenied, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: scheme %q (only http and https)", ErrEgressDenied, u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: URL has no host", ErrEgressDenied)
	}
	if u.User != nil {
		return fmt.Errorf("%w: credentials in the URL", ErrEgressDenied)
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		denied, private := ipVerdict(a)
		switch {
		case denied:
			return fmt.Errorf("%w: %s is a link-local or metadata address", ErrEgressDenied, host)
		case private && freePrivate:
			return nil
		case AddrAllowed(a, allowlist):
			return nil
		case private:
			return fmt.Errorf("%w: %s is a loopback or private address the team's allowed_domains do not name", ErrEgressDenied, host)
		}
		return fmt.Errorf("%w: %s is not in the team's allowed_domains", ErrEgressDenied, host)
	}
	if (freePrivate && strings.EqualFold(host, "localhost")) || DomainAllowed(host, allowlist) {
		return nil
	}
	return fmt.Errorf("%w: %s is not in the team's allowed_domains", ErrEgressDenied, host)
}

// AddrAllowed reports whether an allowlist names the address: an entry that is
// the address itself, or a network prefix (10.0.0.0/8) holding it.
func AddrAllowed(a netip.Addr, allowlist []string) bool {
	a = a.Unmap().WithZone("")
	for _, d := range allowlist {
		if b, err := netip.ParseAddr(strings.Trim(d, "[]")); err == nil && b.Unmap() == a {
			return true
		}
		if p, err := netip.ParsePrefix(d); err == nil && p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// EgressConfig tunes the outbound client.
type EgressConfig struct {
	// MaxRedirects caps redirects per request. Default 5.
	MaxRedirects int
	// Timeout bounds a whole request. Default 30s.
	Timeout time.Duration
	// Resolver looks up names for the dialer. Default net.DefaultResolver; tests
	// point it at their own DNS server.
	Resolver *net.Resolver
	// Secrets are filled into requests for their bound hosts and scrubbed from
	// responses. Default none (references are refused).
	Secrets *Secrets
	// Policy decides destinations (the fleet's own endpoints, the private switch).
	// Default: a policy that knows no endpoints and allows private ranges.
	Policy *EgressPolicy
}

// Egress builds HTTP clients that enforce the policy on every hop.
type Egress struct {
	cfg       EgressConfig
	transport *http.Transport
	// private is the transport of teams that deny private ranges: its dialer
	// refuses them, and its pooled connections are never shared with the others.
	private *http.Transport
}

// NewEgress returns the egress client factory. Proxy environment variables are
// ignored on purpose: a proxy would hide the real destination from the check.
func NewEgress(cfg EgressConfig) *Egress {
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 5
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Policy == nil {
		cfg.Policy, _ = NewEgressPolicy(EgressPolicyConfig{}) // the defaults validate
	}
	transport := func(denyPrivate bool) *http.Transport {
		control := func(network, address string, _ syscall.RawConn) error {
			return cfg.Policy.checkDial(network, address, denyPrivate)
		}
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: control, Resolver: cfg.Resolver}
		return &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 30 * time.Second,
		}
	}
	return &Egress{cfg: cfg, transport: transport(false), private: transport(true)}
}

// Policy is the destination policy the client enforces.
func (e *Egress) Policy() *EgressPolicy { return e.cfg.Policy }

// Client returns a client for one team's allowlist; every redirect target is checked
// against the same policy and redirects are capped.
func (e *Egress) Client(allowlist []string) *http.Client {
	return e.ClientFor(allowlist, false)
}

// ClientFor is Client for a team whose egress.private may be deny.
func (e *Egress) ClientFor(allowlist []string, denyPrivate bool) *http.Client {
	base := e.transport
	if denyPrivate {
		base = e.private
	}
	return &http.Client{
		// Every request (not only redirects) is checked here too, so the policy
		// does not depend on the gate finding the URL among a tool's arguments.
		Transport: checked{base: base, allowlist: allowlist, secrets: e.cfg.Secrets, freePrivate: e.cfg.Policy.freePrivate(denyPrivate)},
		Timeout:   e.cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// via holds the requests made so far: the first redirect sees one.
			if len(via) > e.cfg.MaxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrEgressDenied, e.cfg.MaxRedirects)
			}
			if err := e.cfg.Policy.CheckURLFor(req.URL.String(), allowlist, denyPrivate); err != nil {
				return fmt.Errorf("redirect to %s: %w", req.URL.Host, err)
			}
			return nil
		},
	}
}

// checked enforces the destination policy on every request it carries, and fills
// in team secrets. It runs per hop (the client calls it again for every redirect,
// with the references of the original request), so a redirect to a host a secret is
// not bound to is refused before the value leaves.
type checked struct {
	base      http.RoundTripper
	allowlist []string
	secrets   *Secrets
	// freePrivate is security.egress.private: allow (and not the team's deny).
	freePrivate bool
}

func (c checked) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkURL(req.URL.String(), c.allowlist, c.freePrivate); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	out, err := c.secrets.inject(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.base.RoundTrip(out)
	if err != nil {
		return nil, c.secrets.ScrubError(err)
	}
	// The request the caller sees (final_url) is its own, with references, not the
	// copy that carried the values.
	resp.Request = req
	c.secrets.scrubResponse(resp)
	return resp, nil
}
