package shell

import (
	"strconv"
	"strings"
)

// alwaysDestructive are commands that escalate whatever their arguments.
var alwaysDestructive = map[string]string{
	"chmod": "chmod", "chown": "chown", "chgrp": "chgrp",
	"sudo": "sudo/su", "su": "sudo/su", "doas": "sudo/su", "pkexec": "sudo/su",
	"dd":   "dd",
	"mkfs": "mkfs", "mke2fs": "mkfs", "mkswap": "mkfs",
	"shred": "shred/wipefs", "wipefs": "shred/wipefs",
	"fdisk": "fdisk/parted", "sfdisk": "fdisk/parted", "gdisk": "fdisk/parted",
	"cfdisk": "fdisk/parted", "parted": "fdisk/parted",
	"killall": "kill -9 / killall / pkill", "pkill": "kill -9 / killall / pkill",
	"skill": "kill -9 / killall / pkill", "killall5": "kill -9 / killall / pkill",
	"shutdown": "shutdown/reboot", "reboot": "shutdown/reboot", "halt": "shutdown/reboot",
	"poweroff": "shutdown/reboot",
	"source":   reasonEval, ".": reasonEval,
	"userdel": because(classUsers, "userdel"), "deluser": because(classUsers, "deluser"),
	"groupdel": because(classUsers, "groupdel"), "delgroup": because(classUsers, "delgroup"),
	"nsenter": because(classEscape, "nsenter enters another process's namespaces"),
}

// sudoArgs are the options of sudo/doas/pkexec that take a value.
var sudoArgs = set("-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
	"-p", "--prompt", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U", "--other-user", "-R",
	"--chroot")

// shells run code given with -c, or read it from stdin.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "ash": true, "zsh": true, "ksh": true,
	"mksh": true, "hush": true, "fish": true, "rbash": true,
}

const (
	reasonRm      = "rm -r/-f"
	reasonKill    = "kill -9 / killall / pkill"
	reasonKillAll = "kill -1: every process"
	reasonDocker  = "docker rm/stop/restart/kill"
	reasonSudo    = "sudo/su"
)

// opt is one parsed option: its name ("-f", "--force") and its value if the
// option takes one.
type opt struct {
	name string
	val  arg
}

// parseOpts splits GNU-style arguments. withArg names the options that take a
// value ("-n", "--adjustment"); a short one takes the rest of its cluster or
// the next word. With permute, options may follow operands (GNU tools);
// without it the first operand ends the options (wrappers: the rest is the
// wrapped command). first is the index of the first operand in args.
func parseOpts(args []arg, withArg map[string]bool, permute bool) (opts []opt, operands []arg, first int) {
	first = -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case !a.lit || a.val == "-" || !strings.HasPrefix(a.val, "-"):
			if first < 0 {
				first = i
			}
			if !permute {
				return opts, append(operands, args[i:]...), first
			}
			operands = append(operands, a)
		case a.val == "--":
			if first < 0 && i+1 < len(args) {
				first = i + 1
			}
			return opts, append(operands, args[i+1:]...), first
		case strings.HasPrefix(a.val, "--"):
			name, val, hasVal := strings.Cut(a.val, "=")
			o := opt{name: name}
			if hasVal {
				o.val = arg{val: val, lit: true}
			} else if withArg[name] && i+1 < len(args) {
				i++
				o.val = args[i]
			}
			opts = append(opts, o)
		default:
			for j := 1; j < len(a.val); j++ {
				name := "-" + a.val[j:j+1]
				o := opt{name: name}
				if withArg[name] {
					if j+1 < len(a.val) {
						o.val = arg{val: a.val[j+1:], lit: true}
					} else if i+1 < len(args) {
						i++
						o.val = args[i]
					}
					opts = append(opts, o)
					break
				}
				opts = append(opts, o)
			}
		}
	}
	if first < 0 {
		first = len(args)
	}
	return opts, operands, first
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func anyNotLit(args []arg) bool {
	for _, a := range args {
		if !a.lit {
			return true
		}
	}
	return false
}

