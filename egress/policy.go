package egress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Private-range modes of the egress policy (security.egress.private and a team's
// egress.private).
const (
	// PrivateAllowlist (the default) reaches a loopback or private-range
	// destination only when the team's allowed_domains name it: the host name,
	// the address, or a network prefix holding it (10.0.0.0/8). With an empty
	// allowlist a team reaches no private address.
	PrivateAllowlist = "allowlist"
	// PrivateAllow lets loopback and private-range address literals (and
	// localhost) through without an allowlist entry (the seed's behaviour), the
	// fleet's own endpoints excepted.
	PrivateAllow = "allow"
	// PrivateDeny refuses every loopback and private-range destination.
	PrivateDeny = "deny"
)

// Defaults of EgressPolicyConfig.
const (
	// DefaultEndpointRefresh is how often the policy re-reads the endpoint registry,
	// the host's addresses and the names of configured endpoints.
	DefaultEndpointRefresh = 10 * time.Second
	// DefaultEndpointTTL is how long a registration lives without being renewed:
	// a process that died stops being listed after it.
	DefaultEndpointTTL = 45 * time.Second
	// DefaultEndpointKey is the Redis sorted set of registered listeners.
	DefaultEndpointKey = "aetherium:endpoints"
)

// Reasons a refusal names, one per kind of fleet endpoint.
const (
	EndpointAPI              = "the fleet's own API"
	EndpointMCP              = "the fleet's MCP server"
	EndpointHooks            = "the fleet's inbound webhook listener"
	EndpointWorkerMetrics    = "a worker's metrics listener"
	EndpointSchedulerMetrics = "the scheduler's metrics listener"
	EndpointRedis            = "the fleet's Redis"
	EndpointPostgres         = "the fleet's PostgreSQL"
	EndpointDocker           = "the fleet's Docker engine"
	EndpointGPU              = "a GPU service of the fleet"
	EndpointHeadset          = "the fleet's headset"
	EndpointInternal         = "an internal service (security.egress.deny)"
)

// ErrBadEndpoint is an endpoint address the policy cannot use.
var ErrBadEndpoint = errors.New("bad endpoint")

// Endpoint is one destination of the fleet's own: never reachable by an agent.
type Endpoint struct {
	// Name is the reason a refusal gives ("the fleet's own API").
	Name string `json:"name"`
	// Addr is host:port. The host may be an IP, a name (resolved at every
	// refresh), or empty / unspecified: every local address. Or it is a network
	// prefix (CIDR, "172.30.0.0/16"): every address in it, every port — a
	// Docker network of the fleet's own whose containers agents may not reach.
	Addr string `json:"addr"`
}

// EgressPolicyConfig configures the destination policy.
type EgressPolicyConfig struct {
	// Private is PrivateAllowlist (default), PrivateAllow or PrivateDeny, for the
	// whole deployment.
	Private string
	// Endpoints are the configured endpoints of the fleet (Redis, PostgreSQL,
	// Docker, GPU services, headset, extra denials).
	Endpoints []Endpoint
	// Redis holds the registry of listeners every process registers at start.
	// Nil: only this process's registrations and the configured endpoints count.
	Redis redis.UniversalClient
	// Key is the registry's sorted set. Default DefaultEndpointKey.
	Key string
	// Refresh, TTL: see DefaultEndpointRefresh, DefaultEndpointTTL.
	Refresh time.Duration
	TTL     time.Duration
	// Learn reports endpoints known only at run time (Redis replicas, cluster
	// nodes); called at every refresh. Optional.
	Learn func(ctx context.Context) ([]Endpoint, error)
	// Resolver resolves endpoint names. Default net.DefaultResolver.
	Resolver *net.Resolver
	Log      *slog.Logger
}

// WithDefaults fills the zero fields.
func (c EgressPolicyConfig) WithDefaults() EgressPolicyConfig {
	c.Private = cmp.Or(c.Private, PrivateAllowlist)
	c.Key = cmp.Or(c.Key, DefaultEndpointKey)
	c.Refresh = defaults.Positive(c.Refresh, DefaultEndpointRefresh)
	c.TTL = defaults.Positive(c.TTL, DefaultEndpointTTL)
	c.Resolver = cmp.Or(c.Resolver, net.DefaultResolver)
	c.Log = cmp.Or(c.Log, slog.Default())
	return c
}

func (c EgressPolicyConfig) validate() error {
	if !ValidPrivate(c.Private) {
		return fmt.Errorf("egress policy: private must be %q, %q or %q, got %q", PrivateAllowlist, PrivateAllow, PrivateDeny, c.Private)
	}
	if c.TTL <= c.Refresh {
		return fmt.Errorf("egress policy: ttl %s must exceed refresh %s, or live registrations expire", c.TTL, c.Refresh)
	}
	for _, e := range c.Endpoints {
		if _, err := netip.ParsePrefix(e.Addr); err == nil {
			continue
		}
		if _, _, err := splitEndpoint(e.Addr); err != nil {
			return fmt.Errorf("egress policy: endpoint %s: %w", e.Name, err)
		}
	}
	return nil
}

// EgressPolicy decides destinations for the outbound client and the sandbox egress
// proxy: the team's allowlist, the always-denied metadata ranges, the deployment's
// private-range switch, and the fleet's own endpoints, which no allowlist opens.
type EgressPolicy struct {
	cfg   EgressPolicyConfig
	id    string
	snap  atomic.Pointer[snapshot]
	mu    sync.Mutex
	own   []Endpoint // registered by this process
	known []Endpoint // last registry read (other processes)
	// resolved keeps the last good resolution of each endpoint name, so a DNS
	// hiccup does not open the endpoint.
	resolved map[string][]netip.Addr
	learned  []Endpoint
}

// snapshot is the compiled policy the hot path reads without locks.
type snapshot struct {
	// local are the host's own addresses (loopback is recognised by range).
	local map[netip.Addr]bool
	// ports are refused on every local address, exact on the address given.
	ports map[uint16]string
	exact map[netip.AddrPort]string
	// prefixes are whole networks, any port.
	prefixes []namedPrefix
}

type namedPrefix struct {
	pfx  netip.Prefix
	name string
}

// NewEgressPolicy builds the policy; call Run to keep it current.
func NewEgressPolicy(cfg EgressPolicyConfig) (*EgressPolicy, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	p := &EgressPolicy{cfg: cfg, id: fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano()), resolved: map[string][]netip.Addr{}}
	p.rebuild()
	return p, nil
}

