// Package gpu is the GPU service controller: the first lease on a stopped service
// starts its container through the Docker Engine API and waits for its health URL
// before the grant is handed to the run; a service nobody has held for its idle
// delay is stopped. Leases themselves live in package lease. A service with a
// Fence gets its fencing proxy (gpu/fenceproxy) started after it and stopped
// before it, so every request a client makes passes the token check.
//
// Start and stop never race: a stop first marks the service as stopping, in the
// same atomic step that checks nobody holds it (lease.Manager.BeginStop), and a
// start runs only after the caller holds a grant and no stop is in progress. So a
// container is never stopped under a holder, and a holder granted during a stop
// waits for the stop and starts the container again.
package gpu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/aetherium-engine/aetherium/gpu/fenceproxy"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/internal/tick"
	"github.com/aetherium-engine/aetherium/lease"
)

// ErrStartFailed is a service that could not be started or did not become healthy.
var ErrStartFailed = errors.New("gpu: service failed to start")

// Labels put on every container the controller creates.
const (
	LabelService = "aetherium.gpu-service"
	LabelSpec    = "aetherium.gpu-spec"
)

// Docker is the part of the Docker Engine API the controller uses; *client.Client
// implements it.
type Docker interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerStop(ctx context.Context, id string, opts container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error)
	NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error)
}

// LabelNetwork marks the GPU services' network (lease.DefaultNetwork) the
// controller created.
const LabelNetwork = "aetherium.gpu-network"

// GPUBridge is the Linux bridge of the GPU services' network: one per host, which
// is what keeps the network itself one (see ensureNetwork).
const GPUBridge = "aeth-gpu"

// NewDockerClient connects to the engine named by the environment (DOCKER_HOST,
// default the local socket), negotiating the API version with it.
func NewDockerClient() (*client.Client, error) {
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("gpu: docker client: %w", err)
	}
	return c, nil
}

// Defaults of Config.
const (
	DefaultHealthPoll   = 250 * time.Millisecond
	DefaultStopTimeout  = 30 * time.Second
	DefaultStoppingWait = 2 * time.Minute
	// DefaultHealthTimeout bounds one health check (Deps.HTTP's default client).
	DefaultHealthTimeout = 5 * time.Second
)

// Config tunes the controller (no configuration keys: the per-service settings —
// image, health URL, start timeout, idle delay — are lease.Service's, under
// streams.leases.services). Zero fields take the defaults (WithDefaults).
type Config struct {
	// HealthPoll is how often a starting service's health URL and container state
	// are checked. Default DefaultHealthPoll.
	HealthPoll time.Duration
	// StopTimeout is the grace period of a stop before the engine kills the
	// container. Default DefaultStopTimeout.
	StopTimeout time.Duration
	// StoppingWait bounds how long a start waits for a stop in progress. Default
	// DefaultStoppingWait.
	StoppingWait time.Duration
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.HealthPoll = defaults.Positive(c.HealthPoll, DefaultHealthPoll)
	c.StopTimeout = defaults.Positive(c.StopTimeout, DefaultStopTimeout)
	c.StoppingWait = defaults.Positive(c.StoppingWait, DefaultStoppingWait)
	return c
}

// Deps are the controller's collaborators.
type Deps struct {
	// Leases declares the services; the controller starts those naming an image.
	Leases *lease.Manager
	// Docker is the engine the containers run on (NewDockerClient).
	Docker  Docker
	Metrics *Metrics
	Log     *slog.Logger
	// HTTP checks health URLs. Default a client with a DefaultHealthTimeout timeout.
	HTTP *http.Client
}

// Controller starts and stops the containers of leased GPU services.
type Controller struct {
	leases *lease.Manager
	docker Docker
	cfg    Config
	opts   Deps
	ports  map[string]portSpec

	mu    sync.Mutex
	locks map[string]chan struct{}
}

type portSpec struct {
	exposed  nat.PortSet
	bindings nat.PortMap
}