func hasOpt(opts []opt, names ...string) bool {
	for _, o := range opts {
		for _, n := range names {
			if o.name == n {
				return true
			}
		}
	}
	return false
}

// longPrefix reports a long option that GNU/git getopt would accept as an
// abbreviation of full (--forc for --force), given at least min letters.
func longPrefix(o opt, full string, min int) bool {
	n := strings.TrimPrefix(o.name, "--")
	if n == o.name {
		return false
	}
	return (len(n) >= min && strings.HasPrefix(full, n)) || strings.HasPrefix(n, full)
}

// Options that take a value, per wrapper and tool.
var (
	envArgs     = set("-u", "--unset", "-C", "--chdir", "-S", "--split-string")
	niceArgs    = set("-n", "--adjustment")
	timeoutArgs = set("-s", "--signal", "-k", "--kill-after")
	execArgs    = set("-a")
	stdbufArgs  = set("-i", "-o", "-e", "--input", "--output", "--error")
	timeArgs    = set("-f", "--format", "-o", "--output")
	ioniceArgs  = set("-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid")
	chrootArgs  = set("--userspec", "--groups")
	xargsArgs   = set("-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "--max-lines",
		"-n", "--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var")
	shellArgs  = set("-o", "-O", "--rcfile", "--init-file")
	gitGlobals = set("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env",
		"--super-prefix", "--list-cmds", "--attr-source")
	dockerGlobals = set("-H", "--host", "-c", "--context", "--config", "-l", "--log-level",
		"--tlscacert", "--tlscert", "--tlskey")
	composeGlobals = set("-f", "--file", "-p", "--project-name", "--profile", "--env-file",
		"--project-directory", "--ansi", "--progress", "--parallel")
	cpArgs    = set("-t", "--target-directory", "-S", "--suffix", "-m", "--mode", "-o", "--owner", "-g", "--group")
	rsyncArgs = set("-e", "--rsh", "--rsync-path", "-f", "--filter", "--exclude", "--include", "--exclude-from",
		"--include-from", "--files-from", "-T", "--temp-dir", "--backup-dir", "--suffix", "--chmod", "--chown",
		"--partial-dir", "--compare-dest", "--copy-dest", "--link-dest", "--log-file", "--password-file",
		"--bwlimit", "--timeout", "--port", "--max-size", "--min-size", "--max-delete", "--modify-window",
		"--out-format", "--usermap", "--groupmap", "-B", "--block-size", "-M", "--remote-option")
	truncateArgs = set("-s", "--size", "-r", "--reference")
	touchArgs    = set("-d", "--date", "-t", "-r", "--reference")
	sedArgs      = set("-e", "--expression", "-f", "--file", "-l", "--line-length")
	killArgs     = set("-s", "--signal", "-n")
)