// ValidPrivate reports whether s is a mode of security.egress.private.
func ValidPrivate(s string) bool {
	return s == PrivateAllowlist || s == PrivateAllow || s == PrivateDeny
}

// freePrivate reports whether private address literals pass without an
// allowlist entry: the deployment's allow, unless the team denies them. A nil
// policy (no endpoints known) is the default, PrivateAllowlist.
func (p *EgressPolicy) freePrivate(denyPrivate bool) bool {
	return p != nil && p.cfg.Private == PrivateAllow && !denyPrivate
}

// DenyPrivate reports whether the deployment refuses private ranges.
func (p *EgressPolicy) DenyPrivate() bool { return p.cfg.Private == PrivateDeny }

// Register adds a listener of this process (the API, a metrics listener): it is
// refused at once here and, through the registry, in every process within one
// refresh. An unspecified host is expanded to this host's addresses, which is how
// other hosts know what it reaches.
func (p *EgressPolicy) Register(ctx context.Context, name, addr string) error {
	eps := []Endpoint{{Name: name, Addr: addr}}
	if _, err := netip.ParsePrefix(addr); err == nil {
		return p.own1(ctx, eps)
	}
	host, port, err := splitEndpoint(addr)
	if err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	if a, err := netip.ParseAddr(host); host == "" || (err == nil && a.IsUnspecified()) {
		for a := range hostAddrs() {
			if !a.IsLoopback() {
				eps = append(eps, Endpoint{Name: name, Addr: netip.AddrPortFrom(a, port).String()})
			}
		}
	}
	return p.own1(ctx, eps)
}

