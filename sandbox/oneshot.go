package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/pkg/stdcopy"
)

// OneShot is one command in a fresh container of an image of the sandbox image
// family (sandbox/images): a tool's parser or browser, never the worker's host.
// The container gets the same lockdown as a project's sandbox (hardened: read-only
// root, tmpfs /tmp, every capability dropped, no-new-privileges, the sandbox's
// non-root user, memory without swap, CPU and pids limits), no network at all, and
// it is removed when the command ends.
type OneShot struct {
	// Image is an image of the family, such as "aetherium-browser:latest"
	// (`make images` builds them).
	Image string
	// Cmd is the command, run directly (no shell unless Cmd names one).
	Cmd []string
	// Project is the run the command serves: the orphan sweep removes a container
	// a dead worker left once that run is no longer active. Default "oneshot".
	Project string
	// Stdin, when set, is the command's standard input (closed at its end). It is
	// how a tool hands a file to a parser without a bind mount: no host path, so
	// nothing an agent does in its workspace can point the mount elsewhere.
	Stdin io.Reader
	// Mounts are host paths bound into the container, read-only unless Writable.
	// The engine resolves Source on its host, symlinks included: never bind a path
	// an agent can change (its workspace) — use Stdin.
	Mounts []Bind
	// Hide are container paths covered by an empty read-only tmpfs, such as a
	// mounted workspace's .aetherium directory (edit snapshots); each must exist
	// in the container (a read-only mount cannot get new mount points).
	Hide []string
	// ExecTmp lets the command execute files it writes to /tmp (Docker mounts a
	// tmpfs noexec by default): `go test` builds its test binary there and runs
	// it. The command runs code of the caller's choosing anyway; this only lets
	// it be a compiled one.
	ExecTmp bool
	// Env is added to the fixed environment (PATH, HOME=/tmp, LANG).
	Env []string
	// WorkingDir is the command's directory in the container. Default /tmp.
	WorkingDir string
	// Timeout bounds the command, container start included. Default Config.Timeout,
	// capped at Config.MaxTimeout.
	Timeout time.Duration
	// MemoryBytes, CPUs, PidsLimit and TmpfsBytes bound the container; zero
	// fields take the project sandbox's (sandbox.docker.*).
	MemoryBytes int64
	CPUs        float64
	PidsLimit   int64
	TmpfsBytes  int64
	// MaxStdoutBytes caps the stdout kept (its head). Default 1 MiB.
	MaxStdoutBytes int
	// MaxStderrBytes caps the stderr kept (head and tail). Default 64 KiB.
	MaxStderrBytes int
}

// Bind mounts Source (an absolute host path, a file or a directory) at Target.
type Bind struct {
	Source, Target string
	Writable       bool
}

// OneShotResult is how a one-shot command ended.
type OneShotResult struct {
	// Stdout is the head of the command's standard output, at most
	// MaxStdoutBytes; StdoutBytes counts all of it.
	Stdout          string
	StdoutBytes     int64
	StdoutTruncated bool
	// Stderr is its standard error (head and tail kept).
	Stderr string
	// ExitCode is the command's exit status (a non-zero one is not an error).
	ExitCode int
	Duration time.Duration
}

// Errors of RunOnce; the result still holds what the command wrote before.
var (
	// ErrTimedOut is a one-shot killed at its timeout.
	ErrTimedOut = errors.New("timed out")
	// ErrOutOfMemory is a one-shot the kernel killed at its memory limit.
	ErrOutOfMemory = errors.New("out of memory")
)