// simple judges one simple command: args[0] is its name.
func (c *checker) simple(args []arg, depth int) {
	if len(args) == 0 {
		return
	}
	name := args[0]
	if !name.lit || name.glob || name.val == "" {
		c.escalate(reasonNameNotLit)
		return
	}
	// /bin/rm and ./rm are rm: a local script named rm is judged as rm too.
	base := name.val[strings.LastIndexByte(name.val, '/')+1:]
	rest := args[1:]
	c.secrets(base, rest)
	if strings.Contains(name.val, "/") && !isSystemPath(name.val) {
		c.ran(name, name.val)
	}
	switch base {
	case "sudo", "doas", "pkexec":
		// The command it runs is judged first: its reason says what it does.
		_, _, first := parseOpts(rest, sudoArgs, false)
		i := first
		for i < len(rest) && rest[i].lit && strings.Contains(rest[i].val, "=") && !strings.HasPrefix(rest[i].val, "=") {
			i++ // sudo VAR=value cmd
		}
		c.simple(rest[i:], depth)
		c.escalate(reasonSudo)
		return
	case "su":
		for i, a := range rest {
			if a.lit && (a.val == "-c" || a.val == "--command") && i+1 < len(rest) {
				c.nested(rest[i+1], depth)
			}
		}
		c.escalate(reasonSudo)
		return
	}
	if _, ok := removeVerbs[base]; ok {
		c.packages(base, rest)
		if base != "dotnet" {
			return
		}
	}
	if c.services(name.val, base, rest) && base != "systemctl" {
		return
	}
	if dbClients[base] {
		c.database(base, rest)
		return
	}
	if r, ok := alwaysDestructive[base]; ok {
		c.escalate(r)
		return
	}
	if strings.HasPrefix(base, "mkfs") {
		c.escalate("mkfs")
		return
	}
	if shells[base] {
		c.shell(rest, depth)
		return
	}
	if l, ok := interpreterLang(base); ok {
		if l == langOther {
			c.otherInterpreter(rest)
		} else {
			c.interpreter(l, rest)
		}
		return
	}
	switch base {
	case "env":
		opts, _, first := parseOpts(rest, envArgs, false)
		if hasOpt(opts, "-S", "--split-string") {
			c.escalate("env -S splits a string into a command")
			return
		}
		i := first
		for i < len(rest) && rest[i].lit && strings.Contains(rest[i].val, "=") && !strings.HasPrefix(rest[i].val, "=") {
			i++ // VAR=value
		}
		c.simple(rest[i:], depth)
	case "nice":
		c.wrapped(rest, niceArgs, depth)
	case "nohup", "builtin", "setsid":
		c.wrapped(rest, nil, depth)
	case "command":
		opts, _, first := parseOpts(rest, nil, false)
		if hasOpt(opts, "-v", "-V") {
			return // only looks the name up
		}
		c.simple(rest[first:], depth)
	case "exec":
		c.wrapped(rest, execArgs, depth)
	case "stdbuf":
		c.wrapped(rest, stdbufArgs, depth)
	case "time":
		opts, _, first := parseOpts(rest, timeArgs, false)
		for _, o := range opts {
			if o.name == "-o" || o.name == "--output" {
				c.target(o.val, "write to a config file")
			}
		}
		c.simple(rest[first:], depth)
	case "ionice":
		c.wrapped(rest, ioniceArgs, depth)
	case "timeout":
		_, _, first := parseOpts(rest, timeoutArgs, false)
		if first < len(rest) {
			c.simple(rest[first+1:], depth) // skip DURATION
		}
	case "chroot":
		_, _, first := parseOpts(rest, chrootArgs, false)
		if first+1 >= len(rest) {
			c.shell(nil, depth) // no command: an interactive shell on stdin
			return
		}
		c.simple(rest[first+1:], depth)
	case "eval":
		// eval joins its arguments with spaces and runs them as code.
		c.nestedJoined(rest, depth)
	case "flock":
		c.flock(rest, depth)
	case "taskset":
		c.positional(rest, set("-p", "--pid"), 1, depth) // taskset [opts] MASK CMD
	case "chrt":
		c.positional(rest, set("-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"), 1, depth)
	case "strace", "ltrace":
		c.wrapped(rest, set("-e", "-o", "-p", "-s", "-u", "-E", "-a", "-b", "-I", "-O", "-S", "-P", "-X", "-n"), depth)
	case "unshare", "setpriv", "catchsegv", "xvfb-run", "unbuffer", "nocache":
		c.wrapped(rest, set("--map-user", "--map-group", "--setgroups", "--propagation", "-S", "--setuid",
			"-G", "--setgid", "--wd", "-R", "--root", "--reuid", "--regid", "--groups", "-n", "-s"), depth)
	case "parallel", "sem":
		c.parallel(rest, depth)
	case "deno":
		c.deno(rest)
	case "cd", "pushd", "popd":
		c.cd(rest)
	case "tar", "bsdtar":
		c.unpacked(rest)
		c.tar(rest, depth)
	case "unzip", "7z", "7za", "gunzip", "bunzip2", "unxz", "unzstd", "xz", "zstd", "cpio", "dpkg-deb", "rpm2cpio":
		c.unpacked(rest)
	case "curl", "wget":
		c.download(base, rest)
	case "iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy", "ip6tables-nft",
		"ebtables", "arptables", "iptables-restore", "ip6tables-restore", "nft", "ufw", "firewall-cmd":
		c.firewall(base, rest)
	case "kubectl", "oc":
		// kubectl exec POD -- psql …: a database client's data is the project's.
		for i, a := range rest {
			if a.val == "--" && len(rest) > 0 && rest[0].val == "exec" {
				c.dbInside(rest[i+1:], depth)
				break
			}
		}
	case "unlink":
		c.unlink(rest)
	case "busybox", "toybox":
		if len(rest) > 0 && rest[0].lit && strings.HasPrefix(rest[0].val, "-") {
			return // --list, --help
		}
		c.simple(rest, depth)
	case "xargs":
		c.xargs(rest, depth)
	case "find":
		c.find(rest, depth)
	case "watch":
		// watch runs its arguments, joined by spaces, with sh -c.
		_, _, first := parseOpts(rest, set("-n", "--interval", "-d", "--differences", "-q", "--equexit"), false)
		c.nestedJoined(rest[first:], depth)
	case "trap":
		if len(rest) > 0 && !(rest[0].lit && (strings.HasPrefix(rest[0].val, "-") || isDigits(rest[0].val))) {
			c.nested(rest[0], depth)
		}
	case "alias":
		// sh (dash) expands aliases in scripts: the value is code.
		for _, a := range rest {
			if a.lit && !strings.Contains(a.val, "=") {
				continue
			}
			if !a.lit {
				c.escalate(reasonShellCode)
				continue
			}
			_, v, _ := strings.Cut(a.val, "=")
			c.nested(arg{val: v, lit: true}, depth)
		}
	case "rm":
		c.rm(rest)
	case "kill":
		c.kill(rest)
	case "docker", "podman", "nerdctl":
		c.docker(rest, false, depth)
	case "docker-compose", "podman-compose":
		c.docker(rest, true, depth)
	case "git":
		c.git(rest)
	case "dotnet":
		_, ops, _ := parseOpts(rest, nil, false)
		if len(ops) > 0 && (!ops[0].lit || ops[0].val == "publish") {
			c.escalate("dotnet publish")
		}
	case "init", "telinit":
		if len(rest) > 0 && (!rest[0].lit || rest[0].val == "0" || rest[0].val == "6") {
			c.escalate("shutdown/reboot")
		}
	case "systemctl":
		_, ops, _ := parseOpts(rest, set("-H", "--host", "-M", "--machine", "-t", "--type", "-s", "--signal"), true)
		if len(ops) > 0 {
			switch ops[0].val {
			case "poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "default", "isolate", "suspend",
				"hibernate", "hybrid-sleep":
				c.escalate("shutdown/reboot")
			}
		}
	case "rsync":
		c.rsync(rest, depth)
		c.copyLike(base, rest)
	case "cp", "mv", "ln", "install":
		c.copyLike(base, rest)
	case "truncate":
		c.writeOperands(base, rest)
		c.truncate(rest)
	case "tee", "touch":
		c.writeOperands(base, rest)
	case "sed":
		c.inPlace(rest, sedArgs, func(o opt) bool {
			return o.name == "-i" || strings.HasPrefix(o.name, "--in-place")
		})
	}
}