// own1 adds endpoints of this process: refused here at once, published for the
// others.
func (p *EgressPolicy) own1(ctx context.Context, eps []Endpoint) error {
	p.mu.Lock()
	p.own = append(p.own, eps...)
	p.mu.Unlock()
	p.rebuild()
	if p.cfg.Redis == nil {
		return nil
	}
	return p.publish(ctx, eps)
}

// Run keeps the policy current until ctx ends: renews this process's
// registrations, reads everyone's, re-resolves names and re-reads the host's
// addresses. On return this process's registrations are withdrawn.
func (p *EgressPolicy) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Refresh)
	defer t.Stop()
	p.Refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			p.withdraw()
			return
		case <-t.C:
			p.Refresh(ctx)
		}
	}
}

// Refresh runs one refresh cycle (Run calls it periodically).
func (p *EgressPolicy) Refresh(ctx context.Context) {
	p.mu.Lock()
	own := append([]Endpoint(nil), p.own...)
	p.mu.Unlock()
	if p.cfg.Redis != nil {
		if len(own) > 0 {
			if err := p.publish(ctx, own); err != nil {
				p.cfg.Log.Warn("egress policy: renewing endpoint registrations", "err", err)
			}
		}
		if known, err := p.readRegistry(ctx); err != nil {
			// Keep the last list: a Redis outage must not open the endpoints.
			p.cfg.Log.Warn("egress policy: reading the endpoint registry", "err", err)
		} else {
			p.mu.Lock()
			p.known = known
			p.mu.Unlock()
		}
	}
	if p.cfg.Learn != nil {
		if learned, err := p.cfg.Learn(ctx); err != nil {
			p.cfg.Log.Warn("egress policy: learning run-time endpoints", "err", err)
		} else {
			p.mu.Lock()
			p.learned = learned
			p.mu.Unlock()
		}
	}
	p.resolveNames(ctx)
	p.rebuild()
}

type registration struct {
	Endpoint
	Owner string `json:"owner"`
}

func (p *EgressPolicy) member(e Endpoint) string {
	raw, _ := json.Marshal(registration{Endpoint: e, Owner: p.id})
	return string(raw)
}

func (p *EgressPolicy) publish(ctx context.Context, eps []Endpoint) error {
	exp := float64(time.Now().Add(p.cfg.TTL).UnixMilli())
	zs := make([]redis.Z, 0, len(eps))
	for _, e := range eps {
		zs = append(zs, redis.Z{Score: exp, Member: p.member(e)})
	}
	if err := p.cfg.Redis.ZAdd(ctx, p.cfg.Key, zs...).Err(); err != nil {
		return fmt.Errorf("publish endpoints to %s: %w", p.cfg.Key, err)
	}
	return nil
}

func (p *EgressPolicy) readRegistry(ctx context.Context) ([]Endpoint, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	// Dead processes stop renewing; their entries age out here.
	if err := p.cfg.Redis.ZRemRangeByScore(ctx, p.cfg.Key, "-inf", "("+now).Err(); err != nil {
		return nil, fmt.Errorf("expire endpoints in %s: %w", p.cfg.Key, err)
	}
	members, err := p.cfg.Redis.ZRangeByScore(ctx, p.cfg.Key, &redis.ZRangeBy{Min: now, Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("read endpoints from %s: %w", p.cfg.Key, err)
	}
	out := make([]Endpoint, 0, len(members))
	for _, m := range members {
		var r registration
		if err := json.Unmarshal([]byte(m), &r); err != nil {
			continue
		}
		out = append(out, r.Endpoint)
	}
	return out, nil
}

func (p *EgressPolicy) withdraw() {
	if p.cfg.Redis == nil {
		return
	}
	p.mu.Lock()
	own := append([]Endpoint(nil), p.own...)
	p.mu.Unlock()
	if len(own) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	members := make([]any, 0, len(own))
	for _, e := range own {
		members = append(members, p.member(e))
	}
	_ = p.cfg.Redis.ZRem(ctx, p.cfg.Key, members...).Err()
}

// all returns every endpoint the policy knows, configured first.
func (p *EgressPolicy) all() []Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]Endpoint(nil), p.cfg.Endpoints...)
	out = append(out, p.own...)
	out = append(out, p.known...)
	return append(out, p.learned...)
}