// New returns a controller for the services of d.Leases that name an image.
func New(cfg Config, d Deps) (*Controller, error) {
	cfg = cfg.WithDefaults()
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.HTTP == nil {
		d.HTTP = &http.Client{Timeout: DefaultHealthTimeout}
	}
	leases := d.Leases
	c := &Controller{leases: leases, docker: d.Docker, cfg: cfg, opts: d, ports: map[string]portSpec{}, locks: map[string]chan struct{}{}}
	for _, s := range leases.Services() {
		if s.Image == "" {
			continue
		}
		exposed, bindings, err := nat.ParsePortSpecs(s.Ports)
		if err != nil {
			return nil, fmt.Errorf("gpu: service %s: ports: %w", s.Name, err)
		}
		if s.GPUs != "" && s.GPUs != "all" {
			if n, err := strconv.Atoi(s.GPUs); err != nil || n <= 0 {
				return nil, fmt.Errorf("gpu: service %s: gpus %q: want \"all\" or a positive count", s.Name, s.GPUs)
			}
		}
		c.ports[s.Name] = portSpec{exposed: exposed, bindings: bindings}
	}
	return c, nil
}

// lock serializes starts of one service within this process (across processes
// the engine's unique container names do); waiting for it honours ctx.
func (c *Controller) lock(ctx context.Context, service string) (unlock func(), err error) {
	c.mu.Lock()
	l, ok := c.locks[service]
	if !ok {
		l = make(chan struct{}, 1)
		c.locks[service] = l
	}
	c.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Acquire takes holder's lease on service (lease.Manager.Acquire: it does not
// wait for other holders; ErrWaiting passes through) and makes sure the service
// runs and answers its health URL before returning the grant. If the service
// cannot be started, the lease is released and the error wraps ErrStartFailed.
// The start is bounded by the service's StartTimeout.
func (c *Controller) Acquire(ctx context.Context, service, holder string) (lease.Grant, error) {
	g, err := c.leases.Acquire(ctx, service, holder)
	if err != nil {
		return g, err
	}
	if err := c.Ensure(ctx, service); err != nil {
		if _, rerr := c.leases.Release(context.WithoutCancel(ctx), service, holder, g.Token); rerr != nil {
			c.opts.Log.Warn("release after failed start", "service", service, "holder", holder, "err", rerr)
		}
		return lease.Grant{}, err
	}
	return g, nil
}

// Ensure starts service's container unless it runs, and waits until its health
// URL answers 2xx, for at most the service's StartTimeout. The caller should hold
// a lease on the service (else an idle stop may follow at once). A service
// without an image is not managed: Ensure returns nil.
func (c *Controller) Ensure(ctx context.Context, service string) error {
	s, ok := c.leases.Service(service)
	if !ok {
		return fmt.Errorf("%w: %q", lease.ErrUnknownService, service)
	}
	if s.Image == "" {
		return nil
	}
	unlock, err := c.lock(ctx, service)
	if err != nil {
		return err
	}
	defer unlock()

	if err := c.waitNotStopping(ctx, s); err != nil {
		return err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.StartTimeout)
	defer cancel()
	start := time.Now()
	started, err := c.start(ctx, s)
	if err != nil && parent.Err() == nil && ctx.Err() != nil {
		// The start timeout ran out while a loaded engine was still creating or
		// starting the container: the same budget as the health wait, said the same way.
		err = fmt.Errorf("%s: not healthy within %v (the container was still starting): %w", s.Name, s.StartTimeout, err)
	}
	if err == nil {
		err = c.waitHealthy(ctx, s)
	}
	if err == nil && s.Fence != nil {
		// The proxy starts after the service is healthy, so a request it admits
		// finds the service ready; a running proxy is kept like the service.
		fs := c.fenceService(s)
		var fstarted bool
		if fstarted, err = c.start(ctx, fs); err == nil {
			err = c.waitHealthy(ctx, fs)
		}
		started = started || fstarted
	}
	if err != nil {
		c.opts.Metrics.start(service, "failed", time.Since(start))
		_ = c.leases.Record(context.WithoutCancel(ctx), service, "service_start_failed", "error", err.Error())
		return err
	}
	if started {
		c.opts.Metrics.start(service, "ok", time.Since(start))
		_ = c.leases.Record(ctx, service, "service_start", "container", s.Container, "start_ms", time.Since(start).Milliseconds())
		c.opts.Log.Info("gpu service started", "service", service, "container", s.Container, "took", time.Since(start))
	}
	return nil
}

func (c *Controller) waitNotStopping(ctx context.Context, s lease.Service) error {
	deadline := time.Now().Add(c.cfg.StoppingWait)
	for {
		stopping, err := c.leases.Stopping(ctx, s.Name)
		if err != nil {
			return fmt.Errorf("gpu: %s: %w", s.Name, err)
		}
		if !stopping {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: a stop of the service did not finish within %v", ErrStartFailed, s.Name, c.cfg.StoppingWait)
		}
		if err := sleep(ctx, c.cfg.HealthPoll); err != nil {
			return err
		}
	}
}

// fenceService is the container definition of s's fencing proxy: the proxy's
// image on its own network (host by default) told by FENCE_* variables which
// service, upstream and Redis to use, with the service's capacity and TTL
// (Validate's script reaps with them, so they must match the fleet's).
func (c *Controller) fenceService(s lease.Service) lease.Service {
	f := *s.Fence
	cfg := fenceproxy.Config{Service: s.Name, Upstream: f.Upstream, Listen: f.Listen, Redis: f.Redis,
		Prefix: c.leases.Config().Prefix, Capacity: s.Capacity, TTL: s.TTL}.WithDefaults()
	return lease.Service{Name: s.Name, Image: f.Image, Container: f.Container, Env: cfg.Env(), Network: f.Network,
		HealthURL: f.HealthURL(), StartTimeout: s.StartTimeout}
}

// specHash identifies the container definition, so a changed config replaces the
// container instead of restarting a stale one.
func specHash(s lease.Service) string {
	b, _ := json.Marshal([]any{s.Image, s.Cmd, s.Env, s.Ports, s.Network, s.GPUs, s.Fence})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// start makes the container run; it reports whether it had to start it.
func (c *Controller) start(ctx context.Context, s lease.Service) (bool, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrStartFailed, s.Name, fmt.Sprintf(format, a...))
	}
	for attempt := 0; attempt < 3; attempt++ {
		info, err := c.docker.ContainerInspect(ctx, s.Container)
		switch {
		case cerrdefs.IsNotFound(err):
			if err := c.create(ctx, s); err != nil {
				if cerrdefs.IsConflict(err) { // another process created it meanwhile
					continue
				}
				if cerrdefs.IsNotFound(err) {
					return false, fail("image %q is not on the Docker engine (images are built or loaded locally, never pulled): %v", s.Image, err)
				}
				return false, fail("create container %s: %v", s.Container, err)
			}
			continue
		case err != nil:
			return false, fail("inspect container %s: %v", s.Container, err)
		}
		if info.State != nil && info.State.Running {
			// A running container is kept even if its definition changed: other
			// holders may be using it. The change applies at the next start.
			return false, nil
		}
		if info.Config != nil && info.Config.Labels[LabelSpec] != specHash(s) {
			c.opts.Log.Info("gpu service definition changed; replacing its container", "service", s.Name, "container", s.Container)
			if err := c.docker.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				return false, fail("remove outdated container %s: %v", s.Container, err)
			}
			continue
		}
		if err := c.docker.ContainerStart(ctx, info.ID, container.StartOptions{}); err != nil {
			return false, fail("start container %s: %v", s.Container, err)
		}
		return true, nil
	}
	return false, fail("container %s kept changing while being started", s.Container)
}