// wrapped judges the command a wrapper runs after its own options.
func (c *checker) wrapped(rest []arg, withArg map[string]bool, depth int) {
	_, _, first := parseOpts(rest, withArg, false)
	c.simple(rest[first:], depth)
}

// nestedJoined runs words joined by spaces as shell code (watch, like sh -c).
func (c *checker) nestedJoined(ws []arg, depth int) {
	if len(ws) == 0 {
		return
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		if !w.lit {
			c.escalate(reasonShellCode)
			return
		}
		parts[i] = w.val
	}
	c.nested(arg{val: strings.Join(parts, " "), lit: true}, depth)
}

// shell judges sh/bash/…: -c code is parsed in turn; a shell with neither -c
// nor a script file reads its code from stdin — a pipe, a here-document, a
// redirect — which this check cannot see (echo … | base64 -d | sh).
func (c *checker) shell(rest []arg, depth int) {
	var cmdMode, stdin bool
	i := 0
	for ; i < len(rest); i++ {
		a := rest[i]
		if !a.lit {
			break
		}
		if a.val == "--" || a.val == "-" {
			i++
			if a.val == "-" {
				stdin = true
			}
			break
		}
		if !strings.HasPrefix(a.val, "-") && !strings.HasPrefix(a.val, "+") {
			break
		}
		if strings.HasPrefix(a.val, "--") {
			if shellArgs[a.val] {
				i++
			}
			continue
		}
		for _, ch := range a.val[1:] {
			switch ch {
			case 'c':
				cmdMode = true
			case 's', 'i':
				stdin = true
			case 'o', 'O':
				i++ // -o errexit: the option name is the next word
			}
		}
	}
	var operand *arg
	if i < len(rest) {
		operand = &rest[i]
	}
	switch {
	case cmdMode && operand != nil:
		c.nested(*operand, depth)
	case cmdMode:
		c.escalate(reasonShellCode)
	case stdin || operand == nil:
		c.escalate(reasonShellStdin)
	case !operand.lit || operand.glob:
		c.escalate(reasonShellStdin) // bash <(curl …), bash $F
	default:
		switch p := operand.val; {
		case p == "/dev/stdin", strings.HasPrefix(p, "/dev/fd/"), strings.HasPrefix(p, "/proc/"):
			c.escalate(reasonShellStdin)
		}
		// A script file is an interpreter running a program: the sandbox,
		// not this check, bounds what it does — unless it was just downloaded.
		c.ran(*operand, "a shell runs "+operand.val)
	}
}

