// Package egressproxy is a sandbox's only way out: an HTTP proxy (built on
// github.com/elazarl/goproxy) that the worker runs on each egress-enabled sandbox's
// per-run Docker network, plus the host firewall rules that drop every other packet
// from sandbox networks. The proxy applies the same destination policy as the
// outbound tools (the team's allowlist, metadata and control-plane denials), allows
// only ports 80/443 unless the team allows more, refuses anything on this host or on
// another sandbox network, scans plaintext HTTP with DLP, and records every
// connection it allows or refuses in egress_connections.
package egressproxy

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// Defaults of Config.
const (
	// DefaultPort is the port the proxy listens on, on each sandbox network's gateway.
	DefaultPort = 3128
	// DefaultSubnetPool is the range per-run sandbox networks are carved from. It must
	// not overlap any network this host routes to.
	DefaultSubnetPool = "10.213.0.0/16"
	// DefaultSubnetBits is the prefix length of one run's network (/28: 14 addresses;
	// a sandbox uses two, its own and the gateway's).
	DefaultSubnetBits = 28
	// DefaultMaxScanBytes bounds the plaintext request body the proxy reads for DLP;
	// a larger body is refused, never forwarded unscanned.
	DefaultMaxScanBytes = 1 << 20
	// DefaultDialTimeout bounds one upstream dial.
	DefaultDialTimeout = 10 * time.Second
	// DefaultIPTables is the iptables binary (the same backend Docker uses).
	DefaultIPTables = "iptables"
	// DefaultIP6Tables is the ip6tables binary.
	DefaultIP6Tables = "ip6tables"
	// DefaultServiceListen is the egress service's API address (aetherium egress).
	DefaultServiceListen = ":3127"
	// DefaultServiceTokenFile holds the secret the egress service and the workers
	// share (the service makes it when it is missing).
	DefaultServiceTokenFile = "/run/aetherium-egress/token"
	// DefaultServiceRelay is a worker's relay listener, where the egress service
	// hands it its sandboxes' connections.
	DefaultServiceRelay = ":3129"
	// BridgePrefix starts the Linux bridge name of every per-run sandbox network;
	// the firewall rules match it (iptables -i aeth-sb+).
	BridgePrefix = "aeth-sb"
)

// DefaultPorts are the destination ports every team may reach.
var DefaultPorts = []int{80, 443}

// Config configures the proxy and the sandbox networks (sandbox.egress_proxy).
type Config struct {
	// Port is the listening port on each sandbox network's gateway. Default 3128.
	Port int `yaml:"port"`
	// SubnetPool is where per-run networks are allocated. Default 10.213.0.0/16.
	SubnetPool string `yaml:"subnet_pool"`
	// SubnetBits is the prefix length of one run's network. Default 28.
	SubnetBits int `yaml:"subnet_bits"`
	// Ports are the destination ports open to every team (CONNECT and plain HTTP);
	// a team adds more with egress_ports. Default 80 and 443.
	Ports []int `yaml:"ports"`
	// MaxScanBytes caps a plaintext request body scanned by DLP. Default 1 MiB.
	MaxScanBytes int64 `yaml:"max_scan_bytes"`
	// DialTimeout bounds an upstream dial. Default 10s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// IPTables and IP6Tables are the firewall binaries. Default iptables, ip6tables.
	IPTables  string `yaml:"iptables"`
	IP6Tables string `yaml:"ip6tables"`
	// ExternalFirewall means the operator installs the rules (docs/sandboxproxy.md)
	// and the fleet must not touch iptables. Default false: the fleet installs them
	// at start and refuses sandbox egress when it cannot.
	ExternalFirewall bool `yaml:"external_firewall"`
	// Service puts the proxy's host half (the listeners on the sandbox networks'
	// gateways and the firewall rules) in the egress service, for workers that
	// run in a network namespace of their own (docker-compose.yml). Default: off,
	// the worker does both itself.
	Service ServiceConfig `yaml:"service"`
}

