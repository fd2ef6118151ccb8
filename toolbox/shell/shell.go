// Package shell is the ShellTools server class: run_shell runs a command in the
// project's sandbox (sandbox.Executor) and records every invocation in command_log;
// read_logs reads the sandbox container's log, a log file in the workspace, or the
// systemd journal of an allowed unit. Both are Elevated. The destructive-command
// approval gate runs before run_shell is dispatched (package security).
package shell

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	cmdline "github.com/aetherium-engine/aetherium/egress/shell"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Config bounds the shell tools.
type Config struct {
	// MaxCommandBytes caps a command line. Default 16 KiB.
	MaxCommandBytes int
	// MaxLogBytes caps what read_logs returns. Default 64 KiB.
	MaxLogBytes int
	// MaxLogLines caps read_logs' tail. Default 2000.
	MaxLogLines int
	// JournalUnits are the systemd units read_logs may read from the journal; empty
	// disables the journal source (the host journal is not the agents' by default).
	JournalUnits []string
	// Journalctl is the journalctl binary. Default "journalctl" on PATH.
	Journalctl string
}

func (c *Config) defaults() {
	c.MaxCommandBytes = defaults.Positive(c.MaxCommandBytes, 16<<10)
	c.MaxLogBytes = defaults.Positive(c.MaxLogBytes, 64<<10)
	c.MaxLogLines = defaults.Positive(c.MaxLogLines, 2000)
	c.Journalctl = cmp.Or(c.Journalctl, "journalctl")
}

// CommandLog records run_shell invocations (store.Store implements it).
type CommandLog interface {
	InsertCommand(ctx context.Context, c store.Command) (int64, error)
}

// Deps are the shell tools' collaborators. Either may be nil for a catalog-only
// registry: the tools then fail at call time, saying what is missing.
type Deps struct {
	Executor sandbox.Executor
	Commands CommandLog
}

// RunArgs are run_shell's arguments.
type RunArgs struct {
	Command string `json:"command" jsonschema:"description=Shell command line run with /bin/sh -c in the workspace (the sandbox sees it at /workspace)"`
	Workdir string `json:"workdir,omitempty" jsonschema:"description=Working directory relative to the workspace (default: the workspace)"`
	Timeout int    `json:"timeout,omitempty" jsonschema:"description=Seconds before the command and everything it started is killed (default and maximum set by the deployment),minimum=1"`
}

// LogArgs are read_logs' arguments.
type LogArgs struct {
	Source string `json:"source" jsonschema:"enum=docker,enum=file,enum=journal,description=docker: the sandbox container's log (what commands append to /tmp/console.log); file: a log file in the workspace; journal: the systemd journal of an allowed unit"`
	Path   string `json:"path,omitempty" jsonschema:"description=Log file relative to the workspace (source file)"`
	Unit   string `json:"unit,omitempty" jsonschema:"description=systemd unit (source journal)"`
	Tail   int    `json:"tail,omitempty" jsonschema:"description=Return only the last N lines (default 100),minimum=1"`
	Since  string `json:"since,omitempty" jsonschema:"description=Only entries newer than this: a duration back from now (15m or 2h) or an RFC 3339 time (docker and journal)"`
}

// Register adds run_shell and read_logs.
func Register(reg *tools.Registry, d Deps, cfg Config) {
	cfg.defaults()
	s := &server{deps: d, cfg: cfg}
	tools.Register(reg, "run_shell", "Execute a shell command in the project's sandbox container, in the workspace. "+
		"Returns its output (stdout and stderr, long output keeps head and tail) and exit code. "+
		"To find files or text prefer search_files; to read or change files prefer read_file/edit_file.",
		s.run, tools.Reads(tools.Private), tools.InGroup("shell"), tools.WithTier(tools.Elevated), tools.Escalates(Destructive), tools.OutboundWhen(HasNetwork))
	tools.Register(reg, "read_logs", "Read logs: the sandbox container's log (source docker), a log file in the workspace (source file), or the systemd journal of an allowed unit (source journal); tail and since limit the output.",
		s.logs, tools.ReadOnly(), tools.Idempotent(), tools.Reads(tools.Private), tools.InGroup("shell"), tools.WithTier(tools.Elevated))
}

type server struct {
	deps Deps
	cfg  Config
}