func (c *Controller) create(ctx context.Context, s lease.Service) error {
	ps := c.ports[s.Name]
	if svc, ok := c.leases.Service(s.Name); ok && svc.Container != s.Container {
		ps = portSpec{} // the fencing proxy publishes nothing (host network)
	}
	cfg := &container.Config{
		Image: s.Image, Cmd: s.Cmd, Env: s.Env, ExposedPorts: ps.exposed,
		Labels: map[string]string{LabelService: s.Name, LabelSpec: specHash(s)},
	}
	host := &container.HostConfig{PortBindings: ps.bindings}
	if s.GPUs != "" {
		n := -1
		if s.GPUs != "all" {
			n, _ = strconv.Atoi(s.GPUs)
		}
		host.DeviceRequests = []container.DeviceRequest{{Count: n, Capabilities: [][]string{{"gpu"}}}}
	}
	var netCfg *network.NetworkingConfig
	if s.Network == lease.DefaultNetwork {
		if err := c.ensureNetwork(ctx, s.Network); err != nil {
			return err
		}
	}
	if s.Network != "" {
		host.NetworkMode = container.NetworkMode(s.Network)
		netCfg = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{s.Network: {}}}
	}
	_, err := c.docker.ContainerCreate(ctx, cfg, host, netCfg, nil, s.Container)
	return err
}