// headBuffer keeps the first max bytes written and counts the rest.
type headBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	if n := h.max - len(h.buf); n > 0 {
		h.buf = append(h.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// RunOnce runs job in a new container and removes it. A command that exits
// non-zero is a result, not an error; one killed at its timeout returns
// ErrTimedOut, one killed at its memory limit ErrOutOfMemory (both with the
// result so far); a missing image is ErrNoImage, naming `make images`.
func (d *Docker) RunOnce(ctx context.Context, job OneShot) (OneShotResult, error) {
	if job.Image == "" || len(job.Cmd) == 0 {
		return OneShotResult{}, fmt.Errorf("%w: a one-shot needs an image and a command", ErrInvalidRequest)
	}
	for _, a := range job.Cmd {
		if strings.ContainsRune(a, 0) {
			return OneShotResult{}, fmt.Errorf("%w: command contains a NUL byte", ErrInvalidRequest)
		}
	}
	lim := d.cfg.Docker.limits().with(job.MemoryBytes, job.CPUs, job.PidsLimit, job.TmpfsBytes)
	host := hardened(lim)
	if job.ExecTmp {
		host.Tmpfs["/tmp"] += ",exec"
	}
	for _, b := range job.Mounts {
		if !filepath.IsAbs(b.Source) || !path.IsAbs(b.Target) {
			return OneShotResult{}, fmt.Errorf("%w: mount %q at %q: both paths must be absolute", ErrInvalidRequest, b.Source, b.Target)
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.Source, Target: b.Target, ReadOnly: !b.Writable})
	}
	for _, h := range job.Hide {
		if !path.IsAbs(h) {
			return OneShotResult{}, fmt.Errorf("%w: hidden path %q must be absolute", ErrInvalidRequest, h)
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeTmpfs, Target: h, ReadOnly: true, TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 1 << 10}})
	}
	project := job.Project
	if project == "" {
		project = "oneshot"
	}
	wd := job.WorkingDir
	if wd == "" {
		wd = "/tmp"
	}
	timeout := d.cfg.timeout(job.Timeout)
	cfg := &container.Config{
		Image:      job.Image,
		Cmd:        job.Cmd,
		User:       d.cfg.Docker.User,
		WorkingDir: wd,
		Hostname:   "sandbox",
		Env:        append(append([]string(nil), baseEnv...), job.Env...),
		Labels: map[string]string{
			LabelSandbox: "1", LabelScope: d.cfg.Docker.Scope, LabelProject: project,
			LabelNetwork: "none", LabelOneShot: job.Image,
		},
		NetworkDisabled: true,
	}
	if job.Stdin != nil {
		cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin = true, true, true
	}
	name := "aetherium-os-" + nameRE.ReplaceAllString(d.cfg.Docker.Scope, "_") + "-" + randomHex(6)
	if d.slots != nil {
		// Counted against the run and its principal across every worker process;
		// past a cap this waits (bounded) for a slot, then fails with
		// ErrOneShotBusy before any container exists.
		c := CallerFrom(ctx)
		if c.Run == "" {
			c.Run = project
		}
		release, err := d.slots.Acquire(ctx, c, timeout)
		if err != nil {
			return OneShotResult{}, err
		}
		defer release()
	}

	start := time.Now()
	created, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, name)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return OneShotResult{}, fmt.Errorf("%w: %s (run `make images`, or sandbox/images/build.sh %s)", ErrNoImage, job.Image, familyName(job.Image))
		}
		return OneShotResult{}, fmt.Errorf("one-shot container: %w", err)
	}
	id := created.ID
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := d.cli.ContainerRemove(rctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			d.log.Warn("sandbox: remove one-shot container", "container", name, "err", err)
		}
	}()

	// Attach and wait before the start, so neither output nor the exit is missed.
	att, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdin: job.Stdin != nil, Stdout: true, Stderr: true})
	if err != nil {
		return OneShotResult{}, fmt.Errorf("one-shot attach: %w", err)
	}
	stdinDone := make(chan struct{})
	defer func() {
		// Closing the connection ends a stdin copy still blocked on it: nothing
		// reads the caller's Stdin once RunOnce has returned.
		att.Close()
		<-stdinDone
	}()
	stdout := &headBuffer{max: job.MaxStdoutBytes}
	if stdout.max <= 0 {
		stdout.max = 1 << 20
	}
	stderrMax := job.MaxStderrBytes
	if stderrMax <= 0 {
		stderrMax = 64 << 10
	}
	stderr := NewCapture(stderrMax)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}()
	wctx, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWait()
	waitCh, waitErr := d.cli.ContainerWait(wctx, id, container.WaitConditionNextExit)
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		close(stdinDone)
		return OneShotResult{}, fmt.Errorf("one-shot start: %w", err)
	}
	if job.Stdin == nil {
		close(stdinDone)
	} else {
		go func() {
			defer close(stdinDone)
			// A command that stops reading early (it failed) ends the copy with an
			// error that tells nothing more than its exit does.
			_, _ = io.Copy(att.Conn, job.Stdin)
			_ = att.CloseWrite()
		}()
	}

	timer := time.NewTimer(max(timeout-time.Since(start), time.Millisecond))
	defer timer.Stop()
	var exit int64
	var runErr error
	select {
	case w := <-waitCh:
		exit = w.StatusCode
		if w.Error != nil && w.Error.Message != "" {
			runErr = fmt.Errorf("one-shot wait: %s", w.Error.Message)
		}
	case err := <-waitErr:
		runErr = fmt.Errorf("one-shot wait: %w", err)
	case <-timer.C:
		runErr = fmt.Errorf("%w after %s (killed)", ErrTimedOut, timeout)
	case <-ctx.Done():
		runErr = fmt.Errorf("one-shot: %w", ctx.Err())
	}
	if runErr != nil {
		// The removal in the defer kills it too; killing first ends the output
		// stream now.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = d.cli.ContainerKill(kctx, id, "KILL")
		cancel()
	}
	// The stream closes when the container's process ends; a detached process
	// holding it cannot outlive the container's removal.
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		att.Close()
		<-copied
	}
	res := OneShotResult{
		Stdout: strings.ToValidUTF8(string(stdout.buf), "\uFFFD"), StdoutBytes: stdout.total,
		StdoutTruncated: stdout.total > int64(len(stdout.buf)),
		Stderr:          stderr.String(), ExitCode: int(exit), Duration: time.Since(start),
	}
	if runErr != nil {
		if errors.Is(runErr, ErrTimedOut) {
			res.ExitCode = ExitTimedOut
		}
		return res, runErr
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if info, err := d.cli.ContainerInspect(ictx, id); err == nil && info.State != nil && info.State.OOMKilled {
		return res, fmt.Errorf("%w: killed at the %s memory limit", ErrOutOfMemory, sizeMiB(lim.memory))
	}
	if exit == 137 {
		// SIGKILL without the engine's OOM flag: nobody else kills it but the
		// kernel's OOM killer inside its cgroup.
		return res, fmt.Errorf("%w: killed (SIGKILL), most likely at the %s memory limit", ErrOutOfMemory, sizeMiB(lim.memory))
	}
	return res, nil
}

// familyName is an image's name in the family ("aetherium-browser:latest" →
// "browser"), for the build hint.
func familyName(image string) string {
	n := path.Base(image)
	n, _, _ = strings.Cut(n, ":")
	n, _, _ = strings.Cut(n, "@")
	return strings.TrimPrefix(n, "aetherium-")
}

func sizeMiB(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