// rm escalates -r/-R/--recursive/-f/--force in any cluster before --, a glob,
// and any argument that is not a literal ($IFS, $(…), find's {}, xargs input).
func (c *checker) rm(rest []arg) {
	opts, ops, _ := parseOpts(rest, nil, true)
	for _, o := range opts {
		switch {
		case o.name == "-r", o.name == "-R", o.name == "-f",
			longPrefix(o, "recursive", 1), longPrefix(o, "force", 1), longPrefix(o, "no-preserve-root", 3):
			c.escalate(reasonRm)
			return
		}
	}
	if anyNotLit(rest) {
		c.escalate("rm with arguments that are not literals")
		return
	}
	for _, a := range ops {
		if a.glob {
			c.escalate("rm with a glob")
			return
		}
	}
}

// kill escalates SIGKILL in any spelling: -9, -KILL, -SIGKILL, -s 9, -s KILL,
// -sKILL, -n 9, --signal=KILL. An argument that is not a literal escalates
// unless it comes after the signal or -- (kill $PID could be kill -9 …).
func (c *checker) kill(rest []arg) {
	sigSeen := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !a.lit {
			c.escalate("kill with arguments that are not literals")
			return
		}
		v := a.val
		if v == "--" {
			// pid -1 is every process the caller may signal, whatever the signal.
			for _, p := range rest[i+1:] {
				if p.val == "-1" {
					c.escalate(reasonKillAll)
				}
			}
			return
		}
		if !strings.HasPrefix(v, "-") {
			continue
		}
		if sigSeen {
			if v == "-1" {
				c.escalate(reasonKillAll)
				return
			}
			continue
		}
		sigSeen = true
		var sig string
		switch {
		case v == "-s" || v == "-n" || v == "--signal":
			if i+1 >= len(rest) {
				return
			}
			i++
			if !rest[i].lit {
				c.escalate("kill with arguments that are not literals")
				return
			}
			sig = rest[i].val
		case strings.HasPrefix(v, "--signal="):
			sig = strings.TrimPrefix(v, "--signal=")
		case strings.HasPrefix(v, "-s") || strings.HasPrefix(v, "-n"):
			sig = v[2:]
			if isSigKill(v[1:]) { // -sigkill spelled without -s
				sig = v[1:]
			}
		default:
			sig = v[1:]
		}
		if isSigKill(sig) {
			c.escalate(reasonKill)
			return
		}
		if i+1 < len(rest) && !rest[i+1].lit && v != "-l" && v != "-L" {
			return // a signal was given: what follows are pids
		}
	}
}

