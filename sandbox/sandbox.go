// Package sandbox runs run_shell commands for a project (a run): in a long-lived,
// locked-down Docker container per project by default, or directly on the host for
// development when explicitly allowed. Both implement Executor and pass the same
// conformance test.
package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Executor runs shell commands in a project's sandbox.
type Executor interface {
	// Exec runs req.Command with /bin/sh -c in the project's workspace and returns
	// its combined output (capped), exit code and timing. A command that exits
	// non-zero or times out is a Result, not an error: errors mean the command
	// could not be run at all.
	Exec(ctx context.Context, req Request) (Result, error)
	// Logs returns the project sandbox's own log (a container's stdout/stderr).
	// ErrNoLogs when the executor keeps none; ErrNoSandbox when the project has no
	// sandbox yet.
	Logs(ctx context.Context, project string, opts LogOptions) (string, error)
	// Release removes the project's sandbox (call it when the run ends). Idempotent.
	Release(ctx context.Context, project string) error
	// Kind is "docker" or "local".
	Kind() string
	// Close releases the executor's own resources (not the projects' sandboxes).
	Close() error
}

// Request is one command.
type Request struct {
	// Project identifies the sandbox (the run id): one container per project.
	Project string
	// Workspace is the absolute host path of the project's workspace; it is the
	// command's working directory (mounted at /workspace in a container).
	Workspace string
	// Dir is the working directory relative to the workspace ("" = the workspace).
	Dir string
	// Command is a shell command line for /bin/sh -c.
	Command string
	// Timeout bounds the command; 0 means Config.Timeout, and it is capped at
	// Config.MaxTimeout.
	Timeout time.Duration
	// Network asks for outbound network access (the team allows egress). It is
	// fixed when the project's container is created. With the Docker executor it
	// goes through the egress proxy only (SetEgress); without one it is refused.
	Network bool
	// Agent is the agent running the command: the egress proxy attributes the
	// sandbox's connections to it.
	Agent string
	// Allowlist is the team's allowed_domains, which the egress proxy applies.
	Allowlist []string
	// EgressPorts are destination ports the team allows beyond 80 and 443.
	EgressPorts []int
	// EgressDenyPrivate is the team's egress.private: deny, applied by the egress
	// proxy on top of the deployment's switch.
	EgressDenyPrivate bool
}

// Result is how a command ended.
type Result struct {
	// Output is stdout and stderr interleaved, capped at Config.MaxOutputBytes:
	// the head and the tail are kept around a truncation marker.
	Output string
	// ExitCode is the command's exit status; ExitTimedOut when it was killed at its
	// timeout; 128+n when a signal n ended it.
	ExitCode int
	// Duration is the wall time of the command.
	Duration time.Duration
	// OutputBytes is everything the command wrote, before the cap.
	OutputBytes int64
	// Truncated reports that Output is shorter than OutputBytes.
	Truncated bool
	// TimedOut reports that the timeout killed the command's process tree.
	TimedOut bool
	// Sandboxed is false for the local executor.
	Sandboxed bool
	// Executor is the Kind of the executor that ran the command.
	Executor string
	// Notice is a caveat to show the caller (the local executor is not a sandbox).
	Notice string
}

// ExitTimedOut is the exit code reported for a command killed at its timeout (the
// same convention as coreutils timeout(1)).
const ExitTimedOut = 124

// LogOptions bound a log read.
type LogOptions struct {
	// Tail is the number of last lines to return; 0 means all.
	Tail int
	// Since drops entries older than this instant (zero: no limit).
	Since time.Time
}

// Sentinel errors callers branch on.
var (
	// ErrLocalDisabled refuses the local executor unless config enables it.
	ErrLocalDisabled = errors.New("the local executor is disabled: it runs commands on the host and is not a sandbox (set allow_local: true for development only)")
	// ErrNoEngine means no Docker engine answered.
	ErrNoEngine = errors.New("docker engine unavailable")
	// ErrNoImage means the sandbox image has not been built.
	ErrNoImage = errors.New("sandbox image not found")
	// ErrNoLogs means the executor keeps no sandbox log.
	ErrNoLogs = errors.New("this executor keeps no sandbox logs")
	// ErrNoSandbox means the project has no sandbox (yet).
	ErrNoSandbox = errors.New("no sandbox for this project")
	// ErrInvalidRequest is a Request that cannot be run.
	ErrInvalidRequest = errors.New("invalid sandbox request")
)