// Networks makes sure the GPU services' own network exists (when a managed
// service uses it) and returns its subnets: the fleet refuses them to agents as
// a whole (egress.Endpoint prefixes), so a team whose egress allows private
// addresses still reaches no GPU container by its address.
func (c *Controller) Networks(ctx context.Context) ([]netip.Prefix, error) {
	uses := false
	for _, s := range c.leases.Services() {
		uses = uses || (s.Image != "" && s.Network == lease.DefaultNetwork)
	}
	if !uses {
		return nil, nil
	}
	if err := c.ensureNetwork(ctx, lease.DefaultNetwork); err != nil {
		return nil, err
	}
	info, err := c.docker.NetworkInspect(ctx, lease.DefaultNetwork, network.InspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect GPU network %s: %w", lease.DefaultNetwork, err)
	}
	var out []netip.Prefix
	for _, cfg := range info.IPAM.Config {
		pfx, err := netip.ParsePrefix(cfg.Subnet)
		if err != nil {
			return nil, fmt.Errorf("GPU network %s: subnet %q: %w", lease.DefaultNetwork, cfg.Subnet, err)
		}
		out = append(out, pfx.Masked())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("GPU network %s has no subnet to refuse to agents", lease.DefaultNetwork)
	}
	return out, nil
}

// ensureNetwork creates the GPU services' own bridge unless it exists. It is a
// user-defined bridge of its own: no sandbox joins it (sandboxes get internal
// per-project networks, package sandbox), and the engine isolates it from every
// other bridge, the default one included; published ports still reach the host.
//
// Docker does not keep network names unique (before API 1.44 its duplicate check
// races), so two controllers creating it at once could make two networks of one
// name, and every later lookup by name would be ambiguous. The fixed Linux bridge
// name (GPUBridge) is unique on the host: the second create fails, and the loser
// finds the winner's network on its next inspect.
func (c *Controller) ensureNetwork(ctx context.Context, name string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if _, err := c.docker.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
			return nil
		} else if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("inspect GPU network %s: %w", name, err)
		}
		_, err := c.docker.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge", Labels: map[string]string{LabelNetwork: "1"},
			Options: map[string]string{
				"com.docker.network.bridge.enable_icc": "true",
				"com.docker.network.bridge.name":       GPUBridge,
			},
		})
		if err == nil {
			c.opts.Log.Info("gpu network created", "network", name, "bridge", GPUBridge)
			return nil
		}
		lastErr = err // another controller created it meanwhile: inspect again
	}
	return fmt.Errorf("create GPU network %s: %w", name, lastErr)
}

// waitHealthy polls the health URL until it answers 2xx, failing fast when the
// container stops running and with the last error when the start timeout ends.
func (c *Controller) waitHealthy(ctx context.Context, s lease.Service) error {
	var last error
	for {
		info, err := c.docker.ContainerInspect(ctx, s.Container)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: %s: inspect container %s: %v", ErrStartFailed, s.Name, s.Container, err)
		}
		if err == nil && info.State != nil && !info.State.Running {
			return fmt.Errorf("%w: %s: container %s exited (code %d) before it was healthy; last log lines:\n%s",
				ErrStartFailed, s.Name, s.Container, info.State.ExitCode, c.tail(context.WithoutCancel(ctx), s.Container))
		}
		if err == nil {
			if s.HealthURL == "" {
				return nil
			}
			if last = c.probe(ctx, s.HealthURL); last == nil {
				return nil
			}
		}
		if err := sleep(ctx, c.cfg.HealthPoll); err != nil {
			if last == nil {
				last = err
			}
			return fmt.Errorf("%w: %s: not healthy within %v (%s): %v", ErrStartFailed, s.Name, s.StartTimeout, s.HealthURL, last)
		}
	}
}

