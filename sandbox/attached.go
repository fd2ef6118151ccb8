package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/aetherium-engine/aetherium/store"
)

// LabelService marks a long-lived helper container of a run that is not its
// project sandbox (StartAttached: the browser of capture_reference); its value is
// the service's name. Release removes them with the run's sandbox, and the orphan
// sweep removes them by id.
const LabelService = "io.aetherium.sandbox.service"

// ErrNoEgress refuses a helper that needs the network when no egress proxy runs:
// it would otherwise need an unfiltered way out.
var ErrNoEgress = errors.New("sandbox egress is off (no egress proxy runs: Docker executor, firewall rules and config are needed)")

// AttachedJob is a long-lived process in a container of the image family, spoken
// to over its standard input and output through the engine's attach stream: no
// port is published and no host→container connection is made, so the host
// firewall that confines sandbox networks needs no hole (docs/sandboxproxy.md).
// The container gets the hardening of every sandbox container (read-only root,
// tmpfs /tmp, every capability dropped, no-new-privileges, the sandbox's non-root
// user, memory without swap, CPU and pids limits).
type AttachedJob struct {
	// Image is an image of the family (aetherium-browser:latest).
	Image string
	// Cmd is the process; its stdin and stdout are the conversation, its stderr
	// is kept (head and tail) for diagnostics.
	Cmd []string
	// Service names the helper (label value, container name part): "browser".
	Service string
	// Project is the run it serves: Release and the orphan sweep remove it.
	Project string
	// Egress, when set, puts the container on the run's egress network, whose
	// only way out is the egress proxy bound to this agent and allowlist
	// (ErrNoEgress without a proxy). Nil: no network at all.
	Egress *EgressBinding
	// Env is added to the fixed environment (PATH, HOME=/tmp, LANG).
	Env []string
	// MemoryBytes, CPUs, PidsLimit and TmpfsBytes bound the container; zero
	// fields take the project sandbox's (sandbox.docker.*).
	MemoryBytes int64
	CPUs        float64
	PidsLimit   int64
	TmpfsBytes  int64
	// MaxStderrBytes caps the stderr kept. Default 64 KiB.
	MaxStderrBytes int
}

// EgressBinding is who a helper's egress is attributed to and what it may reach
// (the same binding the run's shell sandbox gets from run_shell).
type EgressBinding struct {
	Agent     string
	Allowlist []string
	Ports     []int
	// DenyPrivate is the team's egress.private: deny.
	DenyPrivate bool
}

// Attached is a running helper container.
type Attached struct {
	// ID and Name identify the container.
	ID, Name string
	// ProxyURL is the egress proxy the process must use ("" without egress).
	ProxyURL string
	// Source is the container's address on the run network (the proxy sees its
	// connections from it; "" without egress).
	Source string
	// Stdout is the process's standard output; Stdin its standard input (Close
	// ends it, which ends a process that exits on EOF).
	Stdout io.ReadCloser
	Stdin  io.WriteCloser

	d       *Docker
	project string
	net     *egressNet
	stderr  *Capture
	done    chan struct{}
	once    sync.Once
	closeFn func()
}

// Done is closed when the container's process has ended (or its stream broke).
func (a *Attached) Done() <-chan struct{} { return a.done }

// Stderr is what the process wrote to its standard error (head and tail).
func (a *Attached) Stderr() string { return a.stderr.String() }

// Rebind updates the egress binding of the helper's run (the calling agent, the
// team's allowlist). No-op without egress.
func (a *Attached) Rebind(ctx context.Context, b EgressBinding) error {
	if a.net == nil {
		return nil
	}
	return a.d.bindHelper(ctx, a.project, a.net, b)
}

// bindHelper makes this worker's proxy serve the run's network for a helper,
// bound to the calling agent and allowlist.
func (d *Docker) bindHelper(ctx context.Context, project string, en *egressNet, b EgressBinding) error {
	p := d.project(project)
	p.mu.Lock()
	if p.net == nil {
		// The run's shell container may come later (it joins the same
		// network) or have none; serveEgress reads the network from here.
		p.net = en
	}
	p.mu.Unlock()
	return d.serveEgress(ctx, Request{Project: project, Network: true, Agent: b.Agent, Allowlist: b.Allowlist, EgressPorts: b.Ports, EgressDenyPrivate: b.DenyPrivate})
}

// Watch hands fn every connection record the egress proxy makes for the helper's
// run until stop is called (egressproxy.Proxy.Watch): what it refused, and why.
// A no-op without egress.
func (a *Attached) Watch(fn func(store.EgressConnection)) (stop func()) {
	if a.net == nil || a.d.egress == nil {
		return func() {}
	}
	return a.d.egress.Watch(a.project, fn)
}

// Close ends the process and removes the container. Idempotent.
func (a *Attached) Close() error {
	var err error
	a.once.Do(func() {
		a.closeFn()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if e := a.d.cli.ContainerRemove(ctx, a.ID, container.RemoveOptions{Force: true}); e != nil && !cerrdefs.IsNotFound(e) {
			err = fmt.Errorf("remove %s: %w", a.Name, e)
		}
	})
	return err
}