// Config selects and bounds the executor.
type Config struct {
	// Kind is "docker", "local" or "auto": auto uses Docker when an engine answers
	// and falls back to local only when AllowLocal is set. Default "auto".
	Kind string `yaml:"kind"`
	// Timeout is a command's default time limit. Default 60s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTimeout caps the timeout a caller may ask for. Default 10m.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// MaxOutputBytes caps the output returned per command (head and tail kept).
	// Default 64 KiB.
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// AllowLocal permits the local executor, which is not a sandbox. Default false.
	AllowLocal bool `yaml:"allow_local"`
	// Docker configures the container executor.
	Docker DockerConfig `yaml:"docker"`
	// Local configures the host executor.
	Local LocalConfig `yaml:"local"`
	// OneShot caps the concurrent one-shot containers (RunOnce: toolchain,
	// browser, media) per run and per principal.
	OneShot OneShotConfig `yaml:"oneshot"`
	// EgressProxy configures the proxy that is an egress-enabled sandbox's only way
	// out, and its per-run networks (see docs/sandboxproxy.md).
	EgressProxy egressproxy.Config `yaml:"egress_proxy"`
}

// LocalConfig configures the local executor.
type LocalConfig struct {
	// Path is the PATH commands see (the rest of the environment is scrubbed).
	// Default /usr/local/bin:/usr/bin:/bin.
	Path string `yaml:"path"`
}

func (c *Config) defaults() {
	c.Kind = cmp.Or(c.Kind, "auto")
	c.Timeout = defaults.Positive(c.Timeout, 60*time.Second)
	c.MaxTimeout = defaults.Positive(c.MaxTimeout, 10*time.Minute)
	if c.Timeout > c.MaxTimeout {
		c.Timeout = c.MaxTimeout
	}
	c.MaxOutputBytes = defaults.Positive(c.MaxOutputBytes, 64<<10)
	c.Local.Path = cmp.Or(c.Local.Path, "/usr/local/bin:/usr/bin:/bin")
	c.Docker.defaults()
	c.OneShot = c.OneShot.WithDefaults()
	c.EgressProxy = c.EgressProxy.WithDefaults()
}

func (c *Config) timeout(req time.Duration) time.Duration {
	if req <= 0 {
		return c.Timeout
	}
	return min(req, c.MaxTimeout)
}

// New builds the configured executor. With Kind "auto" it prefers Docker and uses
// the local executor only when no engine answers and AllowLocal is set; a missing
// sandbox image is an error, never a silent fallback to the host.
func New(ctx context.Context, cfg Config, log *slog.Logger) (Executor, error) {
	cfg.defaults()
	switch cfg.Kind {
	case "docker":
		return NewDocker(ctx, cfg, log)
	case "local":
		return NewLocal(cfg)
	case "auto":
		d, err := NewDocker(ctx, cfg, log)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, ErrNoEngine) || !cfg.AllowLocal {
			return nil, err
		}
		if log != nil {
			log.Warn("no docker engine: run_shell uses the LOCAL executor, which is not a sandbox", "err", err)
		}
		return NewLocal(cfg)
	default:
		return nil, fmt.Errorf("sandbox kind %q: want docker, local or auto", cfg.Kind)
	}
}

// validate checks a request and returns its workspace made absolute and its
// working directory cleaned (relative, inside the workspace).
func (r Request) validate() (workspace, dir string, err error) {
	if r.Project == "" {
		return "", "", fmt.Errorf("%w: no project", ErrInvalidRequest)
	}
	if strings.TrimSpace(r.Command) == "" {
		return "", "", fmt.Errorf("%w: empty command", ErrInvalidRequest)
	}
	if strings.ContainsRune(r.Command, 0) {
		return "", "", fmt.Errorf("%w: command contains a NUL byte", ErrInvalidRequest)
	}
	if r.Workspace == "" {
		return "", "", fmt.Errorf("%w: no workspace", ErrInvalidRequest)
	}
	ws, err := filepath.Abs(r.Workspace)
	if err != nil {
		return "", "", fmt.Errorf("%w: workspace: %v", ErrInvalidRequest, err)
	}
	dir = path.Clean("/" + filepath.ToSlash(r.Dir))[1:]
	if strings.ContainsRune(r.Dir, 0) || (r.Dir != "" && (path.IsAbs(r.Dir) || strings.HasPrefix(path.Clean(r.Dir), ".."))) {
		return "", "", fmt.Errorf("%w: dir %q must be relative to the workspace", ErrInvalidRequest, r.Dir)
	}
	return ws, dir, nil
}
