package fleet

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/sandbox"
)

// openEgressProxy gives Docker sandboxes their only way out. Whatever fails here
// leaves sandbox egress off (network none), never open: the fleet still runs.
func (f *Fleet) openEgressProxy(ctx context.Context, cfg config.Config, opts Options) {
	d, ok := f.Executor.(*sandbox.Docker)
	if !ok {
		return
	}
	ecfg := cfg.Sandbox.EgressProxy.WithDefaults()
	if err := ecfg.Validate(); err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	if ecfg.Remote() {
		// The egress service (aetherium egress, in the host's network
		// namespace) owns the firewall rules and the gateways' listeners; it
		// refuses to serve without the rules.
		f.Log.Info("sandbox egress through the egress service", "url", ecfg.Service.URL)
	} else {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := ecfg.InstallFirewall(fctx); err != nil {
			f.Log.Error("sandbox egress off: the host firewall rules could not be installed", "err", err)
			return
		}
	}
	dlp, err := egress.NewDLP()
	if err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	// The fleet's destination policy (built with the core, before any part):
	// its registered endpoints (Redis, PostgreSQL, the API and metrics
	// listeners of every process, GPU services, the headset) and the
	// deployment's private switch bind a sandbox's own traffic as they bind
	// the tools', on any host, not only this one's addresses (which the proxy
	// refuses on its own).
	deps := egressproxy.Deps{DLP: dlp, Recorder: f.Store, Resolver: opts.EgressResolver, Log: f.Log}
	if f.Policy != nil {
		deps.Policy = f.Policy
	}
	p, err := egressproxy.New(ecfg, deps)
	if err != nil {
		f.Log.Error("sandbox egress off", "err", err)
		return
	}
	d.SetEgress(p)
	f.EgressProxy = p
}

// closeEgressProxy stops the listeners; the firewall rules go only when no sandbox
// network is left on this host (another worker's may still need them).
func (f *Fleet) closeEgressProxy() {
	if f.EgressProxy == nil {
		return
	}
	_ = f.EgressProxy.Close()
	if f.EgressProxy.Config().Remote() {
		return // the egress service's rules
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.EgressProxy.Config().RemoveFirewall(ctx); err != nil {
		f.Log.Warn("sandbox firewall rules left in place", "err", err)
	}
}

// openPolicy builds the egress policy from everything the configuration says the
// fleet itself listens on or talks to, and starts keeping it current.
func (f *Fleet) openPolicy(cfg config.Config, opts Options) error {
	eps := fleetEndpoints(cfg, opts)
	p, err := egress.NewEgressPolicy(egress.EgressPolicyConfig{
		Private: cfg.Security.Egress.Private, Endpoints: eps, Redis: f.Redis,
		Refresh: cfg.Security.Egress.Refresh, Learn: redisNodes(f.Redis), Log: f.Log,
	})
	if err != nil {
		return fmt.Errorf("security.egress: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	f.Policy = p
	f.stopPolicy = func() { cancel(); <-done }
	return nil
}

// RegisterEndpoint makes a listener of this process (addr as bound, not as
// configured: port 0 is resolved by then) a refused destination for every agent of
// the fleet.
func (f *Fleet) RegisterEndpoint(ctx context.Context, name, addr string) {
	if f.Policy == nil {
		return
	}
	if err := f.Policy.Register(ctx, name, addr); err != nil {
		// The listener is already refused in this process; others learn it at
		// their next refresh of the registry if a later renewal lands.
		f.Log.Warn("register endpoint", "name", name, "addr", addr, "err", err)
	}
}

// fleetEndpoints lists the configured endpoints of the fleet.
func fleetEndpoints(cfg config.Config, opts Options) []egress.Endpoint {
	var eps []egress.Endpoint
	add := func(name, addr string) {
		if _, _, err := net.SplitHostPort(addr); err == nil {
			eps = append(eps, egress.Endpoint{Name: name, Addr: addr})
		}
	}
	add(egress.EndpointAPI, cfg.API.Addr)
	add(egress.EndpointAPI, cfg.API.MetricsAddr)
	// An agent posting to a hook would start runs as the hook's owner (with the
	// secret it read somewhere); the API's own listener serves /hooks/ too.
	add(egress.EndpointHooks, cfg.API.Hooks.Addr)
	if m := cfg.MCPConfig(); m.Enabled() {
		// An agent reaching /mcp would call tools outside its own catalog.
		add(egress.EndpointMCP, m.Addr)
	}
	add(egress.EndpointWorkerMetrics, cfg.Worker.MetricsAddr)
	add(egress.EndpointSchedulerMetrics, cfg.Scheduler.MetricsAddr)
	// Every address the URL names (the node, each sentinel, each cluster seed);
	// nodes reached only through them are learnt at run time (redisNodes).
	if rc, err := redisconn.Parse(cfg.RedisURL); err == nil {
		for _, a := range rc.Addrs() {
			add(egress.EndpointRedis, a)
		}
	}
	if pc, err := pgconn.ParseConfig(cfg.DatabaseURL); err == nil {
		hosts := []*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port}}
		hosts = append(hosts, pc.Fallbacks...)
		for _, h := range hosts {
			if !strings.HasPrefix(h.Host, "/") { // a unix socket is no network destination
				add(egress.EndpointPostgres, net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port))))
			}
		}
	}
	dockerHost := cfg.Sandbox.Docker.Host
	if dockerHost == "" {
		dockerHost = os.Getenv("DOCKER_HOST")
	}
	if u, err := url.Parse(dockerHost); err == nil && u.Scheme == "tcp" {
		port := u.Port()
		if port == "" {
			port = "2375"
		}
		add(egress.EndpointDocker, net.JoinHostPort(u.Hostname(), port))
	}
	// Every address a GPU service answers on: its published ports, its health
	// URL, the URL tools use, and its fencing proxy's listener and upstream. A
	// grant's secret never reaches an agent, but the service behind it holds
	// other tenants' work (ComfyUI's /history), so agents reach none of them.
	for _, s := range cfg.Streams.Leases.Services {
		name := egress.EndpointGPU + " (" + s.Name + ")"
		for _, p := range s.Ports {
			if addr, ok := publishedAddr(p); ok {
				add(name, addr)
			}
		}
		urls := []string{s.HealthURL, s.URL}
		if f := s.Fence; f != nil {
			add(name, f.Listen)
			urls = append(urls, f.Upstream, f.HealthURL())
		}
		for _, raw := range urls {
			if addr, ok := urlAddr(raw); ok {
				add(name, addr)
			}
		}
	}
	var dev *device.Config
	if opts.Device != nil {
		dev = opts.Device
	} else if sf := cfg.Devices.SteamFrame; sf.Enabled {
		dev = &sf.Config
	}
	if dev != nil {
		d := dev.WithDefaults()
		add(egress.EndpointHeadset, net.JoinHostPort(d.Host, strconv.Itoa(d.SSHPort)))
		add(egress.EndpointHeadset, net.JoinHostPort(d.Host, strconv.Itoa(d.ADBPort)))
	}
	for _, d := range cfg.Security.Egress.Deny {
		add(egress.EndpointInternal, d)
	}
	return eps
}

