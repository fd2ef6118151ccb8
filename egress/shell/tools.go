package shell

import (
	"path"
	"regexp"
	"strings"
)

// workspaceDir is where run_shell's sandbox mounts the workspace and starts
// its commands (sandbox/docker.go: the /workspace bind mount and WorkingDir).
// The check has no file system to look at: it judges paths against this.
const workspaceDir = "/workspace"

const reasonMv = "mv out of or over the workspace"

// outsideWorkspace reports whether p names something outside the workspace:
// an absolute path elsewhere, ~, a relative path escaping through .., or any
// relative path once a cd has left the workspace.
func (c *checker) outsideWorkspace(p string) bool {
	switch {
	case p == "":
		return false
	case strings.HasPrefix(p, "~"):
		return true
	case strings.HasPrefix(p, "/"):
		cl := path.Clean(p)
		return cl != workspaceDir && !strings.HasPrefix(cl, workspaceDir+"/")
	}
	if c.cwdOutside {
		return true
	}
	cl := path.Clean(p)
	return cl == ".." || strings.HasPrefix(cl, "../")
}

// cd records a change of directory that leaves the workspace (or cannot be
// read): relative paths after it are no longer workspace paths.
func (c *checker) cd(rest []arg) {
	_, ops, _ := parseOpts(rest, nil, false)
	if len(ops) == 0 || !ops[0].lit || ops[0].glob || ops[0].val == "-" || c.outsideWorkspace(ops[0].val) {
		c.cwdOutside = true
	}
}

// mvWorkspace escalates mv whose sources or destination are outside the
// workspace, that moves the workspace itself, or that replaces a
// destination directory (-T, --exchange) rather than moving into it.
func (c *checker) mvWorkspace(opts []opt, ops []arg) {
	if hasOpt(opts, "-T", "--no-target-directory", "--exchange") {
		c.escalate(reasonMv)
		return
	}
	srcs := ops
	for _, o := range opts {
		if o.name == "-t" || o.name == "--target-directory" {
			if c.outsideWorkspace(o.val.val) {
				c.escalate(reasonMv)
				return
			}
			srcs = nil
		}
	}
	if srcs != nil && len(ops) > 0 {
		if c.outsideWorkspace(ops[len(ops)-1].val) {
			c.escalate(reasonMv)
			return
		}
		srcs = ops[:len(ops)-1]
	} else {
		srcs = ops
	}
	for _, s := range srcs {
		cl := path.Clean(s.val)
		if c.outsideWorkspace(s.val) || cl == "." || cl == workspaceDir || cl == "/" {
			c.escalate(reasonMv)
			return
		}
	}
}

// unlink removes the one file it names, like rm without options: a word the
// check cannot see (xargs input, find's {}, $F) or a glob escalates.
func (c *checker) unlink(rest []arg) {
	for _, a := range rest {
		switch {
		case !a.lit:
			c.escalate("unlink with arguments that are not literals")
			return
		case a.glob:
			c.escalate("unlink with a glob")
			return
		}
	}
}

// truncate escalates unless it only grows files it names literally
// (-s +N, -s >N): any other size may cut a file short, and -r copies a size.
func (c *checker) truncate(rest []arg) {
	opts, ops, _ := parseOpts(rest, truncateArgs, true)
	for _, o := range opts {
		switch {
		case o.name == "-r" || longPrefix(o, "reference", 1):
			c.escalate("truncate cuts files short")
			return
		case o.name == "-s" || longPrefix(o, "size", 1):
			if !o.val.lit || !(strings.HasPrefix(o.val.val, "+") || strings.HasPrefix(o.val.val, ">")) {
				c.escalate("truncate cuts files short")
				return
			}
		}
	}
	for _, a := range ops {
		if !a.lit || a.glob {
			c.escalate("truncate with arguments that are not literals")
			return
		}
	}
}

