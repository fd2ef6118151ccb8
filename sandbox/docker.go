package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// DockerConfig configures the container executor.
type DockerConfig struct {
	// Host is the engine address (unix:///var/run/docker.sock, tcp://…). Default:
	// DOCKER_HOST, else the local socket. The workspace paths must exist on the
	// engine's host, since they are bind-mounted.
	Host string `yaml:"host"`
	// Image is the image of each purpose (ImageSet): a plain string is the
	// project sandbox's (built by sandbox/build-image.sh, default
	// aetherium-sandbox:latest); a map also names the quality tools' toolchain
	// image (default aetherium-toolchain:latest, `make images`).
	Image ImageSet `yaml:"image"`
	// User is the uid:gid commands run as; never root. Default: the worker's own
	// uid:gid when it is not root, else 10001:10001 (the workspace is then handed to
	// that user when the container is created).
	User string `yaml:"user"`
	// MemoryBytes caps the container's memory (no swap). Default 512 MiB.
	MemoryBytes int64 `yaml:"memory_bytes"`
	// CPUs caps the container's CPU share. Default 1.
	CPUs float64 `yaml:"cpus"`
	// PidsLimit caps the container's processes. Default 256.
	PidsLimit int64 `yaml:"pids_limit"`
	// TmpfsBytes sizes the writable /tmp. Default 64 MiB.
	TmpfsBytes int64 `yaml:"tmpfs_bytes"`
	// EgressNetwork "none" refuses egress to every team. Any other value is kept
	// for compatibility and ignored: a sandbox with egress gets a network of its
	// own whose only way out is the egress proxy (sandbox.egress_proxy). Default
	// "bridge".
	EgressNetwork string `yaml:"egress_network"`
	// Scope tags this fleet's containers so CleanupOrphans never touches another
	// fleet's on a shared engine. The fleet fills it with its id (generated once,
	// stored in PostgreSQL) when empty; "default" only when used without a fleet.
	Scope string `yaml:"scope"`
}

func (c *DockerConfig) defaults() {
	c.Image = c.Image.withDefaults()
	if c.User == "" {
		if uid := os.Geteuid(); uid != 0 {
			c.User = fmt.Sprintf("%d:%d", uid, os.Getegid())
		} else {
			c.User = "10001:10001"
		}
	}
	c.MemoryBytes = defaults.Positive(c.MemoryBytes, 512<<20)
	c.CPUs = defaults.Positive(c.CPUs, 1)
	c.PidsLimit = defaults.Positive(c.PidsLimit, 256)
	c.TmpfsBytes = defaults.Positive(c.TmpfsBytes, 64<<20)
	c.EgressNetwork = cmp.Or(c.EgressNetwork, "bridge")
	c.Scope = cmp.Or(c.Scope, "default")
}

// Container labels: every sandbox carries them, so cleanup finds its own.
const (
	LabelSandbox   = "io.aetherium.sandbox"
	LabelScope     = "io.aetherium.sandbox.scope"
	LabelProject   = "io.aetherium.sandbox.project"
	LabelWorkspace = "io.aetherium.sandbox.workspace"
	LabelNetwork   = "io.aetherium.sandbox.network"
	// LabelSubnet and LabelGateway describe a per-run egress network (on the
	// network and on its container), so any worker can serve it.
	LabelSubnet  = "io.aetherium.sandbox.subnet"
	LabelGateway = "io.aetherium.sandbox.gateway"
	// LabelOneShot marks a one-shot container (RunOnce); its value is the image.
	LabelOneShot = "io.aetherium.sandbox.oneshot"
)

// execMarker is set in every command's environment; the timeout kill finds the
// command's processes by it (and their process groups), so a tree is killed even
// when parts of it left the group.
const execMarker = "AETHERIUM_EXEC"

// killScript kills the processes of one exec (argument 1: its marker value). It
// runs in the container as the same user, so it may signal them, and it uses shell
// builtins only: a command that exhausted the pids limit leaves no room to fork.
// The first pass stops every process, the next ones kill them: /proc is walked in
// name order, not tree order, and a shell whose child is killed first would run its
// next command ("Killed", then whatever followed) before its own turn came.
const killScript = `m="` + execMarker + `=$1"
for sig in STOP KILL KILL KILL; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    while IFS= read -r -d "" v; do
      if [ "$v" = "$m" ]; then kill -"$sig" "-$p" "$p"; break; fi
    done 2>/dev/null < "$d/environ"
  done
done 2>/dev/null
exit 0`