// ServiceConfig is the egress service (`aetherium egress`, docs/sandboxproxy.md,
// "Compose"): a process in the host's network namespace with NET_ADMIN that
// installs the firewall rules, listens on each sandbox network's gateway and
// relays every connection it accepts to the worker that bound the run, whose
// proxy decides it (policy, DLP, records) as it would its own.
type ServiceConfig struct {
	// URL is the egress service's API as a worker reaches it
	// (http://host.docker.internal:3127). Set, the worker neither listens on the
	// gateways nor touches the firewall: it binds its runs' networks at the
	// service. Env AETHERIUM_EGRESS_SERVICE_URL. Default empty (no service).
	URL string `yaml:"url"`
	// Listen is the service's API address, in the host's network namespace.
	// Env AETHERIUM_EGRESS_SERVICE_LISTEN. Default :3127.
	Listen string `yaml:"listen"`
	// TokenFile holds the secret the workers present to the service and the
	// service presents to the workers' relay listeners; the service writes a
	// random one (0600) when the file is missing. Env
	// AETHERIUM_EGRESS_TOKEN_FILE. Default /run/aetherium-egress/token.
	TokenFile string `yaml:"token_file"`
	// Relay is a worker's relay listener: the service connects to it (at the
	// address it saw the worker's request come from) with each connection a
	// sandbox made. Default :3129.
	Relay string `yaml:"relay"`
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Port = cmp.Or(c.Port, DefaultPort)
	c.SubnetPool = cmp.Or(c.SubnetPool, DefaultSubnetPool)
	c.SubnetBits = cmp.Or(c.SubnetBits, DefaultSubnetBits)
	if len(c.Ports) == 0 {
		c.Ports = append([]int(nil), DefaultPorts...)
	}
	c.MaxScanBytes = cmp.Or(c.MaxScanBytes, DefaultMaxScanBytes)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.IPTables = cmp.Or(c.IPTables, DefaultIPTables)
	c.IP6Tables = cmp.Or(c.IP6Tables, DefaultIP6Tables)
	c.Service.Listen = cmp.Or(c.Service.Listen, DefaultServiceListen)
	c.Service.TokenFile = cmp.Or(c.Service.TokenFile, DefaultServiceTokenFile)
	c.Service.Relay = cmp.Or(c.Service.Relay, DefaultServiceRelay)
	return c
}

// Validate reports bad values (call it on WithDefaults' result).
func (c Config) Validate() error {
	var errs []error
	if c.Port < 1 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.port %d: want 1-65535", c.Port))
	}
	pool, err := netip.ParsePrefix(c.SubnetPool)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.subnet_pool %q: %w", c.SubnetPool, err))
	case !pool.Addr().Is4():
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.subnet_pool %q: want an IPv4 prefix", c.SubnetPool))
	case c.SubnetBits < pool.Bits() || c.SubnetBits > 29:
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.subnet_bits %d: want %d-29 (inside the pool, room for gateway and sandbox)", c.SubnetBits, pool.Bits()))
	}
	for _, p := range c.Ports {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("sandbox.egress_proxy.ports: %d is not a port", p))
		}
	}
	if c.MaxScanBytes < 0 {
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.max_scan_bytes %d: must not be negative", c.MaxScanBytes))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("sandbox.egress_proxy.dial_timeout %s: must not be negative", c.DialTimeout))
	}
	if c.Service.URL != "" {
		if u, err := url.Parse(c.Service.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("sandbox.egress_proxy.service.url %q: want http(s)://host:port", c.Service.URL))
		}
	}
	for _, kv := range [][2]string{{"listen", c.Service.Listen}, {"relay", c.Service.Relay}} {
		if _, port, err := net.SplitHostPort(kv[1]); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("sandbox.egress_proxy.service.%s %q: want host:port", kv[0], kv[1]))
		}
	}
	return errors.Join(errs...)
}

// Remote reports whether the egress service holds the proxy's host half.
func (c Config) Remote() bool { return c.Service.URL != "" }

// Pool is the parsed SubnetPool (valid after Validate).
func (c Config) Pool() netip.Prefix {
	p, _ := netip.ParsePrefix(c.SubnetPool)
	return p.Masked()
}