// tar escalates --remove-files and --delete (GNU getopt abbreviations too),
// judges the commands it runs (--to-command, -I/--use-compress-program,
// --checkpoint-action=exec=, -F/--info-script, --rsh-command) as shell code,
// and judges the -C directory of an extraction as a write target.
func (c *checker) tar(rest []arg, depth int) {
	if anyNotLit(rest) {
		c.escalate("tar with arguments that are not literals")
		return
	}
	runs := map[string]bool{"to-command": true, "use-compress-program": true, "info-script": true,
		"new-volume-script": true, "rsh-command": true, "rmt-command": true, "checkpoint-action": true}
	withVal := "fCIbgHKLNTVXF"
	extract := false
	var dir *arg
	var pending []byte // old-style and cluster letters waiting for a value
	value := func(letter byte, v arg) {
		switch letter {
		case 'C':
			dir = &v
		case 'I', 'F':
			c.nested(v, depth)
		}
	}
	for i := 0; i < len(rest); i++ {
		v := rest[i].val
		switch {
		case len(pending) > 0 && !strings.HasPrefix(v, "-"):
			value(pending[0], rest[i])
			pending = pending[1:]
		case strings.HasPrefix(v, "--"):
			name, val, hasVal := strings.Cut(v[2:], "=")
			full := ""
			for _, f := range []string{"remove-files", "delete", "to-command", "use-compress-program",
				"info-script", "new-volume-script", "rsh-command", "rmt-command", "checkpoint-action",
				"directory", "extract", "get"} {
				if strings.HasPrefix(f, name) && len(name) >= 3 {
					full = f
					break
				}
			}
			switch full {
			case "remove-files":
				c.escalate("tar --remove-files")
				return
			case "delete":
				c.escalate("tar --delete")
				return
			case "extract", "get":
				extract = true
			}
			if runs[full] || full == "directory" {
				if !hasVal && i+1 < len(rest) {
					i++
					val = rest[i].val
				}
				switch {
				case full == "directory":
					d := arg{val: val, lit: true}
					dir = &d
				case full == "checkpoint-action":
					if cmd, ok := strings.CutPrefix(val, "exec="); ok {
						c.nested(arg{val: cmd, lit: true}, depth)
					}
				default:
					c.nested(arg{val: val, lit: true}, depth)
				}
			}
		case strings.HasPrefix(v, "-") || i == 0:
			letters := strings.TrimPrefix(v, "-")
			for j := 0; j < len(letters); j++ {
				l := letters[j]
				if l == 'x' {
					extract = true
				}
				if strings.IndexByte(withVal, l) < 0 {
					continue
				}
				if strings.HasPrefix(v, "-") && j+1 < len(letters) {
					value(l, arg{val: letters[j+1:], lit: true})
					break
				}
				pending = append(pending, l)
				if strings.HasPrefix(v, "-") {
					break
				}
			}
		}
	}
	if extract && dir != nil {
		c.target(*dir, "tar extracts into a config directory")
	}
}

// rsync escalates every --delete* form and --remove-source-files, and judges
// the remote shell (-e/--rsh) and --rsync-path as shell code.
func (c *checker) rsync(rest []arg, depth int) {
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !a.lit {
			continue // copyLike escalates words it cannot read
		}
		v := a.val
		if strings.HasPrefix(v, "--") {
			name, val, hasVal := strings.Cut(v, "=")
			switch {
			case strings.HasPrefix(name, "--del"):
				c.escalate("rsync --delete")
				return
			case strings.HasPrefix(name, "--remove-s"):
				c.escalate("rsync --remove-source-files")
				return
			case name == "--rsh" || name == "--rsync-path":
				if !hasVal && i+1 < len(rest) {
					i++
					val = rest[i].val
				}
				c.nested(arg{val: val, lit: true}, depth)
			}
			continue
		}
		if strings.HasPrefix(v, "-") {
			if j := strings.IndexByte(v, 'e'); j > 0 {
				if j+1 < len(v) {
					c.nested(arg{val: v[j+1:], lit: true}, depth)
				} else if i+1 < len(rest) {
					i++
					c.nested(rest[i], depth)
				}
			}
		}
	}
}