// StartAttached creates and starts a helper container and attaches to its stdio.
// A missing image is ErrNoImage naming `make images`.
func (d *Docker) StartAttached(ctx context.Context, job AttachedJob) (*Attached, error) {
	if job.Image == "" || len(job.Cmd) == 0 || job.Service == "" || job.Project == "" {
		return nil, fmt.Errorf("%w: a helper needs an image, a command, a service name and a project", ErrInvalidRequest)
	}
	lim := d.cfg.Docker.limits().with(job.MemoryBytes, job.CPUs, job.PidsLimit, job.TmpfsBytes)
	host := hardened(lim)
	env := append(append([]string(nil), baseEnv...), job.Env...)
	labels := map[string]string{
		LabelSandbox: "1", LabelScope: d.cfg.Docker.Scope, LabelProject: job.Project,
		LabelNetwork: "none", LabelService: job.Service,
	}
	var en *egressNet
	if job.Egress != nil {
		if d.egress == nil || d.cfg.Docker.EgressNetwork == "none" {
			return nil, ErrNoEgress
		}
		var err error
		if en, err = d.ensureNetwork(ctx, job.Project); err != nil {
			return nil, err
		}
		if err := d.bindHelper(ctx, job.Project, en, *job.Egress); err != nil {
			return nil, err
		}
		host.NetworkMode = container.NetworkMode(en.name)
		// As for the project's sandbox: names resolve at the proxy, the DNS
		// forwarder points at the gateway (dropped by the firewall), no IPv6.
		host.DNS = []string{en.gateway.String()}
		host.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1"}
		labels[LabelNetwork] = en.name
		env = append(env, proxyEnv(d.egress.URL(en.gateway))...)
	}
	cfg := &container.Config{
		Image: job.Image, Cmd: job.Cmd, User: d.cfg.Docker.User, WorkingDir: "/tmp", Hostname: "sandbox",
		Env: env, Labels: labels, NetworkDisabled: en == nil,
		// StdinOnce: when the worker's attach stream ends (the worker died),
		// the process reads EOF and exits instead of idling until the sweep.
		OpenStdin: true, StdinOnce: true, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	}
	name := "aetherium-" + nameRE.ReplaceAllString(job.Service, "_") + "-" + nameRE.ReplaceAllString(d.cfg.Docker.Scope, "_") + "-" + randomHex(6)
	created, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s (run `make images`, or sandbox/images/build.sh %s)", ErrNoImage, job.Image, familyName(job.Image))
		}
		return nil, fmt.Errorf("%s container: %w", job.Service, err)
	}
	a := &Attached{ID: created.ID, Name: name, d: d, project: job.Project, done: make(chan struct{})}
	fail := func(err error) (*Attached, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true})
		return nil, err
	}
	// Attach before the start, so not a byte of output is missed.
	att, err := d.cli.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail(fmt.Errorf("%s attach: %w", job.Service, err))
	}
	maxErr := job.MaxStderrBytes
	if maxErr <= 0 {
		maxErr = 64 << 10
	}
	a.stderr = NewCapture(maxErr)
	pr, pw := io.Pipe()
	a.Stdout = pr
	a.Stdin = &attachedStdin{att: &att}
	a.closeFn = func() {
		att.Close()
		_ = pr.Close()
	}
	go func() {
		defer close(a.done)
		_, err := stdcopy.StdCopy(pw, a.stderr, att.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		att.Close()
		return fail(fmt.Errorf("%s start: %w", job.Service, err))
	}
	if en != nil {
		a.net, a.ProxyURL = en, d.egress.URL(en.gateway)
		if info, err := d.cli.ContainerInspect(ctx, created.ID); err == nil && info.NetworkSettings != nil {
			if n, ok := info.NetworkSettings.Networks[en.name]; ok && n != nil {
				a.Source = n.IPAddress
			}
		}
	}
	d.log.Info("sandbox helper started", "container", name, "service", job.Service, "project", job.Project, "network", labels[LabelNetwork])
	return a, nil
}

// attachedStdin writes to the attach stream; Close half-closes it (the process
// sees EOF) without dropping the output still coming.
type attachedStdin struct {
	mu  sync.Mutex
	att *types.HijackedResponse
}

func (s *attachedStdin) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.att.Conn.Write(p)
}

func (s *attachedStdin) Close() error { return s.att.CloseWrite() }

// removeHelpers removes the project's helper containers (before its network can
// go: a network with endpoints cannot be removed).
func (d *Docker) removeHelpers(ctx context.Context, projectID string) error {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelSandbox+"=1"), filters.Arg("label", LabelScope+"="+d.cfg.Docker.Scope),
			filters.Arg("label", LabelProject+"="+projectID), filters.Arg("label", LabelService)),
	})
	if err != nil {
		return fmt.Errorf("list helpers of %s: %w", projectID, err)
	}
	var errs []error
	for _, c := range list {
		if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) &&
			!strings.Contains(err.Error(), "already in progress") {
			errs = append(errs, fmt.Errorf("remove helper %s: %w", c.ID, err))
		}
	}
	return errors.Join(errs...)
}