func (s *server) run(ctx context.Context, call tools.Call, a RunArgs) (tools.Result, error) {
	if _, err := call.RunWorkspace(); err != nil {
		return tools.Result{}, fmt.Errorf("run_shell: %w", err)
	}
	sess := call.Session
	if s.deps.Executor == nil {
		return tools.Result{}, errors.New("run_shell: no command executor is configured (sandbox)")
	}
	if s.deps.Commands == nil {
		return tools.Result{}, errors.New("run_shell: no command log is configured; commands are not run unrecorded")
	}
	if strings.TrimSpace(a.Command) == "" {
		return tools.Result{}, errors.New("run_shell: command is empty")
	}
	if len(a.Command) > s.cfg.MaxCommandBytes {
		return tools.Result{}, fmt.Errorf("run_shell: command is %d bytes, the limit is %d (put long scripts in a file with write_file and run that)", len(a.Command), s.cfg.MaxCommandBytes)
	}
	dir := ""
	if a.Workdir != "" {
		rel, err := workspace.Clean(a.Workdir)
		if err != nil {
			return tools.Result{}, fmt.Errorf("run_shell: workdir: %w", err)
		}
		if rel != "." {
			dir = rel
		}
	}
	if a.Timeout < 0 {
		return tools.Result{}, errors.New("run_shell: timeout must be positive")
	}
	req := sandbox.Request{
		Project: sess.RunID, Workspace: sess.Workspace, Dir: dir, Command: a.Command,
		Timeout: time.Duration(a.Timeout) * time.Second,
		// The team's egress allowlist decides whether the container gets a network
		// at all; the egress proxy, its only way out, applies the allowlist.
		Network: HasNetwork(sess),
		Agent:   sess.Agent, Allowlist: sess.AllowedDomains, EgressPorts: sess.EgressPorts,
		EgressDenyPrivate: sess.EgressDenyPrivate,
	}
	res, execErr := s.deps.Executor.Exec(ctx, req)
	row := store.Command{RunID: sess.RunID, Agent: sess.Agent, Command: a.Command, ExitCode: -1}
	if execErr == nil {
		row.ExitCode, row.DurationMS = res.ExitCode, res.Duration.Milliseconds()
		row.OutputBytes, row.Truncated, row.TimedOut = res.OutputBytes, res.Truncated, res.TimedOut
	}
	// Recorded even when the caller has gone: the command may have run.
	if _, err := s.deps.Commands.InsertCommand(context.WithoutCancel(ctx), row); err != nil {
		if execErr != nil {
			return tools.Result{}, fmt.Errorf("run_shell: %w (and recording it failed: %v)", execErr, err)
		}
		return tools.Result{}, fmt.Errorf("run_shell: the command ran (exit %d) but recording it in command_log failed: %w", res.ExitCode, err)
	}
	if execErr != nil {
		return tools.Result{}, fmt.Errorf("run_shell: %w", execErr)
	}
	// A command that failed on a full workspace is an error the model cannot miss,
	// with the output it needs to see what failed.
	if qe, ok := wsquota.ExplainCommand(sess.Workspace, res.Output, res.ExitCode); ok {
		return tools.Result{}, fmt.Errorf("run_shell: %w: the command failed with the workspace full (delete files in it to make room); its output:\n%s", qe, format(res))
	}
	return tools.Result{Content: format(res)}, nil
}

// format renders a result for the model: the output, then one status line.
func format(r sandbox.Result) string {
	var b strings.Builder
	b.WriteString(r.Output)
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		b.WriteByte('\n')
	}
	switch {
	case r.TimedOut:
		fmt.Fprintf(&b, "[timed out after %s: the command and everything it started were killed; exit %d]", r.Duration.Round(time.Millisecond), r.ExitCode)
	default:
		fmt.Fprintf(&b, "[exit %d, %s", r.ExitCode, r.Duration.Round(time.Millisecond))
		if r.Truncated {
			fmt.Fprintf(&b, ", output truncated: %d bytes in all", r.OutputBytes)
		}
		b.WriteString("]")
	}
	if r.Notice != "" {
		b.WriteString("\n[" + r.Notice + "]")
	}
	return b.String()
}

var unitRE = regexp.MustCompile(`^[A-Za-z0-9@._:\\-]+$`)

