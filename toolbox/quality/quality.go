// Package quality is the QualityTools server class: code analysis and
// validation. analyze_code and run_tests run the project's linters and test
// runners in one-shot containers of the toolchain image (sandbox.docker.image's
// "toolchain" purpose, sandbox/images/toolchain.packages): the workspace
// mounted read-only, no network, a non-root user, a read-only root, memory,
// CPU, pids and time limits. Nothing the agent wrote ever runs on the worker's
// host, linters included (eslint configs and pytest conftests are code).
package quality

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Defaults of Config.
const (
	DefaultAnalyzeTimeout = 3 * time.Minute
	DefaultTestTimeout    = 5 * time.Minute
	// DefaultMaxTimeout stays under the sandbox's default max_timeout (10m) with
	// room for the container's start and the report, so the runner is
	// interrupted (and reports what ran) before the container is killed.
	DefaultMaxTimeout  = 9 * time.Minute
	DefaultMaxFindings = 300
	DefaultMaxFiles    = 1000
	DefaultMemoryBytes = 1 << 30
	DefaultCPUs        = 1
	DefaultPidsLimit   = 256
	// DefaultTmpfsBytes holds Go's build cache (a cold `go test` of a small
	// module writes about 40 MB of it) and the runners' temporary files.
	DefaultTmpfsBytes = 512 << 20
	DefaultTailBytes  = 4 << 10
)