func isSigKill(s string) bool {
	u := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if u == "KILL" {
		return true
	}
	n, err := strconv.Atoi(u)
	return err == nil && n == 9
}

// docker escalates rm|rmi|stop|restart|kill|prune|down, directly or under a
// management command (container, image, volume, network, system, compose, …).
func (c *checker) docker(rest []arg, compose bool, depth int) {
	globals := dockerGlobals
	if compose {
		globals = composeGlobals
	}
	_, ops, _ := parseOpts(rest, globals, false)
	if len(ops) == 0 {
		return
	}
	verb, after := ops[0], ops[1:]
	if !compose {
		switch verb.val {
		case "compose":
			c.docker(ops[1:], true, depth)
			return
		case "container", "image", "volume", "network", "system", "builder", "buildx",
			"service", "stack", "secret", "config", "node", "plugin", "context", "swarm", "pod":
			_, sub, first := parseOpts(ops[1:], nil, false)
			if len(sub) == 0 {
				return
			}
			verb, after = sub[0], ops[1:][first+1:]
		}
	}
	if !verb.lit {
		c.escalate(reasonDocker)
		return
	}
	switch verb.val {
	case "rm", "rmi", "stop", "restart", "kill", "prune", "down", "remove", "leave":
		c.escalate(reasonDocker)
	case "run", "create", "exec":
		// compose run SERVICE takes the same -v options as docker run IMAGE.
		c.container(verb.val, after, depth)
	}
}

// git escalates what destroys history — push --force/-f/+ref/--mirror/
// --delete/:ref, reset --hard, a reset that moves HEAD to another commit —
// and what discards uncommitted work (clean -f, gitWork), and a -c setting
// that names a command to run.
func (c *checker) git(rest []arg) {
	opts, ops, _ := parseOpts(rest, gitGlobals, false)
	for _, o := range opts {
		if o.name != "-c" && o.name != "--config-env" {
			continue
		}
		k := strings.ToLower(o.val.val)
		if !o.val.lit || strings.HasPrefix(k, "alias.") ||
			strings.Contains(k, "command") || strings.Contains(k, "pager") || strings.Contains(k, "editor") ||
			strings.Contains(k, "hookspath") || strings.Contains(k, "fsmonitor") || strings.Contains(k, "helper") ||
			strings.Contains(k, "askpass") {
			c.escalate("git -c that can run a command")
			return
		}
	}
	if len(ops) == 0 {
		return
	}
	sub, args := ops[0], ops[1:]
	if !sub.lit {
		c.escalate(because(classGitHistory, "git subcommand that is not a literal"))
		return
	}
	switch sub.val {
	case "push", "reset", "clean":
	case "checkout", "switch", "restore", "branch", "stash", "rm", "update-ref", "reflog", "gc",
		"filter-branch", "filter-repo", "worktree", "tag":
		if anyNotLit(args) {
			c.escalate(because(classGitHistory, "git "+sub.val+" with arguments that are not literals"))
			return
		}
		c.gitWork(sub.val, args)
		return
	default:
		return
	}
	if anyNotLit(args) {
		c.escalate(because(classGitHistory, "git "+sub.val+" with arguments that are not literals"))
		return
	}
	sopts, sops, _ := parseOpts(args, set("-o", "--push-option", "--repo", "--receive-pack", "--exec", "-e", "--exclude",
		"--pathspec-from-file"), true)
	for _, o := range sopts {
		switch sub.val {
		case "push":
			switch {
			case o.name == "-f" || longPrefix(o, "force", 2):
				c.escalate(because(classGitHistory, "git push --force"))
				return
			case longPrefix(o, "mirror", 1):
				c.escalate(because(classGitHistory, "git push --mirror"))
				return
			case o.name == "-d" || longPrefix(o, "delete", 2):
				c.escalate(because(classGitHistory, "git push --delete"))
				return
			}
		case "reset":
			if longPrefix(o, "hard", 1) {
				c.escalate(because(classGitHistory, "git reset --hard"))
				return
			}
		case "clean":
			if o.name == "-f" || longPrefix(o, "force", 1) {
				c.escalate(because(classGitWork, "git clean -f"))
				return
			}
		}
	}
	switch sub.val {
	case "push":
		for i, a := range sops {
			// +ref forces; :ref (and src-less refspecs) delete the remote ref.
			if i > 0 && strings.HasPrefix(a.val, "+") {
				c.escalate(because(classGitHistory, "git push +"+strings.TrimPrefix(a.val, "+")+" forces"))
				return
			}
			if i > 0 && strings.HasPrefix(a.val, ":") {
				c.escalate(because(classGitHistory, "git push "+a.val+" deletes a remote branch"))
				return
			}
		}
	case "reset":
		c.gitReset(sopts, args)
	}
}