// baseEnv is a sandbox process's environment (plus the egress proxy's variables
// when it has egress).
var baseEnv = []string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin", "HOME=/tmp", "LANG=C.UTF-8"}

// initScript is the container's main process (under docker-init): it keeps the
// container alive and makes /tmp/console.log the container's log, so a server an
// agent starts in the background (cmd >>/tmp/console.log 2>&1 &) shows in read_logs.
const initScript = `touch /tmp/console.log; exec tail -F /tmp/console.log`

// Docker runs each project's commands in one long-lived container: the workspace
// bind-mounted at /workspace, no network unless the team allows egress, read-only
// root with a tmpfs /tmp, every capability dropped, no-new-privileges, a non-root
// user and memory/CPU/pids limits. The workspace's .aetherium directory (edit
// snapshots) is hidden behind an empty tmpfs.
//
// A command's timeout kills its process group and every process that still carries
// its exec marker in the environment (so setsid alone does not escape); when the
// command's output is still open 5 s later, the container itself is replaced (the
// workspace survives). A process that both leaves the group and drops the marker
// while the command goes on is detached, like a daemon: it lives until the
// project's container is released. Background processes of a command that ended
// normally (a dev server) keep running too.
type Docker struct {
	cfg      Config
	cli      *client.Client
	log      *slog.Logger
	uid, gid int

	mu       sync.Mutex
	projects map[string]*project
	egress   *egressproxy.Proxy
	slots    *Slots
}

type project struct {
	mu  sync.Mutex
	id  string
	net *egressNet // nil: the container has no network
}

// SetEgress gives sandboxes with egress their only way out: a per-run network
// served by p. Without it, egress requests get no network at all. Call it before
// the first Exec.
func (d *Docker) SetEgress(p *egressproxy.Proxy) { d.egress = p }

// SetSlots caps RunOnce's concurrent containers per run and per principal
// across worker processes. Without it they are not capped (a single process's
// tests).
func (d *Docker) SetSlots(s *Slots) { d.slots = s }

var userRE = regexp.MustCompile(`^(\d+)(?::(\d+))?$`)

