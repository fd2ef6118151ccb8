package device

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scripts of device/steam-frame/ this package runs (Validate checks them).
const (
	scriptStatus    = "status.sh"
	scriptContainer = "container-start.sh"
	scriptConnect   = "adb-connect.sh"
	scriptInstall   = "install.sh"
	scriptPkgInfo   = "pkginfo.sh"
	scriptLaunch    = "launch.sh"
	scriptRunning   = "running.sh"
	scriptStop      = "stop.sh"
	scriptCapture   = "capture.sh"
	scriptLogcat    = "logcat.sh"
	scriptSaves     = "saves.sh"
	scriptPerf      = "perf.sh"
)

var scripts = []string{scriptStatus, scriptContainer, scriptConnect, scriptInstall, scriptPkgInfo, scriptLaunch,
	scriptRunning, scriptStop, scriptCapture, scriptLogcat, scriptSaves, scriptPerf}

// ScriptError is a script that exited non-zero.
type ScriptError struct {
	Script string
	Code   int
	Stderr string
}

func (e *ScriptError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" {
		msg = "no message"
	}
	return fmt.Sprintf("%s exited %d: %s", e.Script, e.Code, msg)
}

// runner executes the scripts with argv only, a fixed environment and a process
// group it can kill whole (adb and ssh children included).
type runner struct {
	dir string
	env []string
}

func newRunner(c Config) runner {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"FRAME_HOST=" + c.Host,
		"FRAME_USER=" + c.User,
		"FRAME_SSH_PORT=" + strconv.Itoa(c.SSHPort),
		"FRAME_ADB_PORT=" + strconv.Itoa(c.ADBPort),
		"FRAME_KEY=" + c.KeyPath,
		"LC_ALL=C",
	}
	if c.SimScenario != "" {
		path = c.SimBin + string(os.PathListSeparator) + path
		env = append(env, "FRAME_SIM_SCENARIO="+c.SimScenario, "FRAME_SIM_STATE="+c.SimState)
	}
	env = append(env, "PATH="+path)
	if home, ok := os.LookupEnv("HOME"); ok {
		// ssh finds known_hosts and its identities under HOME; adb its server key.
		env = append(env, "HOME="+home)
	}
	return runner{dir: c.ScriptsDir, env: env}
}

// run executes one script and returns its stdout (at most 1 MiB).
func (r runner) run(ctx context.Context, timeout time.Duration, script string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.dir, script), args...)
	cmd.Env = r.env
	cmd.Dir = r.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild that keeps the pipes open must not hang the call.
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr capped
	stdout.max, stderr.max = 1<<20, 16<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s: %w", script, cause)
		}
		return nil, fmt.Errorf("%s: timed out after %s", script, timeout)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ScriptError{Script: script, Code: ee.ExitCode(), Stderr: tail(stderr.String(), 2000)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", script, err)
	}
	return stdout.Bytes(), nil
}

// kv parses the key=value lines the scripts print.
func kv(out []byte) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			m[k] = v
		}
	}
	return m
}

type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