// gitReset escalates a reset that moves HEAD (and the branch) to another
// commit: the commits after it leave the branch, and a mixed reset (the
// default) also drops what was staged. --soft passes: index and work tree
// stay, the dropped commits' changes stay staged, so nothing is lost that a
// commit would not restore. A reset of paths (git reset HEAD f.go, git reset
// -- f.go, git reset f.go) only unstages and passes. One operand is a
// commit unless it looks like a file (has an extension, ends in /, is .).
func (c *checker) gitReset(opts []opt, args []arg) {
	if hasOpt(opts, "--soft") {
		return
	}
	for _, o := range opts {
		if o.name == "-p" || longPrefix(o, "patch", 2) || longPrefix(o, "pathspec-from-file", 3) {
			return
		}
	}
	var before, after []arg
	dashdash := false
	for _, a := range args {
		switch {
		case a.val == "--" && !dashdash:
			dashdash = true
		case dashdash:
			after = append(after, a)
		case !strings.HasPrefix(a.val, "-"):
			before = append(before, a)
		}
	}
	if len(after) > 0 || len(before) != 1 {
		return // paths, or no commit: HEAD stays
	}
	rev := before[0].val
	switch {
	case rev == "HEAD" || rev == "@":
		return
	case !dashdash && looksLikePath(rev):
		return
	}
	c.escalate(because(classGitHistory, "git reset "+rev+" moves HEAD to another commit"))
}

// looksLikePath tells a file operand from a revision for a lone git reset
// operand: a revision has ~ ^ @ or no extension (v1.2.0's last part is
// digits); a file has an extension, ends in / or is . or ./x.
func looksLikePath(s string) bool {
	if strings.ContainsAny(s, "~^@:") {
		return false
	}
	if s == "." || strings.HasPrefix(s, "./") || strings.HasSuffix(s, "/") {
		return true
	}
	b := baseName(s)
	i := strings.LastIndexByte(b, '.')
	return i > 0 && i < len(b)-1 && !isDigits(b[i+1:])
}

// xargs runs its command with words read from stdin: appended at the end, or
// put in place of the -I/-i replace string. Both are unknown to the check.
func (c *checker) xargs(rest []arg, depth int) {
	opts, _, first := parseOpts(rest, xargsArgs, false)
	cmd := append([]arg(nil), rest[first:]...)
	if len(cmd) == 0 {
		cmd = []arg{{val: "echo", lit: true}}
	}
	replace := ""
	for _, o := range opts {
		switch {
		case o.name == "-I":
			replace = o.val.val
		case o.name == "-i" || strings.HasPrefix(o.name, "--replace"):
			replace = "{}"
			if _, v, ok := strings.Cut(o.name, "="); ok {
				replace = v
			}
		}
	}
	if replace == "" {
		cmd = append(cmd, unknownArg)
	} else {
		for i := 1; i < len(cmd); i++ {
			if strings.Contains(cmd[i].val, replace) {
				cmd[i] = unknownArg
			}
		}
	}
	c.simple(cmd, depth)
}

