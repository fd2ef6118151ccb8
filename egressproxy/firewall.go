package egressproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
)

// Firewall chains. Every packet that enters the host from a sandbox bridge
// (-i aeth-sb+) jumps to ChainInput (from INPUT: addressed to the host, including
// every sandbox gateway) or is dropped in DOCKER-USER (forwarded anywhere else).
// ChainInput accepts TCP to the proxy port and drops everything else, so a sandbox
// reaches nothing on this host but the proxy, and nothing beyond it at all. IPv6
// from sandbox bridges is dropped outright (the networks have no IPv6, but
// link-local addresses exist).
const (
	ChainInput = "AETHERIUM-SBX-IN"
	bridgeGlob = BridgePrefix + "+"
)

// ErrFirewall means the host firewall rules could not be installed: sandbox egress
// must then stay off.
var ErrFirewall = errors.New("sandbox firewall")

type rule struct {
	bin   string
	chain string
	spec  []string
}

func (c Config) rules() []rule {
	v4, v6 := c.IPTables, c.IP6Tables
	return []rule{
		// Chain contents first (inserted at the top, so in reverse order), the jumps
		// into them last: the chain is complete before any packet reaches it.
		{v4, ChainInput, []string{"-j", "DROP"}},
		{v4, ChainInput, []string{"-d", c.Pool().String(), "-p", "tcp", "--dport", strconv.Itoa(c.Port), "-j", "ACCEPT"}},
		{v4, "INPUT", []string{"-i", bridgeGlob, "-j", ChainInput}},
		{v4, "DOCKER-USER", []string{"-i", bridgeGlob, "-j", "DROP"}},
		{v4, "DOCKER-USER", []string{"-o", bridgeGlob, "-j", "DROP"}},
		{v6, "INPUT", []string{"-i", bridgeGlob, "-j", "DROP"}},
		{v6, "FORWARD", []string{"-i", bridgeGlob, "-j", "DROP"}},
		{v6, "FORWARD", []string{"-o", bridgeGlob, "-j", "DROP"}},
	}
}

func run(ctx context.Context, bin string, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"-w", "10"}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// InstallFirewall installs the sandbox rules; it is idempotent (a rule already
// present is not added twice) and safe to run from every worker on a host. The
// DROP at the end of ChainInput is only ever added once, below any port ACCEPTs,
// so two fleets with different proxy ports on one host both work.
func (c Config) InstallFirewall(ctx context.Context) error {
	c = c.WithDefaults()
	if c.ExternalFirewall {
		return nil
	}
	for _, bin := range []string{c.IPTables, c.IP6Tables} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%w: %s not found (apt-get install -y iptables): %v", ErrFirewall, bin, err)
		}
	}
	// -N fails when the chain exists: that is the idempotent case.
	_ = run(ctx, c.IPTables, "-N", ChainInput)
	for _, r := range c.rules() {
		if run(ctx, r.bin, append([]string{"-C", r.chain}, r.spec...)...) == nil {
			continue
		}
		op := "-I"
		if r.chain == ChainInput && r.spec[len(r.spec)-1] == "DROP" {
			op = "-A"
		}
		if err := run(ctx, r.bin, append([]string{op, r.chain}, r.spec...)...); err != nil {
			return fmt.Errorf("%w: %w", ErrFirewall, err)
		}
	}
	return nil
}

// RemoveFirewall removes the rules, but only when no sandbox bridge is left on
// this host: another worker's sandboxes may still depend on them, and removing
// the DROPs would open their networks. It reports whether it removed them.
func (c Config) RemoveFirewall(ctx context.Context) (bool, error) {
	c = c.WithDefaults()
	if c.ExternalFirewall {
		return false, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return false, fmt.Errorf("%w: list interfaces: %v", ErrFirewall, err)
	}
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, BridgePrefix) {
			return false, nil
		}
	}
	var errs []error
	rs := c.rules()
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		if r.chain == ChainInput {
			continue
		}
		for run(ctx, r.bin, append([]string{"-C", r.chain}, r.spec...)...) == nil {
			if err := run(ctx, r.bin, append([]string{"-D", r.chain}, r.spec...)...); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	if run(ctx, c.IPTables, "-n", "-L", ChainInput) == nil {
		if err := run(ctx, c.IPTables, "-F", ChainInput); err != nil {
			errs = append(errs, err)
		} else if err := run(ctx, c.IPTables, "-X", ChainInput); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return false, fmt.Errorf("%w: %w", ErrFirewall, err)
	}
	return true, nil
}