func (c *Controller) probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.opts.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health check answered %s", resp.Status)
	}
	return nil
}

func (c *Controller) tail(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rc, err := c.docker.ContainerLogs(ctx, name, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(logs unavailable: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10)); err != nil && out.Len() == 0 {
		return "(logs unreadable: " + err.Error() + ")"
	}
	if s := strings.TrimSpace(out.String()); s != "" {
		return s
	}
	return "(no output)"
}

// StopIdle stops the running container of every managed service nobody has held
// for its IdleStop (the scheduler calls it periodically). It returns the services
// it stopped.
func (c *Controller) StopIdle(ctx context.Context) ([]string, error) {
	var stopped []string
	var errs []error
	for _, s := range c.leases.Services() {
		if s.Image == "" {
			continue
		}
		ok, err := c.stopIfIdle(ctx, s)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			stopped = append(stopped, s.Name)
		}
	}
	return stopped, errors.Join(errs...)
}

func (c *Controller) stopIfIdle(ctx context.Context, s lease.Service) (bool, error) {
	info, err := c.docker.ContainerInspect(ctx, s.Container)
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("gpu: %s: inspect container %s: %w", s.Name, s.Container, err)
	}
	if info.State == nil || !info.State.Running {
		return false, nil
	}
	ok, err := c.leases.BeginStop(ctx, s.Name, s.IdleStop, c.cfg.StopTimeout+time.Minute)
	if err != nil || !ok {
		return false, err
	}
	defer func() {
		if err := c.leases.EndStop(context.WithoutCancel(ctx), s.Name); err != nil {
			c.opts.Log.Warn("clear stopping mark", "service", s.Name, "err", err)
		}
	}()
	secs := int(c.cfg.StopTimeout / time.Second)
	if s.Fence != nil {
		// The proxy first: nothing reaches a service that is going away.
		if err := c.docker.ContainerStop(ctx, s.Fence.Container, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
			return false, fmt.Errorf("gpu: %s: stop fencing proxy %s: %w", s.Name, s.Fence.Container, err)
		}
	}
	if err := c.docker.ContainerStop(ctx, info.ID, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("gpu: %s: stop container %s: %w", s.Name, s.Container, err)
	}
	c.opts.Metrics.stop(s.Name)
	// The container is stopped whatever happens to ctx now: record it.
	_ = c.leases.Record(context.WithoutCancel(ctx), s.Name, "service_stop", "container", s.Container, "idle_stop", s.IdleStop.String())
	c.opts.Log.Info("gpu service stopped after idle delay", "service", s.Name, "container", s.Container, "idle_stop", s.IdleStop)
	return true, nil
}

// RunIdleStopper calls StopIdle every interval until ctx ends (dev mode and
// tests; in a fleet the scheduler calls StopIdle as a periodic task).
func (c *Controller) RunIdleStopper(ctx context.Context, every time.Duration) {
	_ = tick.Every(ctx, every, func() error {
		if _, err := c.StopIdle(ctx); err != nil && ctx.Err() == nil {
			c.opts.Log.Warn("gpu idle stopper", "err", err)
		}
		return nil
	})
}

// Status is what the engine says about a service's container.
type Status struct {
	Service   string `json:"service"`
	Container string `json:"container"`
	Managed   bool   `json:"managed"`
	Exists    bool   `json:"exists"`
	Running   bool   `json:"running"`
	State     string `json:"state,omitempty"`
}

// Status inspects service's container.
func (c *Controller) Status(ctx context.Context, service string) (Status, error) {
	s, ok := c.leases.Service(service)
	if !ok {
		return Status{}, fmt.Errorf("%w: %q", lease.ErrUnknownService, service)
	}
	st := Status{Service: service, Container: s.Container, Managed: s.Image != ""}
	if !st.Managed {
		return st, nil
	}
	info, err := c.docker.ContainerInspect(ctx, s.Container)
	if cerrdefs.IsNotFound(err) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("gpu: %s: inspect container %s: %w", service, s.Container, err)
	}
	st.Exists = true
	if info.State != nil {
		st.Running, st.State = info.State.Running, info.State.Status
	}
	return st, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