// NewDocker connects to the engine and checks the image. ErrNoEngine when no engine
// answers, ErrNoImage when the image is missing.
func NewDocker(ctx context.Context, cfg Config, log *slog.Logger) (*Docker, error) {
	cfg.defaults()
	if err := cfg.Docker.Image.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m := userRE.FindStringSubmatch(cfg.Docker.User)
	if m == nil {
		return nil, fmt.Errorf("sandbox docker.user %q: want uid or uid:gid (numeric)", cfg.Docker.User)
	}
	uid, _ := strconv.Atoi(m[1])
	gid := uid
	if m[2] != "" {
		gid, _ = strconv.Atoi(m[2])
	}
	if uid == 0 {
		return nil, fmt.Errorf("sandbox docker.user %q: the sandbox never runs as root", cfg.Docker.User)
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Docker.Host != "" {
		opts = append(opts, client.WithHost(cfg.Docker.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	// Only the project sandbox's image is required here: the others are checked
	// by the one-shot that uses them (RunOnce's ErrNoImage names `make images`).
	if _, err := cli.ImageInspect(pctx, cfg.Docker.Image.For(PurposeDefault)); err != nil {
		_ = cli.Close()
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s (build it with sandbox/build-image.sh)", ErrNoImage, cfg.Docker.Image.For(PurposeDefault))
		}
		return nil, fmt.Errorf("sandbox image %s: %w", cfg.Docker.Image.For(PurposeDefault), err)
	}
	return &Docker{cfg: cfg, cli: cli, log: log, uid: uid, gid: gid, projects: map[string]*project{}}, nil
}

// ImageFor is the image configured for purpose (sandbox.docker.image), "" when
// none is.
func (d *Docker) ImageFor(purpose string) string { return d.cfg.Docker.Image.For(purpose) }

// Kind implements Executor.
func (d *Docker) Kind() string { return "docker" }

// Close closes the engine client; containers stay (Release or CleanupOrphans).
func (d *Docker) Close() error { return d.cli.Close() }

// Owner is the uid:gid the sandbox runs as, and whether files the worker writes into
// a workspace must be handed to it (the worker runs as root, the sandbox does not).
func (d *Docker) Owner() (uid, gid int, chown bool) {
	return d.uid, d.gid, os.Geteuid() == 0 && d.uid != os.Geteuid()
}

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// ContainerName is the project's container name under this executor's scope.
func (d *Docker) ContainerName(projectID string) string {
	clean := nameRE.ReplaceAllString(projectID, "_")
	if clean != projectID || len(clean) > 64 {
		sum := sha256.Sum256([]byte(projectID))
		clean = clean[:min(len(clean), 40)] + "-" + hex.EncodeToString(sum[:6])
	}
	return "aetherium-sb-" + nameRE.ReplaceAllString(d.cfg.Docker.Scope, "_") + "-" + clean
}

func (d *Docker) project(id string) *project {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.projects[id]
	if !ok {
		p = &project{}
		d.projects[id] = p
	}
	return p
}

// ensure returns the id of the project's running container, creating or starting
// it. Workers on other processes may race: the container name is the lock.
func (d *Docker) ensure(ctx context.Context, projectID, ws string, network bool) (string, error) {
	p := d.project(projectID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id != "" {
		return p.id, nil
	}
	name := d.ContainerName(projectID)
	for range 3 {
		info, err := d.cli.ContainerInspect(ctx, name)
		switch {
		case err == nil:
			if got := info.Config.Labels[LabelWorkspace]; got != ws {
				return "", fmt.Errorf("sandbox container %s serves workspace %q, not %q", name, got, ws)
			}
			p.net = netFromLabels(info.Config.Labels)
			if info.State != nil && info.State.Running {
				p.id = info.ID
				return p.id, nil
			}
			if err := d.cli.ContainerStart(ctx, info.ID, container.StartOptions{}); err == nil {
				p.id = info.ID
				return p.id, nil
			}
			p.net = nil
			// A container that will not start again is replaced.
			if err := d.cli.ContainerRemove(ctx, info.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				return "", fmt.Errorf("remove broken sandbox %s: %w", name, err)
			}
		case cerrdefs.IsNotFound(err):
			id, n, err := d.create(ctx, name, projectID, ws, network)
			if cerrdefs.IsConflict(err) {
				continue // another worker created it first
			}
			if err != nil {
				return "", err
			}
			p.id, p.net = id, n
			return id, nil
		default:
			return "", fmt.Errorf("inspect sandbox %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("sandbox %s: could not get a running container", name)
}

func (d *Docker) create(ctx context.Context, name, projectID, ws string, network bool) (string, *egressNet, error) {
	fi, err := os.Stat(ws)
	if err != nil || !fi.IsDir() {
		return "", nil, fmt.Errorf("%w: workspace %s is not a directory", ErrInvalidRequest, ws)
	}
	if _, _, chown := d.Owner(); chown {
		if err := chownTree(ws, d.uid, d.gid); err != nil {
			return "", nil, fmt.Errorf("hand workspace %s to the sandbox user: %w", ws, err)
		}
	}
	netMode := "none"
	var en *egressNet
	env := append([]string(nil), baseEnv...)
	if network && d.cfg.Docker.EgressNetwork != "none" {
		if d.egress == nil {
			// The default bridge is an unfiltered way out: no proxy, no network.
			d.log.Warn("sandbox egress requested but no egress proxy runs: the sandbox gets no network", "project", projectID)
		} else {
			if en, err = d.ensureNetwork(ctx, projectID); err != nil {
				return "", nil, err
			}
			netMode = en.name
			env = append(env, proxyEnv(d.egress.URL(en.gateway))...)
		}
	}
	cfg := &container.Config{
		Image:      d.cfg.Docker.Image.For(PurposeDefault),
		Cmd:        []string{"/bin/sh", "-c", initScript},
		User:       d.cfg.Docker.User,
		WorkingDir: "/workspace",
		Hostname:   "sandbox",
		Env:        env,
		Labels: map[string]string{
			LabelSandbox: "1", LabelScope: d.cfg.Docker.Scope, LabelProject: projectID,
			LabelWorkspace: ws, LabelNetwork: netMode,
		},
		NetworkDisabled: netMode == "none",
	}
	if en != nil {
		cfg.Labels[LabelSubnet], cfg.Labels[LabelGateway] = en.subnet.String(), en.gateway.String()
	}
	host := hardened(d.cfg.Docker.limits())
	host.NetworkMode = container.NetworkMode(netMode)
	host.Mounts = []mount.Mount{
		{Type: mount.TypeBind, Source: ws, Target: "/workspace"},
		// Edit snapshots live in the workspace's .aetherium directory: commands
		// must neither read nor forge them.
		{Type: mount.TypeTmpfs, Target: "/workspace/.aetherium", ReadOnly: true, TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 1 << 10}},
	}
	if en != nil {
		// Names resolve at the proxy (absolute-form requests, CONNECT host:port).
		// The embedded DNS server forwards to the gateway, which the firewall drops:
		// DNS is not a side channel out. No IPv6 at all.
		host.DNS = []string{en.gateway.String()}
		host.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1"}
	}
	created, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", nil, err
		}
		return "", nil, fmt.Errorf("create sandbox %s: %w", name, err)
	}
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		_ = d.cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
		return "", nil, fmt.Errorf("start sandbox %s: %w", name, err)
	}
	d.log.Info("sandbox started", "container", name, "project", projectID, "network", netMode)
	return created.ID, en, nil
}

// limits are a container's resource bounds.
type limits struct {
	memory, pids, tmpfs int64
	cpus                float64
}

func (c DockerConfig) limits() limits {
	return limits{memory: c.MemoryBytes, pids: c.PidsLimit, tmpfs: c.TmpfsBytes, cpus: c.CPUs}
}

// with returns l with the positive values of a tool's own bounds (one-shots,
// helpers) in place of the project sandbox's.
func (l limits) with(memory int64, cpus float64, pids, tmpfs int64) limits {
	if memory > 0 {
		l.memory = memory
	}
	if cpus > 0 {
		l.cpus = cpus
	}
	if pids > 0 {
		l.pids = pids
	}
	if tmpfs > 0 {
		l.tmpfs = tmpfs
	}
	return l
}

// hardened is the host config of every sandbox container, a project's or a
// one-shot's: read-only root with a tmpfs /tmp, no /dev/shm, every capability
// dropped, no-new-privileges, docker-init as PID 1, bounded logs, memory without
// swap, CPU and pids limits. Callers add the mounts and the network.
func hardened(l limits) *container.HostConfig {
	yes := true
	pids := l.pids
	return &container.HostConfig{
		NetworkMode:    "none",
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", l.tmpfs)},
		ReadonlyRootfs: true,
		// No /dev/shm: the mounts and /tmp are the only writable places.
		IpcMode:     container.IpcMode("none"),
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Init:        &yes,
		LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "2"}},
		Resources: container.Resources{
			Memory: l.memory, MemorySwap: l.memory,
			NanoCPUs: int64(l.cpus * 1e9), PidsLimit: &pids,
		},
	}
}

// chownTree hands the workspace to the sandbox user. It walks through an os.Root,
// so a symlink planted in the workspace cannot redirect it outside.
func chownTree(ws string, uid, gid int) error {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == ".aetherium" {
			return fs.SkipDir
		}
		return root.Lchown(p, uid, gid)
	})
}