func (s *server) logs(ctx context.Context, call tools.Call, a LogArgs) (tools.Result, error) {
	sess := call.Session
	if sess == nil {
		return tools.Result{}, errors.New("read_logs: no session")
	}
	tail := a.Tail
	if tail <= 0 {
		tail = 100
	}
	if tail > s.cfg.MaxLogLines {
		tail = s.cfg.MaxLogLines
	}
	since, err := parseSince(a.Since, time.Now())
	if err != nil {
		return tools.Result{}, fmt.Errorf("read_logs: %w", err)
	}
	var out string
	switch a.Source {
	case "docker":
		if s.deps.Executor == nil {
			return tools.Result{}, errors.New("read_logs: no sandbox executor is configured")
		}
		if sess.RunID == "" {
			return tools.Result{}, errors.New("read_logs: no run for this session")
		}
		out, err = s.deps.Executor.Logs(ctx, sess.RunID, sandbox.LogOptions{Tail: tail, Since: since})
	case "file":
		out, err = s.fileLog(sess, a.Path, tail)
	case "journal":
		out, err = s.journal(ctx, a.Unit, tail, since)
	default:
		return tools.Result{}, fmt.Errorf("read_logs: source %q: want docker, file or journal", a.Source)
	}
	if err != nil {
		return tools.Result{}, fmt.Errorf("read_logs: %w", err)
	}
	if out == "" {
		return tools.Text("(the log is empty)"), nil
	}
	return tools.Result{Content: capText(out, s.cfg.MaxLogBytes)}, nil
}

// fileLog returns the last tail lines of a workspace file, reading at most the
// last MaxLogBytes*4 of it (logs grow; the tail is what matters).
func (s *server) fileLog(sess *tools.Session, p string, tail int) (string, error) {
	if sess.Workspace == "" {
		return "", errors.New("no workspace for this session")
	}
	rel, err := workspace.Clean(p)
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(sess.Workspace)
	if err != nil {
		return "", fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	fi, err := root.Stat(rel)
	if err != nil {
		if strings.Contains(err.Error(), "path escapes") {
			return "", fmt.Errorf("%w: %q resolves outside the workspace", workspace.ErrOutside, p)
		}
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s", workspace.ErrNotRegular, rel)
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s", workspace.ErrNotRegular, rel)
	}
	window := int64(s.cfg.MaxLogBytes) * 4
	if fi.Size() > window {
		if _, err := f.Seek(fi.Size()-window, io.SeekStart); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, window))
	if err != nil {
		return "", err
	}
	if fi.Size() > window {
		// Drop the partial first line of the window.
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return lastLines(string(b), tail), nil
}

func (s *server) journal(ctx context.Context, unit string, tail int, since time.Time) (string, error) {
	if len(s.cfg.JournalUnits) == 0 {
		return "", errors.New("the journal source is disabled by configuration (no units are allowed)")
	}
	if unit == "" || !unitRE.MatchString(unit) {
		return "", fmt.Errorf("unit %q is not a valid systemd unit name", unit)
	}
	if !slices.Contains(s.cfg.JournalUnits, unit) {
		return "", fmt.Errorf("unit %s is not one of the allowed units: %s", unit, strings.Join(s.cfg.JournalUnits, ", "))
	}
	bin, err := exec.LookPath(s.cfg.Journalctl)
	if err != nil {
		return "", errors.New("the systemd journal is not available on this host (no journalctl)")
	}
	args := []string{"--no-pager", "--quiet", "--output=short-iso", "--unit=" + unit, "--lines=" + strconv.Itoa(tail)}
	if !since.IsZero() {
		args = append(args, "--since=@"+strconv.FormatInt(since.Unix(), 10))
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "SYSTEMD_PAGER="}
	out := sandbox.NewCapture(s.cfg.MaxLogBytes)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("journalctl: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// parseSince reads "15m" (back from now) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want a duration such as 15m or an RFC 3339 time", s)
}

func lastLines(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), len(s)+1)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// capText keeps the end of a log (the newest part) within limit bytes.
func capText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := len(s) - limit
	if i := strings.IndexByte(s[cut:], '\n'); i >= 0 {
		cut += i + 1
	}
	return fmt.Sprintf("[... %d older bytes omitted ...]\n", cut) + strings.ToValidUTF8(s[cut:], "\uFFFD")
}

// HasNetwork reports whether a session's sandbox has a network: the team's
// egress allowlist names a destination (the egress proxy, its only way out,
// applies it). run_shell's arguments then pass the DLP layer
// (tools.OutboundWhen).
func HasNetwork(s *tools.Session) bool { return len(s.AllowedDomains) > 0 }

// Destructive is run_shell's escalation (tools.Escalates): a command line the
// shell parse finds destructive waits for a human whatever the tool's tier.
func Destructive(args json.RawMessage) string {
	var a struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(args, &a)
	if ok, pattern := cmdline.Destructive(a.Command); ok {
		return "destructive command (" + pattern + ")"
	}
	return ""
}