func (p *EgressPolicy) resolveNames(ctx context.Context) {
	names := map[string]bool{}
	for _, e := range p.all() {
		host, _, err := splitEndpoint(e.Addr)
		if err != nil || host == "" || isLocalName(host) {
			continue
		}
		if _, err := netip.ParseAddr(host); err != nil {
			names[host] = true
		}
	}
	for name := range names {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		addrs, err := p.cfg.Resolver.LookupNetIP(rctx, "ip", name)
		cancel()
		if err != nil || len(addrs) == 0 {
			continue // keep the last good answer
		}
		p.mu.Lock()
		p.resolved[name] = addrs
		p.mu.Unlock()
	}
}

// rebuild compiles the endpoints into the snapshot the checks read.
func (p *EgressPolicy) rebuild() {
	s := &snapshot{local: hostAddrs(), ports: map[uint16]string{}, exact: map[netip.AddrPort]string{}}
	eps := p.all()
	p.mu.Lock()
	resolved := p.resolved
	p.mu.Unlock()
	add := func(name string, a netip.Addr, port uint16) {
		a = a.Unmap().WithZone("")
		if a.IsUnspecified() || s.isLocal(a) {
			if _, ok := s.ports[port]; !ok {
				s.ports[port] = name
			}
			return
		}
		ap := netip.AddrPortFrom(a, port)
		if _, ok := s.exact[ap]; !ok {
			s.exact[ap] = name
		}
	}
	for _, e := range eps {
		if pfx, err := netip.ParsePrefix(e.Addr); err == nil {
			s.prefixes = append(s.prefixes, namedPrefix{pfx.Masked(), e.Name})
			continue
		}
		host, port, err := splitEndpoint(e.Addr)
		if err != nil || port == 0 {
			continue
		}
		switch a, perr := netip.ParseAddr(host); {
		case host == "" || isLocalName(host):
			add(e.Name, netip.IPv6Unspecified(), port)
		case perr == nil:
			add(e.Name, a, port)
		default:
			p.mu.Lock()
			for _, a := range resolved[host] {
				add(e.Name, a, port)
			}
			p.mu.Unlock()
		}
	}
	p.snap.Store(s)
}

func (s *snapshot) isLocal(a netip.Addr) bool {
	return a.IsLoopback() || a.IsUnspecified() || s.local[a]
}

// controlPlane names the fleet endpoint ap reaches, or "".
func (s *snapshot) controlPlane(ap netip.AddrPort) string {
	a := ap.Addr().Unmap().WithZone("")
	if name, ok := s.exact[netip.AddrPortFrom(a, ap.Port())]; ok {
		return name
	}
	for _, np := range s.prefixes {
		if np.pfx.Contains(a) {
			return np.name
		}
	}
	if s.isLocal(a) {
		return s.ports[ap.Port()]
	}
	return ""
}

// checkAddrPort is the verdict on one concrete destination.
func (p *EgressPolicy) checkAddrPort(ap netip.AddrPort, denyPrivate bool) error {
	a := ap.Addr().Unmap().WithZone("")
	if denied, _ := ipVerdict(a); denied {
		return fmt.Errorf("%w: dialing %s (a link-local or metadata address)", ErrEgressDenied, a)
	}
	s := p.snap.Load()
	if name := s.controlPlane(ap); name != "" {
		return fmt.Errorf("%w: %s is %s, which agents may never reach", ErrEgressDenied, ap, name)
	}
	if v4, ok := embeddedV4(a); ok {
		if name := s.controlPlane(netip.AddrPortFrom(v4, ap.Port())); name != "" {
			return fmt.Errorf("%w: %s is %s, which agents may never reach", ErrEgressDenied, ap, name)
		}
	}
	if _, private := ipVerdict(a); private && (denyPrivate || p.DenyPrivate()) {
		return fmt.Errorf("%w: %s is a loopback or private address and egress.private is deny", ErrEgressDenied, a)
	}
	return nil
}