// Exec implements Executor.
func (d *Docker) Exec(ctx context.Context, req Request) (res Result, err error) {
	ctx, span := startExec(ctx, d.Kind(), req)
	defer func() { endExec(span, res, err) }()
	ws, dir, err := req.validate()
	if err != nil {
		return Result{}, err
	}
	if fi, err := os.Stat(filepath.Join(ws, filepath.FromSlash(dir))); err != nil || !fi.IsDir() {
		return Result{}, fmt.Errorf("%w: working directory %q does not exist", ErrInvalidRequest, dir)
	}
	marker := randomHex(12)
	opts := container.ExecOptions{
		// One pipe for both streams, so output keeps the order it was written in
		// (the engine reads separate stdout and stderr pipes concurrently).
		Cmd:          []string{"/bin/sh", "-c", `exec /bin/sh -c "$1" 2>&1`, "sh", req.Command},
		Env:          []string{execMarker + "=" + marker},
		WorkingDir:   path.Join("/workspace", dir),
		AttachStdout: true,
		AttachStderr: true,
	}
	var execID, cid string
	for attempt := 0; ; attempt++ {
		if cid, err = d.ensure(ctx, req.Project, ws, req.Network); err != nil {
			return Result{}, err
		}
		if err := d.serveEgress(ctx, req); err != nil {
			return Result{}, err
		}
		created, err := d.cli.ContainerExecCreate(ctx, cid, opts)
		if err == nil {
			execID = created.ID
			break
		}
		// The cached container died or was removed behind our back: find or make
		// a new one, once.
		if attempt == 0 && (cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err)) {
			d.forget(req.Project, cid)
			continue
		}
		return Result{}, fmt.Errorf("sandbox exec: %w", err)
	}

	timeout := d.cfg.timeout(req.Timeout)
	start := time.Now()
	att, err := d.cli.ContainerExecAttach(ctx, execID, container.ExecAttachOptions{})
	if err != nil {
		return Result{}, fmt.Errorf("sandbox exec attach: %w", err)
	}
	defer att.Close()
	out := NewCapture(d.cfg.MaxOutputBytes)
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, out, att.Reader)
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	res = Result{Sandboxed: true, Executor: d.Kind()}
	select {
	case err := <-done:
		if err != nil {
			return Result{}, fmt.Errorf("sandbox exec output: %w", err)
		}
	case <-timer.C:
		res.TimedOut = true
		d.kill(ctx, cid, marker)
		// Killing the tree closes the stream. When it does not (the kill could not
		// even start because the command used up the pids limit, or a process hid
		// from it), the container is replaced: nothing of the command survives.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			d.log.Warn("sandbox: a timed-out command survived the kill; replacing the container", "project", req.Project)
			d.replace(ctx, req.Project, cid)
			att.Close()
			<-done
		}
	case <-ctx.Done():
		d.kill(ctx, cid, marker)
		att.Close()
		<-done
		return Result{}, fmt.Errorf("sandbox exec: %w", ctx.Err())
	}
	res.Duration = time.Since(start)
	res.Output, res.OutputBytes, res.Truncated = out.String(), out.Total(), out.Truncated()
	if res.TimedOut {
		res.ExitCode = ExitTimedOut
		return res, nil
	}
	code, err := d.exitCode(ctx, execID)
	if err != nil {
		return Result{}, err
	}
	res.ExitCode = code
	return res, nil
}