// Config bounds the quality tools (config key `quality`).
type Config struct {
	// AnalyzeTimeout bounds one linter run. Default DefaultAnalyzeTimeout.
	AnalyzeTimeout time.Duration `yaml:"analyze_timeout"`
	// TestTimeout is run_tests' timeout when the call names none. Default
	// DefaultTestTimeout.
	TestTimeout time.Duration `yaml:"test_timeout"`
	// MaxTimeout caps the timeout a call may ask for. Default DefaultMaxTimeout;
	// keep it 30 s under sandbox.max_timeout.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// MaxFindings caps the findings analyze_code returns (the counts stay whole).
	MaxFindings int `yaml:"max_findings"`
	// MaxFiles caps the files one analyze_code call lints.
	MaxFiles int `yaml:"max_files"`
	// MemoryBytes, CPUs, PidsLimit and TmpfsBytes bound each container.
	MemoryBytes int64   `yaml:"memory_bytes"`
	CPUs        float64 `yaml:"cpus"`
	PidsLimit   int64   `yaml:"pids_limit"`
	TmpfsBytes  int64   `yaml:"tmpfs_bytes"`
	// TailBytes is how much of a runner's output run_tests returns (its tail).
	TailBytes int `yaml:"tail_bytes"`
	// Review bounds code_review and names its model (review_model,
	// review_max_bytes, review_max_files in this section).
	Review ReviewConfig `yaml:",inline"`
	// WebApp bounds validate_web_app and capture_api_schema (webapp_* keys in
	// this section).
	WebApp WebAppConfig `yaml:",inline"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.AnalyzeTimeout = defaults.Positive(c.AnalyzeTimeout, DefaultAnalyzeTimeout)
	c.TestTimeout = defaults.Positive(c.TestTimeout, DefaultTestTimeout)
	c.MaxTimeout = defaults.Positive(c.MaxTimeout, DefaultMaxTimeout)
	c.MaxFindings = defaults.Positive(c.MaxFindings, DefaultMaxFindings)
	c.MaxFiles = defaults.Positive(c.MaxFiles, DefaultMaxFiles)
	c.MemoryBytes = defaults.Positive(c.MemoryBytes, DefaultMemoryBytes)
	c.CPUs = defaults.Positive(c.CPUs, DefaultCPUs)
	c.PidsLimit = defaults.Positive(c.PidsLimit, DefaultPidsLimit)
	c.TmpfsBytes = defaults.Positive(c.TmpfsBytes, DefaultTmpfsBytes)
	c.TailBytes = defaults.Positive(c.TailBytes, DefaultTailBytes)
	return c
}

// Validate checks a config after WithDefaults.
func (c Config) Validate() error {
	if c.TestTimeout > c.MaxTimeout || c.AnalyzeTimeout > c.MaxTimeout {
		return fmt.Errorf("quality: test_timeout %s and analyze_timeout %s must not exceed max_timeout %s", c.TestTimeout, c.AnalyzeTimeout, c.MaxTimeout)
	}
	if c.TmpfsBytes > c.MemoryBytes {
		return fmt.Errorf("quality: tmpfs_bytes %d exceeds memory_bytes %d (the tmpfs counts against the memory)", c.TmpfsBytes, c.MemoryBytes)
	}
	return nil
}

// Runner runs one command in a fresh container of an image of the sandbox
// family and names the image of a purpose (sandbox.Docker).
type Runner interface {
	RunOnce(ctx context.Context, job sandbox.OneShot) (sandbox.OneShotResult, error)
	ImageFor(purpose string) string
}

// Deps are what the quality tools need.
type Deps struct {
	// Runner runs the linters and test runners; nil registers the tools but they
	// refuse to run (never on the host).
	Runner Runner
}

type server struct {
	run Runner
	cfg Config
}

// Register adds analyze_code and run_tests.
func Register(reg *tools.Registry, d Deps, cfg Config) {
	s := &server{run: d.Runner, cfg: cfg.WithDefaults()}
	tools.Register(reg, "analyze_code", "Static analysis of a workspace file or directory by its language's linter (flake8 or pylint, eslint, shellcheck, go vet and gofmt), run in the toolchain sandbox. Reads the files itself: do not read_file first. Returns findings {file, line, column, rule, severity, message} and counts per severity.",
		s.analyze, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("quality"))
	tools.Register(reg, "run_tests", "Run the project's test suite (pytest, go test, jest or node --test, detected from the directory) in the toolchain sandbox without network; returns pass/fail/skip counts, failures and the output's tail.",
		s.runTests, tools.Reads(tools.Private), tools.InGroup("quality"))
}

// ErrNoSandbox is a quality tool called without a container runner.
var ErrNoSandbox = errors.New("no container sandbox is configured (the quality tools run linters and tests only in the toolchain image, never on the host)")

// target is an agent's path resolved in the workspace.
type target struct {
	root string // the workspace, symlinks resolved
	rel  string // slash-separated, "." for the root
	abs  string
	dir  bool
}

func resolve(call tools.Call, p string) (target, error) {
	ws, err := call.Workspace()
	if err != nil {
		return target{}, err
	}
	if p == "" {
		p = "."
	}
	rel, err := workspace.Clean(p)
	if err != nil {
		return target{}, err
	}
	abs, err := workspace.Resolve(ws, rel)
	if err != nil {
		return target{}, err
	}
	root, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return target{}, fmt.Errorf("workspace root: %w", err)
	}
	r, err := openRoot(root)
	if err != nil {
		return target{}, fmt.Errorf("workspace root: %w", err)
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return target{}, fmt.Errorf("%s: %w", p, err)
	}
	for _, part := range strings.Split(rel, "/") {
		if strings.HasPrefix(part, ".") && part != "." {
			return target{}, fmt.Errorf("%s is under a hidden directory (%s), which the quality tools skip", p, part)
		}
	}
	return target{root: root, rel: rel, abs: abs, dir: fi.IsDir()}, nil
}

// inContainer is rel's path in the container.
func inContainer(rel string) string { return path.Join(wsMount, rel) }

const wsMount = "/workspace"

// wrapper runs a command under `timeout` (SIGINT first, so pytest and go test
// write what ran so far, SIGKILL 5 s later; to the whole process group) and
// prints its exit status, stderr's tail, an optional report file and stdout,
// each section behind a line with a nonce the command cannot predict.
// $1 nonce, $2 seconds, $3 report file or "", the rest is the command.
// AETH_WRITE_PATH/AETH_WRITE_CONTENT, when set, write a file first (eslint's
// default config).
const wrapper = `n=$1; t=$2; rep=$3; shift 3
if [ -n "$AETH_WRITE_PATH" ]; then printf '%s' "$AETH_WRITE_CONTENT" >"$AETH_WRITE_PATH"; fi
timeout -s INT -k 5 "$t" "$@" >/tmp/aeth.stdout 2>/tmp/aeth.stderr </dev/null
rc=$?
printf '%s rc %d\n' "$n" "$rc"
printf '%s stderr\n' "$n"; tail -c 65536 /tmp/aeth.stderr
printf '\n%s report\n' "$n"; if [ -n "$rep" ] && [ -f "$rep" ]; then head -c 4194304 "$rep"; fi
printf '\n%s stdout\n' "$n"; head -c 6291456 /tmp/aeth.stdout
exit 0`

// ran is one wrapped command's sections.
type ran struct {
	rc                     int
	stdout, stderr, report string
	timedOut               bool
	duration               time.Duration
}

// toolEnv is every run's environment: Go with no downloads and its caches on
// the tmpfs, Python without bytecode or pytest caches in the read-only workspace.
var toolEnv = []string{
	"GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off", "GONOSUMDB=*",
	"GOCACHE=/tmp/go-cache", "GOPATH=/tmp/go", "GOTMPDIR=/tmp", "CGO_ENABLED=0", "GOTELEMETRY=off",
	"PYTHONDONTWRITEBYTECODE=1", "PYTHONPYCACHEPREFIX=/tmp/pycache", "PYLINTHOME=/tmp/pylint",
	"XDG_CACHE_HOME=/tmp/cache", "npm_config_cache=/tmp/npm", "CI=true", "NO_COLOR=1", "FORCE_COLOR=0",
	"PATH=/usr/local/bin:/usr/bin:/bin",
}

// exec runs cmd in the toolchain image with the workspace at /workspace
// (read-only, .aetherium hidden), in directory wd (a workspace-relative path).
func (s *server) exec(ctx context.Context, sess *tools.Session, t target, wd string, cmd []string, report string, timeout time.Duration, env ...string) (ran, error) {
	if s.run == nil {
		return ran{}, ErrNoSandbox
	}
	image := s.run.ImageFor(sandbox.PurposeToolchain)
	if image == "" {
		image = sandbox.DefaultToolchainImage
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	nonce := "@@aetherium-" + hex.EncodeToString(b)
	secs := int(timeout.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	job := sandbox.OneShot{
		Image:   image,
		Cmd:     append([]string{"/bin/sh", "-c", wrapper, "quality", nonce, fmt.Sprint(secs), report}, cmd...),
		Project: sess.RunID,
		// The workspace root (the worker's own directory, not a path the agent
		// names) read-only: symlinks inside resolve in the container.
		Mounts:      []sandbox.Bind{{Source: t.root, Target: wsMount}},
		Env:         append(append([]string(nil), toolEnv...), env...),
		WorkingDir:  inContainer(wd),
		Timeout:     timeout + 30*time.Second,
		MemoryBytes: s.cfg.MemoryBytes, CPUs: s.cfg.CPUs, PidsLimit: s.cfg.PidsLimit, TmpfsBytes: s.cfg.TmpfsBytes,
		ExecTmp:        true,
		MaxStdoutBytes: 11 << 20,
	}
	if fi, err := os.Lstat(filepath.Join(t.root, workspace.InternalDir)); err == nil && fi.IsDir() {
		job.Hide = []string{inContainer(workspace.InternalDir)}
	}
	res, err := s.run.RunOnce(ctx, job)
	out := parseSections(res.Stdout, nonce)
	out.duration = res.Duration
	switch {
	case errors.Is(err, sandbox.ErrNoImage):
		return out, fmt.Errorf("the toolchain image is missing: %w", err)
	case errors.Is(err, sandbox.ErrTimedOut):
		out.timedOut = true
		return out, nil
	case err != nil:
		return out, err
	}
	// timeout(1) exits 124 when it had to signal the command.
	out.timedOut = out.rc == 124 || out.rc == 137 && res.Duration >= timeout
	return out, nil
}

func parseSections(s, nonce string) ran {
	out := ran{rc: -1}
	at := func(tag string, from int) (int, int) {
		if from < 0 {
			return -1, -1
		}
		i := strings.Index(s[from:], nonce+" "+tag+"\n")
		if i < 0 {
			return -1, -1
		}
		return from + i, from + i + len(nonce) + len(tag) + 2
	}
	if i := strings.Index(s, nonce+" rc "); i >= 0 {
		_, _ = fmt.Sscanf(s[i+len(nonce)+1:], "rc %d", &out.rc)
	}
	_, errAt := at("stderr", 0)
	repMark, repAt := at("report", errAt)
	outMark, outAt := at("stdout", repAt)
	section := func(from, to int) string {
		if from < 0 || to < from {
			return ""
		}
		return strings.TrimRight(s[from:to], "\n")
	}
	out.stderr = section(errAt, repMark)
	out.report = section(repAt, outMark)
	if outAt >= 0 {
		out.stdout = s[outAt:]
	}
	return out
}

// bound returns d, the default when zero, capped at max.
func bound(sec int, def, max time.Duration) (time.Duration, error) {
	if sec < 0 {
		return 0, fmt.Errorf("timeout %d: want seconds > 0", sec)
	}
	if sec == 0 {
		return def, nil
	}
	d := time.Duration(sec) * time.Second
	if d > max {
		return 0, fmt.Errorf("timeout %ds is over the %s limit", sec, max)
	}
	return d, nil
}

// openRoot opens the workspace for the quality tools' host-side reads: through
// confine, so no symlink leads out, a FIFO or socket is refused instead of
// blocking the open, and no file over 64 MiB is opened (the tools read only
// heads and small project files on the host; linters run in the sandbox).
func openRoot(dir string) (*confine.Root, error) {
	return confine.OpenRoot(dir, confine.Config{MaxBytes: confine.DefaultMaxBytes})
}

// readSmall reads a small project file (package.json) through the workspace
// root, refusing one over 1 MiB: an agent's file is never read whole into the
// worker's memory.
func readSmall(r *confine.Root, name string) ([]byte, error) {
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, fmt.Errorf("%s is over 1 MiB", name)
	}
	return b, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8("…"+s[len(s)-n:], "")
}
