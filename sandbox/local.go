package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// LocalNotice is the caveat every local result carries.
const LocalNotice = "local executor: this command ran directly on the host as the worker's user; it is NOT a sandbox"

// Local runs commands on the host in the workspace directory, for development
// without Docker. It bounds time and kills the whole process group, and it scrubs
// the environment so the worker's credentials do not leak into commands, but it
// confines nothing else: it is refused unless Config.AllowLocal is set.
type Local struct {
	cfg Config
}

// NewLocal returns the local executor, or ErrLocalDisabled.
func NewLocal(cfg Config) (*Local, error) {
	cfg.defaults()
	if !cfg.AllowLocal {
		return nil, ErrLocalDisabled
	}
	return &Local{cfg: cfg}, nil
}

// Kind implements Executor.
func (l *Local) Kind() string { return "local" }

// Close implements Executor.
func (l *Local) Close() error { return nil }

// Release implements Executor: a local project holds no resources.
func (l *Local) Release(context.Context, string) error { return nil }

// Logs implements Executor: there is no container log.
func (l *Local) Logs(context.Context, string, LogOptions) (string, error) {
	return "", fmt.Errorf("%w (local executor: no container)", ErrNoLogs)
}

// Exec implements Executor.
func (l *Local) Exec(ctx context.Context, req Request) (res Result, err error) {
	ctx, span := startExec(ctx, l.Kind(), req)
	defer func() { endExec(span, res, err) }()
	ws, dir, err := req.validate()
	if err != nil {
		return Result{}, err
	}
	wd := filepath.Join(ws, filepath.FromSlash(dir))
	if fi, err := os.Stat(wd); err != nil || !fi.IsDir() {
		return Result{}, fmt.Errorf("%w: working directory %q does not exist", ErrInvalidRequest, dir)
	}
	timeout := l.cfg.timeout(req.Timeout)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	out := NewCapture(l.cfg.MaxOutputBytes)
	cmd := exec.CommandContext(tctx, "/bin/sh", "-c", req.Command)
	cmd.Dir = wd
	cmd.Env = []string{"PATH=" + l.cfg.Local.Path, "HOME=" + ws, "LANG=C.UTF-8", "TMPDIR=" + os.TempDir(), "PWD=" + wd}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group, so the timeout kills everything the command started, not
	// just the shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A process that left the group but kept the output pipe must not hold us
	// past the timeout.
	cmd.WaitDelay = 2 * time.Second

	start := time.Now()
	err = cmd.Run()
	res = Result{
		Duration: time.Since(start), Sandboxed: false, Executor: l.Kind(), Notice: LocalNotice,
	}
	timedOut := errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("local exec: %w", ctx.Err())
	}
	var exitErr *exec.ExitError
	switch {
	case timedOut:
		res.TimedOut, res.ExitCode = true, ExitTimedOut
	case err == nil:
		res.ExitCode = 0
	case errors.As(err, &exitErr):
		res.ExitCode = exitCode(exitErr.ProcessState)
	case errors.Is(err, exec.ErrWaitDelay):
		res.ExitCode = exitCode(cmd.ProcessState)
	default:
		return Result{}, fmt.Errorf("local exec: %w", err)
	}
	res.Output, res.OutputBytes, res.Truncated = out.String(), out.Total(), out.Truncated()
	return res, nil
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