// exitCode waits for the engine to record the exec's exit: the output stream can
// close a moment before it does.
func (d *Docker) exitCode(ctx context.Context, execID string) (int, error) {
	for i := 0; ; i++ {
		ins, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, fmt.Errorf("sandbox exec inspect: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if i >= 200 {
			return 0, fmt.Errorf("sandbox exec %s: output closed but the process is still running", execID)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill ends every process of one exec. Docker has no exec-kill API, so it runs the
// kill script in the container.
func (d *Docker) kill(ctx context.Context, cid, marker string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	created, err := d.cli.ContainerExecCreate(kctx, cid, container.ExecOptions{
		Cmd: []string{"/bin/sh", "-c", killScript, "kill", marker}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		d.log.Warn("sandbox kill", "container", cid, "err", err)
		return
	}
	att, err := d.cli.ContainerExecAttach(kctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		d.log.Warn("sandbox kill", "container", cid, "err", err)
		return
	}
	defer att.Close()
	sink := NewCapture(4096)
	_, _ = stdcopy.StdCopy(sink, sink, att.Reader)
}

// replace force-removes a wedged container; the next Exec creates a new one (the
// workspace is a bind mount and survives).
func (d *Docker) replace(ctx context.Context, projectID, cid string) {
	d.forget(projectID, cid)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.cli.ContainerRemove(rctx, cid, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.log.Warn("sandbox: remove wedged container", "project", projectID, "err", err)
	}
}

func (d *Docker) forget(projectID, cid string) {
	p := d.project(projectID)
	p.mu.Lock()
	if p.id == cid {
		p.id = ""
	}
	p.mu.Unlock()
}

// Logs implements Executor: the project container's log (its main process writes
// /tmp/console.log there).
func (d *Docker) Logs(ctx context.Context, projectID string, opts LogOptions) (string, error) {
	lo := container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "all"}
	if opts.Tail > 0 {
		lo.Tail = strconv.Itoa(opts.Tail)
	}
	if !opts.Since.IsZero() {
		lo.Since = strconv.FormatInt(opts.Since.Unix(), 10)
	}
	rc, err := d.cli.ContainerLogs(ctx, d.ContainerName(projectID), lo)
	if cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("%w: the container starts with the first run_shell", ErrNoSandbox)
	}
	if err != nil {
		return "", fmt.Errorf("sandbox logs: %w", err)
	}
	defer rc.Close()
	out := NewCapture(d.cfg.MaxOutputBytes)
	if _, err := stdcopy.StdCopy(out, out, rc); err != nil {
		return "", fmt.Errorf("sandbox logs: %w", err)
	}
	return out.String(), nil
}

// Release implements Executor: it removes the project's container (and every
// process in it). Idempotent.
func (d *Docker) Release(ctx context.Context, projectID string) error {
	d.mu.Lock()
	p := d.projects[projectID]
	delete(d.projects, projectID)
	d.mu.Unlock()
	if p != nil {
		// Wait for an ensure in flight, so it cannot resurrect the container
		// after the removal below.
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	name := d.ContainerName(projectID)
	err := d.cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
	// Another process (the run's cleanup task, the orphan sweep) may be removing it
	// at the same moment: that is the outcome wanted, not a failure.
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
		return fmt.Errorf("release sandbox %s: %w", name, err)
	}
	// The run's helpers (its browser) go with it, and before its network.
	if err := d.removeHelpers(ctx, projectID); err != nil {
		return fmt.Errorf("release sandbox %s: %w", name, err)
	}
	return d.releaseNetwork(ctx, projectID)
}

// CleanupOrphans removes this scope's sandbox containers whose project isActive
// reports as finished (or unknown): run it at start-up and periodically, so a
// crashed worker leaves nothing running. It returns how many it removed.
func (d *Docker) CleanupOrphans(ctx context.Context, isActive func(project string) bool) (int, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelSandbox+"=1"), filters.Arg("label", LabelScope+"="+d.cfg.Docker.Scope)),
	})
	if err != nil {
		return 0, fmt.Errorf("list sandboxes: %w", err)
	}
	removed := 0
	var errs []error
	for _, c := range list {
		proj := c.Labels[LabelProject]
		if isActive(proj) {
			continue
		}
		if c.Labels[LabelOneShot] != "" || c.Labels[LabelService] != "" {
			// A one-shot or a helper left by a worker that died while it ran.
			if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("remove one-shot %s: %w", c.ID, err))
				continue
			}
			removed++
			continue
		}
		if err := d.Release(ctx, proj); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	// A network whose container is gone (a worker died between the two).
	if err := d.cleanupOrphanNetworks(ctx, isActive); err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// Projects lists the projects that have a sandbox container in this scope.
func (d *Docker) Projects(ctx context.Context) ([]string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelSandbox+"=1"), filters.Arg("label", LabelScope+"="+d.cfg.Docker.Scope)),
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]string, 0, len(list))
	for _, c := range list {
		if c.Labels[LabelOneShot] != "" || c.Labels[LabelService] != "" {
			continue
		}
		out = append(out, c.Labels[LabelProject])
	}
	return out, nil
}

// Inspect returns the project's container as the engine sees it (tests, ops).
func (d *Docker) Inspect(ctx context.Context, projectID string) (container.InspectResponse, error) {
	info, err := d.cli.ContainerInspect(ctx, d.ContainerName(projectID))
	if cerrdefs.IsNotFound(err) {
		return info, ErrNoSandbox
	}
	return info, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// String describes the executor for logs.
func (d *Docker) String() string {
	return strings.Join([]string{"docker", d.cfg.Docker.Image.For(PurposeDefault), "user=" + d.cfg.Docker.User, "scope=" + d.cfg.Docker.Scope}, " ")
}