// flock runs -c/--command CODE with a shell, or the command after its lock file.
func (c *checker) flock(rest []arg, depth int) {
	for i, a := range rest {
		if a.lit && (a.val == "-c" || a.val == "--command") && i+1 < len(rest) {
			c.nested(rest[i+1], depth)
			return
		}
	}
	_, _, first := parseOpts(rest, set("-w", "--timeout", "--wait", "-E", "--conflict-exit-code"), false)
	if first+1 < len(rest) {
		c.simple(rest[first+1:], depth)
	}
}

// positional judges the command after a wrapper's options and n leading
// operands (taskset MASK CMD, chrt PRIO CMD); -p/--pid acts on a process.
func (c *checker) positional(rest []arg, withArg map[string]bool, n int, depth int) {
	opts, _, first := parseOpts(rest, withArg, false)
	if hasOpt(opts, "-p", "--pid") || first+n > len(rest) {
		return
	}
	c.simple(rest[first+n:], depth)
}

var parallelArgs = set("-j", "--jobs", "-N", "-n", "--max-args", "-S", "--sshlogin", "--joblog", "--results",
	"-a", "--arg-file", "--delay", "--timeout", "--retries", "--tmpdir", "-I", "--colsep", "-C", "-d",
	"--delimiter", "-E", "--eof", "--workdir", "--wd", "-L", "--max-lines", "-P", "--halt", "--memfree",
	"--load", "--nice", "--tagstring", "--tag-string", "--basefile", "--bf", "--return", "--transferfile",
	"--tf", "--env", "--sshdelay", "--limit", "-s", "--max-chars", "--block", "--header", "--rpl", "--id",
	"--semaphorename", "--fg", "--termseq")

// parallelRepl matches GNU parallel's replacement strings: {}, {.}, {/}, {#}, {1}, …
var parallelRepl = regexp.MustCompile(`\{[^{}\s]*\}`)

// parallel (GNU parallel, sem) joins its command words and runs them with a
// shell, the input in place of {} or appended: judged as sh -c with the input
// as a word the check cannot see. No command: commands come from the input.
func (c *checker) parallel(rest []arg, depth int) {
	_, _, first := parseOpts(rest, parallelArgs, false)
	var cmd []string
	for _, a := range rest[first:] {
		if a.lit && strings.HasPrefix(a.val, ":::") { // :::, ::::, :::+ start the input lists
			break
		}
		if !a.lit {
			c.escalate(reasonShellCode)
			return
		}
		cmd = append(cmd, a.val)
	}
	if len(cmd) == 0 {
		c.escalate("parallel runs commands read from its input")
		return
	}
	code := strings.Join(cmd, " ")
	const input = `"$PARALLEL_INPUT"`
	if parallelRepl.MatchString(code) {
		code = parallelRepl.ReplaceAllLiteralString(code, input)
	} else {
		code += " " + input
	}
	c.nested(arg{val: code, lit: true}, depth)
}

// deno eval CODE is JavaScript inline code; deno repl reads stdin.
func (c *checker) deno(rest []arg) {
	_, ops, _ := parseOpts(rest, nil, false)
	if len(ops) == 0 || !ops[0].lit {
		return
	}
	switch ops[0].val {
	case "repl":
		c.escalate("interpreter reads code from stdin, a pipe or a here-document")
	case "eval":
		_, code, _ := parseOpts(ops[1:], nil, false)
		if len(code) == 0 || !code[0].lit {
			c.escalate("interpreter code is not a literal")
			return
		}
		if r := judgeCode(langNode, code[0].val); r != "" {
			c.escalate(r)
		}
	}
}

// otherInterpreter: an interpreter whose code the check cannot read passes
// only when it runs a script file (or prints its version).
func (c *checker) otherInterpreter(rest []arg) {
	if len(rest) == 0 {
		c.escalate("interpreter reads code from stdin, a pipe or a here-document")
		return
	}
	a := rest[0]
	switch {
	case !a.lit:
		c.escalate("interpreter code is not a literal")
	case a.val == "--version" || a.val == "--help" || a.val == "-v" || a.val == "-V" || a.val == "-h":
	case strings.HasPrefix(a.val, "-"):
		c.escalate("inline code for an interpreter the check cannot read")
	}
}