// find escalates -delete and judges each -exec/-execdir/-ok/-okdir command
// with {} as an unknown word; -fprint* write files. An argument that is not a
// literal escalates: it could be -delete.
func (c *checker) find(rest []arg, depth int) {
	if anyNotLit(rest) {
		c.escalate("find with arguments that are not literals")
		return
	}
	for i := 0; i < len(rest); i++ {
		switch rest[i].val {
		case "-delete":
			c.escalate("find -delete")
		case "-fprint", "-fprint0", "-fprintf", "-fls":
			if i+1 < len(rest) {
				c.target(rest[i+1], "write to a config file")
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			var cmd []arg
			j := i + 1
			for ; j < len(rest); j++ {
				v := rest[j].val
				if v == ";" || (v == "+" && j > i+1 && strings.Contains(rest[j-1].val, "{}")) {
					break
				}
				if strings.Contains(v, "{}") {
					cmd = append(cmd, unknownArg)
				} else {
					cmd = append(cmd, rest[j])
				}
			}
			c.simple(cmd, depth)
			i = j
		}
	}
}

// target escalates a write target that is a config file or not a literal.
func (c *checker) target(t arg, reason string) {
	switch {
	case !t.lit || t.glob:
		c.escalate("write to a target that is not a literal")
	case isConfigPath(t.val):
		c.escalate(reason)
	}
	// Literal targets only: the cases above escalate the others.
	if t.lit && !t.glob {
		c.written(t.val)
	}
}

// copyLike judges cp/mv/ln/install/rsync: the destination is -t DIR or the
// last operand; a destination that may be a directory (ends in /, ., has no
// extension, several sources) receives the sources' base names. mv also
// removes its sources, so a config file moved away escalates too.
func (c *checker) copyLike(name string, rest []arg) {
	const reason = "copy/move/link onto a config file"
	if anyNotLit(rest) {
		c.escalate("write to a target that is not a literal")
		return
	}
	withArg := cpArgs
	if name == "rsync" {
		withArg = rsyncArgs
	}
	opts, ops, _ := parseOpts(rest, withArg, true)
	var dir *arg
	for _, o := range opts {
		if o.name == "-t" || o.name == "--target-directory" {
			v := o.val
			dir = &v
		}
	}
	srcs := ops
	if dir == nil {
		if len(ops) == 0 {
			return
		}
		last := ops[len(ops)-1]
		srcs = ops[:len(ops)-1]
		if len(srcs) == 0 && name == "ln" {
			// ln TARGET: the link is made in . under TARGET's base name.
			c.target(arg{val: baseName(last.val), lit: true, glob: last.glob}, reason)
			return
		}
		c.target(last, reason)
		if mayBeDir(last.val, len(srcs)) {
			dir = &last
		}
	} else {
		c.target(*dir, reason)
	}
	if dir != nil {
		for _, s := range srcs {
			c.target(arg{val: strings.TrimSuffix(dir.val, "/") + "/" + baseName(s.val), lit: true, glob: s.glob || dir.glob}, reason)
		}
	}
	if name == "mv" {
		for _, s := range srcs {
			c.target(s, reason)
		}
		c.mvWorkspace(opts, ops)
	}
}

func baseName(p string) string {
	p = strings.TrimRight(p, "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

func mayBeDir(p string, nsrc int) bool {
	b := baseName(p)
	return nsrc > 1 || strings.HasSuffix(p, "/") || b == "." || b == ".." || b == "~" || b == "" || !strings.Contains(b, ".")
}

// writeOperands judges tee/truncate/touch: every operand is written.
func (c *checker) writeOperands(name string, rest []arg) {
	withArg := map[string]bool{"truncate": true, "touch": true}
	var a map[string]bool
	if withArg[name] {
		a = truncateArgs
		if name == "touch" {
			a = touchArgs
		}
	}
	if anyNotLit(rest) {
		c.escalate("write to a target that is not a literal")
		return
	}
	_, ops, _ := parseOpts(rest, a, true)
	for _, o := range ops {
		c.target(o, "write to a config file")
	}
}

// inPlace judges sed -i / perl -i: every operand may be an edited file (the
// script operand of sed never looks like a config path in practice).
func (c *checker) inPlace(rest []arg, withArg map[string]bool, isInPlace func(opt) bool) {
	opts, ops, _ := parseOpts(rest, withArg, true)
	in := false
	for _, o := range opts {
		if isInPlace(o) {
			in = true
		}
	}
	if !in {
		return
	}
	for _, o := range ops {
		c.target(o, "in-place edit of a config file")
	}
}
