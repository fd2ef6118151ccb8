package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/aetherium-engine/aetherium/egressproxy"
)

// egressNet is a project's own network: internal (no route out), inter-container
// traffic off, a bridge named aeth-sb… that the host firewall confines to the
// egress proxy on its gateway.
type egressNet struct {
	name    string
	subnet  netip.Prefix
	gateway netip.Addr
}

func netFromLabels(l map[string]string) *egressNet {
	subnet, err1 := netip.ParsePrefix(l[LabelSubnet])
	gw, err2 := netip.ParseAddr(l[LabelGateway])
	if err1 != nil || err2 != nil {
		return nil
	}
	return &egressNet{name: l[LabelNetwork], subnet: subnet, gateway: gw}
}

// proxyEnv points every common HTTP client at the proxy. NO_PROXY is empty: there
// is nothing a sandbox may reach directly.
func proxyEnv(proxyURL string) []string {
	return []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"ALL_PROXY=" + proxyURL, "NO_PROXY=", "no_proxy=",
	}
}

// NetworkName is the project's egress network name under this executor's scope.
func (d *Docker) NetworkName(projectID string) string {
	return "aetherium-net-" + strings.TrimPrefix(d.ContainerName(projectID), "aetherium-sb-")
}

// bridgeName fits Linux's 15-character interface names and starts with the prefix
// the firewall rules match.
func (d *Docker) bridgeName(projectID string) string {
	sum := sha256.Sum256([]byte(d.cfg.Docker.Scope + "\x00" + projectID))
	return egressproxy.BridgePrefix + hex.EncodeToString(sum[:4])
}

// ensureNetwork returns the project's network, creating it in the first free
// subnet of the pool (probing from a hash of the project, so concurrent runs
// rarely collide; the engine refuses overlapping subnets).
func (d *Docker) ensureNetwork(ctx context.Context, projectID string) (*egressNet, error) {
	name := d.NetworkName(projectID)
	ecfg := d.cfg.EgressProxy
	pool := ecfg.Pool()
	count := 1 << (ecfg.SubnetBits - pool.Bits())
	sum := sha256.Sum256([]byte(projectID))
	start := int(binary.BigEndian.Uint32(sum[:4]) % uint32(count))
	for i := 0; i < count; i++ {
		info, err := d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
		if err == nil {
			n := netFromLabels(info.Labels)
			if n == nil || info.Labels[LabelScope] != d.cfg.Docker.Scope {
				return nil, fmt.Errorf("network %s exists but is not this fleet's sandbox network", name)
			}
			n.name = name
			return n, nil
		}
		if !cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("inspect sandbox network %s: %w", name, err)
		}
		subnet := nthSubnet(pool, ecfg.SubnetBits, (start+i)%count)
		gw := subnet.Addr().Next()
		_, err = d.cli.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:   "bridge",
			Internal: true,
			IPAM:     &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet.String(), Gateway: gw.String()}}},
			Options: map[string]string{
				"com.docker.network.bridge.name":                 d.bridgeName(projectID),
				"com.docker.network.bridge.enable_icc":           "false",
				"com.docker.network.bridge.enable_ip_masquerade": "false",
			},
			Labels: map[string]string{
				LabelSandbox: "1", LabelScope: d.cfg.Docker.Scope, LabelProject: projectID,
				LabelNetwork: name, LabelSubnet: subnet.String(), LabelGateway: gw.String(),
			},
		})
		switch {
		case err == nil:
			d.log.Info("sandbox network created", "network", name, "subnet", subnet, "bridge", d.bridgeName(projectID))
			return &egressNet{name: name, subnet: subnet, gateway: gw}, nil
		case cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already exists"):
			continue // another worker created it: inspect it on the next turn
		case strings.Contains(err.Error(), "overlaps"):
			continue
		default:
			return nil, fmt.Errorf("create sandbox network %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("create sandbox network %s: no free /%d left in %s", name, ecfg.SubnetBits, pool)
}

// nthSubnet is the i-th /bits subnet of pool.
func nthSubnet(pool netip.Prefix, bits, i int) netip.Prefix {
	b := pool.Addr().As4()
	base := binary.BigEndian.Uint32(b[:]) + uint32(i)<<(32-bits)
	binary.BigEndian.PutUint32(b[:], base)
	return netip.PrefixFrom(netip.AddrFrom4(b), bits)
}

// serveEgress makes sure this worker's proxy serves the project's network before a
// command runs, bound to the calling agent and the team's allowlist.
func (d *Docker) serveEgress(ctx context.Context, req Request) error {
	if !req.Network || d.egress == nil {
		return nil
	}
	p := d.project(req.Project)
	p.mu.Lock()
	n := p.net
	p.mu.Unlock()
	if n == nil {
		return nil
	}
	err := d.egress.Serve(ctx, egressproxy.Binding{
		Run: req.Project, Agent: req.Agent, Allowlist: req.Allowlist, Ports: req.EgressPorts,
		DenyPrivate: req.EgressDenyPrivate, Subnet: n.subnet, Gateway: n.gateway,
	})
	if err != nil {
		return fmt.Errorf("sandbox egress: %w", err)
	}
	return nil
}

// releaseNetwork removes the project's network (after its container) and stops
// serving it. Idempotent.
func (d *Docker) releaseNetwork(ctx context.Context, projectID string) error {
	if d.egress != nil {
		d.egress.Stop(projectID)
	}
	name := d.NetworkName(projectID)
	err := d.cli.NetworkRemove(ctx, name)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove sandbox network %s: %w", name, err)
	}
	return nil
}

// cleanupOrphanNetworks removes this scope's networks of finished projects.
func (d *Docker) cleanupOrphanNetworks(ctx context.Context, isActive func(project string) bool) error {
	list, err := d.cli.NetworkList(ctx, network.ListOptions{
		Filters: filters.NewArgs(filters.Arg("label", LabelSandbox+"=1"), filters.Arg("label", LabelScope+"="+d.cfg.Docker.Scope)),
	})
	if err != nil {
		return fmt.Errorf("list sandbox networks: %w", err)
	}
	var errs []error
	for _, n := range list {
		if proj := n.Labels[LabelProject]; !isActive(proj) {
			if err := d.Release(ctx, proj); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