// CheckDial checks the address actually dialed, after DNS ("tcp", "10.0.0.5:443").
func (p *EgressPolicy) CheckDial(network, address string) error {
	return p.checkDial(network, address, false)
}

// CheckDialFor is CheckDial for a team that may have tightened the private switch.
func (p *EgressPolicy) CheckDialFor(network, address string, denyPrivate bool) error {
	return p.checkDial(network, address, denyPrivate)
}

func (p *EgressPolicy) checkDial(_, address string, denyPrivate bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialed address %q", ErrEgressDenied, address)
	}
	return p.checkAddrPort(ap, denyPrivate)
}

// CheckURL checks a URL before a call: the static rules of the package-level
// CheckURL plus, for an IP-literal or localhost host, the control plane and the
// deployment's private switch. A name is judged again on the address it resolves to
// (CheckDial).
func (p *EgressPolicy) CheckURL(raw string, allowlist []string) error {
	return p.CheckURLFor(raw, allowlist, false)
}

// CheckURLFor is CheckURL for a team that may have tightened the private switch
// (denyPrivate); a team can never loosen the deployment's setting.
func (p *EgressPolicy) CheckURLFor(raw string, allowlist []string, denyPrivate bool) error {
	// The fleet's own endpoints first, so that the refusal names what the address
	// is (a host address outside the private ranges would otherwise be refused only
	// as "not in allowed_domains", which an allowlist entry could change).
	if u, err := url.Parse(raw); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" {
		if port, err := urlPort(u); err == nil {
			host := strings.Trim(u.Hostname(), "[]")
			var addrs []netip.Addr
			if a, err := netip.ParseAddr(host); err == nil {
				addrs = []netip.Addr{a}
			} else if isLocalName(host) {
				addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
			}
			for _, a := range addrs {
				if err := p.checkAddrPort(netip.AddrPortFrom(a, port), denyPrivate); err != nil {
					return err
				}
			}
		}
	}
	if err := checkURL(raw, allowlist, p.freePrivate(denyPrivate)); err != nil {
		return err
	}
	u, _ := url.Parse(raw) // checkURL parsed it
	if _, err := urlPort(u); err != nil {
		return err
	}
	return nil
}

func urlPort(u *url.URL) (uint16, error) {
	ps := u.Port()
	if ps == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: bad port %q", ErrEgressDenied, ps)
	}
	return uint16(n), nil
}

// splitEndpoint parses host:port; a port of 0 is allowed (an unbound listener).
func splitEndpoint(addr string) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: want host:port, got %q", ErrBadEndpoint, addr)
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: bad port in %q", ErrBadEndpoint, addr)
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")), uint16(n), nil
}

func isLocalName(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// hostAddrs are this host's own addresses: every interface's (Docker bridge
// gateways included, they are host interfaces) plus, inside a container, the
// default gateway, which is the Docker host.
func hostAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				out[pfx.Addr().Unmap().WithZone("")] = true
			}
		}
	}
	if _, err := os.Stat("/.dockerenv"); err == nil {
		if gw, ok := defaultGateway(); ok {
			out[gw] = true
		}
	}
	return out
}

// defaultGateway reads the IPv4 default route from /proc/net/route.
func defaultGateway() (netip.Addr, bool) {
	raw, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return netip.Addr{}, false
	}
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		v, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil || v == 0 {
			continue
		}
		// Little-endian hex of the gateway address.
		return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}), true
	}
	return netip.Addr{}, false
}