// urlAddr is the host:port an http(s) URL dials (default port by scheme).
func urlAddr(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port), true
}

// publishedAddr reads the host side of a docker-run port mapping:
// "8188:8188", "127.0.0.1:8188:8188", "[::1]:8188:8188/tcp".
func publishedAddr(mapping string) (string, bool) {
	mapping, _, _ = strings.Cut(mapping, "/")
	i := strings.LastIndex(mapping, ":")
	if i < 0 {
		return "", false // only a container port: published on a random host port
	}
	hostSide := mapping[:i]
	if j := strings.LastIndex(hostSide, ":"); j >= 0 && !strings.HasSuffix(hostSide, "]") {
		return net.JoinHostPort(strings.Trim(hostSide[:j], "[]"), hostSide[j+1:]), true
	}
	if strings.HasPrefix(hostSide, "[") {
		return "", false
	}
	return net.JoinHostPort("", hostSide), true
}

// redisNodes learns the Redis servers known only at run time: the replicas and
// master of the configured server, and every node of a cluster.
func redisNodes(rdb redis.UniversalClient) func(ctx context.Context) ([]egress.Endpoint, error) {
	return func(ctx context.Context) ([]egress.Endpoint, error) {
		if rdb == nil {
			return nil, nil
		}
		info, err := rdb.Info(ctx, "replication", "cluster").Result()
		if err != nil {
			return nil, fmt.Errorf("redis INFO: %w", err)
		}
		var eps []egress.Endpoint
		add := func(host, port string) {
			if host != "" && port != "" && port != "0" {
				eps = append(eps, egress.Endpoint{Name: egress.EndpointRedis, Addr: net.JoinHostPort(host, port)})
			}
		}
		fields := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
			if !ok {
				continue
			}
			fields[k] = v
			if strings.HasPrefix(k, "slave") && strings.Contains(v, "ip=") {
				// slave0:ip=10.0.0.7,port=6379,state=online,…
				kv := map[string]string{}
				for _, part := range strings.Split(v, ",") {
					a, b, _ := strings.Cut(part, "=")
					kv[a] = b
				}
				add(kv["ip"], kv["port"])
			}
		}
		add(fields["master_host"], fields["master_port"])
		if fields["cluster_enabled"] == "1" {
			nodes, err := rdb.ClusterNodes(ctx).Result()
			if err != nil {
				return eps, fmt.Errorf("redis CLUSTER NODES: %w", err)
			}
			for _, line := range strings.Split(nodes, "\n") {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				// <id> <ip:port@cport[,hostname]> …
				addr, _, _ := strings.Cut(f[1], "@")
				if h, p, err := net.SplitHostPort(addr); err == nil {
					add(h, p)
				}
			}
		}
		return eps, nil
	}
}