// gitWork escalates the git subcommands that throw away uncommitted work
// (checkout of paths — after --, ., ./x, a glob — or with
// --force/--ours/--theirs; switch --force/--discard-changes; restore of the
// work tree; rm -r/-f or a glob; worktree remove --force) or history
// (checkout -B, switch -C; branch -D / -d --force / -M / -C / -f; stash
// drop/clear; update-ref -d; reflog expire/delete; gc --prune;
// filter-branch/filter-repo; tag -d/-f).
func (c *checker) gitWork(sub string, args []arg) {
	dashdash := false
	for _, a := range args {
		if a.val == "--" {
			dashdash = true
		}
	}
	opts, ops, _ := parseOpts(args, set("-b", "-B", "--orphan", "-c", "-C", "--conflict", "-s", "--source",
		"-m", "--message", "--expire", "--expire-unreachable", "--pathspec-from-file", "-u", "--track"), true)
	first := ""
	if len(ops) > 0 {
		first = ops[0].val
	}
	history := func(shape string) { c.escalate(because(classGitHistory, "git "+shape)) }
	work := func(shape string) { c.escalate(because(classGitWork, "git "+shape)) }
	switch sub {
	case "filter-branch", "filter-repo":
		history(sub + " rewrites every commit")
	case "checkout":
		if hasOpt(opts, "-B") {
			history("checkout -B resets a branch")
			return
		}
		bad := dashdash || hasOpt(opts, "-f", "--force", "--ours", "--theirs", "--pathspec-from-file")
		for _, o := range ops {
			cl := path.Clean(o.val)
			if cl == "." || strings.HasPrefix(o.val, "./") || strings.HasPrefix(o.val, ":/") || o.glob {
				bad = true
			}
		}
		if bad {
			work("checkout of paths or --force overwrites changes")
		}
	case "switch":
		switch {
		case hasOpt(opts, "-C", "--force-create"):
			history("switch -C resets a branch")
		case hasOpt(opts, "-f", "--force", "--discard-changes"):
			work("switch --discard-changes")
		}
	case "restore":
		if !hasOpt(opts, "-S", "--staged") || hasOpt(opts, "-W", "--worktree") {
			work("restore overwrites changes in the work tree")
		}
	case "branch":
		// -d refuses a branch that is not merged: only -D (or -d --force)
		// loses commits. -f moves an existing branch; -M/-C overwrite one.
		del := hasOpt(opts, "-d", "--delete")
		switch {
		case hasOpt(opts, "-D") || del && hasOpt(opts, "-f", "--force"):
			history("branch -D deletes an unmerged branch")
		case hasOpt(opts, "-M", "-C"):
			history("branch -M/-C overwrites a branch")
		case hasOpt(opts, "-f", "--force") && len(ops) > 0:
			history("branch --force moves a branch")
		}
	case "stash":
		if first == "drop" || first == "clear" {
			history("stash " + first)
		}
	case "rm":
		bad := hasOpt(opts, "-r", "-f", "--force")
		for _, o := range ops {
			bad = bad || o.glob
		}
		if bad {
			work("rm -r/-f deletes files")
		}
	case "update-ref":
		if hasOpt(opts, "-d") {
			history("update-ref -d")
		}
	case "reflog":
		if first == "expire" || first == "delete" {
			history("reflog " + first)
		}
	case "gc":
		for _, o := range opts {
			if strings.HasPrefix(o.name, "--prune") {
				history("gc --prune")
				return
			}
		}
	case "worktree":
		if first == "remove" && hasOpt(opts, "-f", "--force") {
			work("worktree remove --force")
		}
	case "tag":
		if hasOpt(opts, "-d", "--delete") {
			history("tag -d")
		} else if hasOpt(opts, "-f", "--force") {
			history("tag --force moves a tag")
		}
	}
}
