package shell

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Escalation by effect (issue 47, item 5). A rule names what a command does,
// not only which command it is: each reason below starts with its class, so
// the approval card says what would be lost ("destroys git history: git
// reset --hard"), and each class is judged over the parsed command — so under
// sudo, env, xargs, sh -c, a full path or git -C alike.
const (
	classGitHistory = "destroys git history"
	classGitWork    = "discards uncommitted work"
	classRemoves    = "removes software"
	classService    = "stops a service"
	classEscape     = "escapes the sandbox"
	classDownload   = "downloads and executes"
	classSystemDir  = "writes into a system directory"
	classDatabase   = "destroys data through a database client"
	classDBCommand  = "runs a command through a database client"
	classSecrets    = "publishes secrets into a served file"
	classFirewall   = "changes the firewall"
	classUsers      = "removes a user account"
)

func because(class, shape string) string { return class + ": " + shape }

// removeVerbs are the subcommands that uninstall, per package manager.
var removeVerbs = map[string]map[string]bool{
	"apt-get":  set("remove", "purge", "autoremove", "autopurge"),
	"apt":      set("remove", "purge", "autoremove", "autopurge"),
	"aptitude": set("remove", "purge"),
	"yum":      set("remove", "erase", "autoremove"),
	"dnf":      set("remove", "erase", "autoremove"),
	"microdnf": set("remove"),
	"tdnf":     set("remove", "erase", "autoremove"),
	"zypper":   set("remove", "rm"),
	"apk":      set("del"),
	"snap":     set("remove"),
	"flatpak":  set("uninstall", "remove"),
	"brew":     set("uninstall", "remove", "rm", "autoremove"),
	"port":     set("uninstall"),
	"conda":    set("remove", "uninstall"),
	"mamba":    set("remove", "uninstall"),
	"pip":      set("uninstall"),
	"pipx":     set("uninstall", "uninstall-all"),
	"gem":      set("uninstall"),
	"cargo":    set("uninstall"),
	"rustup":   set("uninstall"),
	"npm":      set("uninstall", "remove", "rm", "r", "un", "unlink"),
	"pnpm":     set("remove", "rm", "uninstall", "un"),
	"yarn":     set("remove"),
	"choco":    set("uninstall"),
	"winget":   set("uninstall"),
	"pip3":     set("uninstall"),
	"dotnet":   set(), // dotnet tool uninstall -g, below
	"asdf":     set("uninstall"),
	"sdk":      set("uninstall"),
	"nvm":      set("uninstall"),
	"pyenv":    set("uninstall"),
	"rbenv":    set("uninstall"),
	"opam":     set("remove", "uninstall"),
	"nix-env":  set(),
	"pacman":   set(),
	"dpkg":     set(),
	"rpm":      set(),
	"emerge":   set(),
	"pkg":      set("delete", "remove", "autoremove"),
}

// packageGlobalOnly are managers whose remove verb edits the project's
// manifest unless -g/--global says the removal is system-wide: npm
// uninstall lodash is a code change, npm uninstall -g typescript removes a
// tool. (uv, poetry, composer remove only ever edit the project: not listed.)
var packageGlobalOnly = set("npm", "pnpm")

var pkgArgs = set("-o", "--option", "-c", "--config-file", "-t", "--target-release", "--prefix", "-C",
	"--workspace", "-w", "--registry", "--cache", "-n", "--name", "-p", "--prefix-dir", "--root", "--index-url",
	"-i", "--installroot", "--releasever", "--repo", "--enablerepo", "--disablerepo", "-X", "--exclude")

// removeFlags: managers whose removal is an option, not a verb.
var removeFlags = map[string][]string{
	"dpkg":    {"-r", "-P", "--remove", "--purge"},
	"rpm":     {"-e", "--erase"},
	"nix-env": {"-e", "--uninstall"},
	"emerge":  {"-C", "--unmerge", "--depclean", "-c", "--prune", "-P"},
}

// packages escalates what uninstalls software; installing does not.
func (c *checker) packages(base string, rest []arg) {
	opts, ops, _ := parseOpts(rest, pkgArgs, true)
	shape := func(verb string) string { return because(classRemoves, base+" "+verb) }
	if flags, ok := removeFlags[base]; ok {
		for _, o := range opts {
			if slices.Contains(flags, o.name) {
				c.escalate(shape(o.name))
				return
			}
		}
		return
	}
	switch base {
	case "pacman":
		// -R, -Rs, -Rns: the operation letter leads the cluster.
		for _, a := range rest {
			if a.lit && (strings.HasPrefix(a.val, "-R") || a.val == "--remove") {
				c.escalate(shape("-R"))
				return
			}
		}
		return
	case "dotnet":
		if len(ops) >= 2 && ops[0].val == "tool" && ops[1].val == "uninstall" && hasOpt(opts, "-g", "--global") {
			c.escalate(shape("tool uninstall -g"))
		}
		return
	case "yarn":
		if len(ops) >= 2 && ops[0].val == "global" && ops[1].val == "remove" {
			c.escalate(shape("global remove"))
		}
		return
	}
	if len(ops) == 0 {
		return
	}
	verb := ops[0]
	if !verb.lit {
		c.escalate(because(classRemoves, base+" subcommand that is not a literal"))
		return
	}
	if !removeVerbs[base][verb.val] {
		// apt-get install nginx- removes nginx (a trailing - means remove).
		if (base == "apt-get" || base == "apt") && verb.val == "install" {
			for _, o := range ops[1:] {
				if strings.HasSuffix(o.val, "-") {
					c.escalate(shape("install PKG-"))
					return
				}
			}
		}
		return
	}
	if packageGlobalOnly[base] && !hasOpt(opts, "-g", "--global", "--location") {
		return
	}
	c.escalate(shape(verb.val))
}

// stopVerbs are the systemctl (and service) verbs that stop a service now or
// at the next boot.
var stopVerbs = set("stop", "disable", "mask", "kill", "restart", "try-restart", "reload-or-restart",
	"try-reload-or-restart", "condrestart", "force-reload", "force-stop", "freeze", "clean")

var serviceManagers = set("systemctl", "service", "rc-service", "rc-update", "update-rc.d", "chkconfig",
	"launchctl", "supervisorctl", "pm2", "sv", "initctl", "crontab")

// services escalates stopping, disabling or restarting a service, removing
// every cron job, and the service managers' equivalents.
func (c *checker) services(name, base string, rest []arg) bool {
	initScript := strings.HasPrefix(name, "/etc/init.d/") || strings.HasPrefix(name, "/etc/rc.d/")
	if !serviceManagers[base] && !initScript {
		return false
	}
	_, ops, _ := parseOpts(rest, set("-H", "--host", "-M", "--machine", "-t", "--type", "-s", "--signal",
		"-p", "--property", "-n", "--lines", "-o", "--output", "--kill-whom", "--root"), true)
	verbAt := func(i int, verbs map[string]bool) bool {
		if i >= len(ops) {
			return false
		}
		if !ops[i].lit {
			c.escalate(because(classService, base+" verb that is not a literal"))
			return true
		}
		if verbs[ops[i].val] {
			c.escalate(because(classService, base+" "+ops[i].val))
			return true
		}
		return false
	}
	if initScript {
		verbAt(0, stopVerbs)
		return true
	}
	switch base {
	case "systemctl":
		verbAt(0, stopVerbs)
	case "service", "rc-service":
		if len(ops) > 0 && ops[0].lit && strings.HasPrefix(ops[0].val, "-") {
			return true
		}
		verbAt(1, stopVerbs)
	case "rc-update":
		verbAt(0, set("del", "delete"))
	case "update-rc.d":
		verbAt(1, set("remove", "disable"))
	case "chkconfig":
		verbAt(1, set("off"))
	case "launchctl":
		verbAt(0, set("unload", "stop", "remove", "bootout", "disable", "kill"))
	case "supervisorctl":
		verbAt(0, set("stop", "restart", "remove", "shutdown"))
	case "pm2":
		verbAt(0, set("stop", "delete", "del", "kill", "restart"))
	case "sv":
		verbAt(0, set("down", "stop", "kill", "force-stop", "exit", "d", "k", "x"))
	case "initctl":
		verbAt(0, set("stop", "restart"))
	case "crontab":
		for _, a := range rest {
			if a.lit && strings.HasPrefix(a.val, "-") && !strings.HasPrefix(a.val, "--") && strings.Contains(a.val, "r") {
				c.escalate(because(classService, "crontab -r removes every scheduled job"))
			}
		}
	default:
		return false
	}
	return true
}

// firewall escalates a change of packet filter rules; listing passes.
func (c *checker) firewall(base string, rest []arg) {
	switch base {
	case "iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy", "ip6tables-nft",
		"ebtables", "arptables":
		for _, a := range rest {
			if !a.lit {
				c.escalate(because(classFirewall, base+" with arguments that are not literals"))
				return
			}
			v := a.val
			if strings.HasPrefix(v, "--") {
				switch strings.SplitN(v, "=", 2)[0] {
				case "--append", "--insert", "--delete", "--replace", "--flush", "--delete-chain", "--policy",
					"--new-chain", "--rename-chain", "--zero":
					c.escalate(because(classFirewall, base+" "+v))
					return
				}
				continue
			}
			if strings.HasPrefix(v, "-") && strings.ContainsAny(v[1:], "AIDRFXPNEZ") {
				c.escalate(because(classFirewall, base+" "+v))
				return
			}
		}
	case "iptables-restore", "ip6tables-restore", "nft", "ufw", "firewall-cmd":
		_, ops, _ := parseOpts(rest, set("-f", "--file", "-I", "--includepath", "--zone", "-T", "--table"), true)
		if base == "firewall-cmd" {
			for _, a := range rest {
				if !a.lit || !(strings.HasPrefix(a.val, "--list") || strings.HasPrefix(a.val, "--get") ||
					strings.HasPrefix(a.val, "--query") || a.val == "--state" || a.val == "--zone" ||
					strings.HasPrefix(a.val, "--zone=") || a.val == "--permanent") {
					c.escalate(because(classFirewall, "firewall-cmd"))
					return
				}
			}
			return
		}
		if base == "nft" && hasOpt(parseOptsOnly(rest), "-f", "--file") {
			c.escalate(because(classFirewall, "nft -f"))
			return
		}
		if len(ops) == 0 {
			if base == "iptables-restore" || base == "ip6tables-restore" {
				c.escalate(because(classFirewall, base))
			}
			return
		}
		switch v := ops[0].val; {
		case !ops[0].lit:
			c.escalate(because(classFirewall, base+" with arguments that are not literals"))
		case base == "nft" && (v == "list" || v == "describe" || v == "monitor"):
		case base == "ufw" && (v == "status" || v == "show" || v == "version" || v == "app"):
		default:
			c.escalate(because(classFirewall, base+" "+v))
		}
	}
}

func parseOptsOnly(rest []arg) []opt {
	opts, _, _ := parseOpts(rest, nil, true)
	return opts
}

// Docker options that take no value: every other option takes one (the
// attached =value or the next word), so the image is found without a list of
// the many value-taking options.
var (
	dockerRunBool = set("--rm", "--init", "--privileged", "--detach", "--interactive", "--tty", "--publish-all",
		"--read-only", "--sig-proxy", "--no-healthcheck", "--oom-kill-disable", "--disable-content-trust",
		"--quiet", "--help", "--use-api-socket", "--no-deps", "--service-ports", "--build", "--remove-orphans",
		"--no-TTY", "--use-aliases", "--quiet-pull")
	dockerRunShortBool = "ditPqT"
	// hostNamespaces: =host shares the host's namespace with the container.
	hostNamespaces = set("--pid", "--ipc", "--uts", "--userns", "--network", "--net", "--cgroupns")
)

// container judges docker/podman run, create and exec (and compose run):
// options that give the container the host — privileges, capabilities,
// devices, host namespaces, a relaxed security profile, a bind mount of a
// host directory outside the workspace — escalate. The command it runs inside
// is the container's business, except a database client (its data may be
// the project's).
func (c *checker) container(verb string, args []arg, depth int) {
	esc := func(shape string) { c.escalate(because(classEscape, "docker "+verb+" "+shape)) }
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.lit {
			// Could be --privileged as well as the image.
			esc("with an option or image that is not a literal")
			break
		}
		v := a.val
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		if strings.HasPrefix(v, "--") {
			name, val, hasVal := strings.Cut(v, "=")
			va := arg{val: val, lit: true}
			if !hasVal && !dockerRunBool[name] && i+1 < len(args) {
				i++
				va, hasVal = args[i], true
			}
			c.containerOpt(name, va, hasVal, esc)
			continue
		}
		for j := 1; j < len(v); j++ {
			name := "-" + v[j:j+1]
			if strings.IndexByte(dockerRunShortBool, v[j]) >= 0 {
				continue
			}
			va := arg{val: strings.TrimPrefix(v[j+1:], "="), lit: true}
			if j+1 == len(v) && i+1 < len(args) {
				i++
				va = args[i]
			}
			c.containerOpt(name, va, true, esc)
			break
		}
	}
	// The image (run/create) or container (exec), then the command.
	if i+1 < len(args) {
		c.dbInside(args[i+1:], depth)
	}
}

func (c *checker) containerOpt(name string, va arg, hasVal bool, esc func(string)) {
	switch {
	case name == "--privileged":
		if !hasVal || va.val == "true" || va.val == "1" || !va.lit {
			esc("--privileged")
		}
	case name == "--use-api-socket":
		esc(name)
	case hostNamespaces[name]:
		if !va.lit || va.val == "host" || strings.HasPrefix(va.val, "container:") || strings.HasPrefix(va.val, "ns:") {
			esc(name + "=host")
		}
	case name == "--cap-add", name == "--device", name == "--device-cgroup-rule":
		esc(name)
	case name == "--security-opt":
		if v := strings.ToLower(va.val); !va.lit || strings.Contains(v, "unconfined") || strings.Contains(v, "disable") ||
			strings.Contains(v, "no-new-privileges=false") {
			esc(name + " " + va.val)
		}
	case name == "-v" || name == "--volume":
		c.bindMount(va, esc, "-v")
	case name == "--mount":
		if !va.lit && (!va.pwd || c.cwdOutside) {
			esc("--mount that is not a literal")
			return
		}
		kind, src := "volume", ""
		for _, f := range strings.Split(va.val, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "type":
				kind = v
			case "source", "src":
				src = v
			}
		}
		if kind == "bind" {
			c.bindMount(arg{val: src + ":", lit: va.lit, pwd: va.pwd}, esc, "--mount")
		}
	}
}

// bindMount escalates a -v host:container whose host side is a directory
// outside the workspace (/, /etc, /var/run/docker.sock, ~); a named or
// anonymous volume and $(pwd)/… pass.
func (c *checker) bindMount(va arg, esc func(string), opt string) {
	if !va.lit {
		if !va.pwd || c.cwdOutside {
			esc(opt + " with a host path that is not a literal")
			return
		}
		va = arg{val: strings.ReplaceAll(va.val, pwdMark, workspaceDir), lit: true}
	}
	src, _, hasColon := strings.Cut(va.val, ":")
	if !hasColon || src == "" {
		return // an anonymous volume
	}
	if !strings.HasPrefix(src, "/") && !strings.HasPrefix(src, "~") && !strings.HasPrefix(src, ".") {
		return // a named volume
	}
	if c.outsideWorkspace(src) {
		esc(opt + " " + va.val + " mounts a host directory")
	}
}

// Downloaders and the options that name where they write.
var (
	curlArgs = set("-o", "--output", "-A", "--user-agent", "-b", "--cookie", "-c", "--cookie-jar", "-d", "--data",
		"--data-binary", "--data-raw", "--data-urlencode", "--json", "-D", "--dump-header", "-e", "--referer",
		"-E", "--cert", "--key", "--cacert", "-F", "--form", "-H", "--header", "-K", "--config", "-m",
		"--max-time", "--connect-timeout", "-r", "--range", "-T", "--upload-file", "-u", "--user", "-U",
		"--proxy-user", "-w", "--write-out", "-x", "--proxy", "-X", "--request", "-y", "--speed-time", "-Y",
		"--speed-limit", "-z", "--time-cond", "-C", "--continue-at", "--retry", "--retry-delay", "--retry-max-time",
		"--limit-rate", "--resolve", "--interface", "--url", "--output-dir", "--oauth2-bearer", "--variable",
		"--max-filesize", "--max-redirs", "--happy-eyeballs-timeout-ms", "--expect100-timeout", "--stderr",
		"--trace", "--trace-ascii", "--unix-socket", "--connect-to", "--proto", "--proto-redir", "-Q", "--quote")
	wgetArgs = set("-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P",
		"--directory-prefix", "-t", "--tries", "-T", "--timeout", "-w", "--wait", "-e", "--execute", "-i",
		"--input-file", "-B", "--base", "-U", "--user-agent", "-Q", "--quota", "-l", "--level", "-A", "--accept",
		"-R", "--reject", "-D", "--domains", "-X", "--exclude-directories", "-I", "--include-directories",
		"--header", "--user", "--password", "--post-data", "--post-file", "--limit-rate", "--load-cookies",
		"--save-cookies", "--referer", "--ca-certificate", "--certificate", "--private-key")
)

// urlBase is the file name a URL downloads to by default (wget URL, curl -O).
func urlBase(u string) string {
	u, _, _ = strings.Cut(u, "?")
	u, _, _ = strings.Cut(u, "#")
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if !strings.Contains(u, "/") {
		return "index.html"
	}
	b := baseName(u)
	if b == "" {
		return "index.html"
	}
	return b
}

// download records what curl/wget write: a file they name is checked as a
// write target and remembered, so that running it later escalates.
func (c *checker) download(base string, rest []arg) {
	c.sawDownload = true
	remember := func(p arg) {
		if !p.lit || p.glob {
			c.downloadAny = true
			return
		}
		if p.val == "-" || p.val == "/dev/stdout" {
			return
		}
		c.target(p, "write to a config file")
		if c.downloaded == nil {
			c.downloaded = map[string]bool{}
		}
		c.downloaded[baseName(p.val)] = true
	}
	withArg := curlArgs
	if base == "wget" {
		withArg = wgetArgs
	}
	opts, ops, _ := parseOpts(rest, withArg, true)
	var urls []arg
	for _, o := range ops {
		urls = append(urls, o)
	}
	named := false // an -o/-O names the output
	remote := false
	for _, o := range opts {
		switch {
		case base == "curl" && (o.name == "-o" || o.name == "--output"):
			remember(o.val)
			named = true
		case base == "curl" && (o.name == "-O" || o.name == "--remote-name" || o.name == "--remote-name-all"):
			remote = true
		case base == "curl" && (o.name == "-J" || o.name == "--remote-header-name"):
			c.downloadAny = true
		case base == "curl" && o.name == "--url":
			urls = append(urls, o.val)
		case base == "wget" && (o.name == "-O" || o.name == "--output-document"):
			remember(o.val)
			named = true
		case base == "wget" && (o.name == "-i" || o.name == "--input-file" || o.name == "--content-disposition" ||
			o.name == "-r" || o.name == "--recursive" || o.name == "-m" || o.name == "--mirror"):
			c.downloadAny = true
		case base == "wget" && (o.name == "-P" || o.name == "--directory-prefix"):
			c.target(o.val, "write to a config file")
		}
	}
	if base == "curl" && !remote {
		if !named {
			// To stdout: a redirect of this statement names the file.
			for _, r := range c.redirs {
				if (r.Op == syntax.RdrOut || r.Op == syntax.AppOut || r.Op == syntax.RdrClob) && (r.N == nil || r.N.Value == "1") {
					remember(wordValue(r.Word))
				}
			}
		}
		return
	}
	if named {
		return
	}
	for _, u := range urls {
		if !u.lit {
			c.downloadAny = true
			continue
		}
		remember(arg{val: urlBase(u.val), lit: true})
	}
}

// ran notes a file that is run (a shell or interpreter script, ./x): one
// downloaded earlier in the same command line escalates.
func (c *checker) ran(file arg, how string) {
	if !c.sawDownload || c.ranDownload != "" {
		return
	}
	if c.downloadAny || !file.lit || c.downloaded[baseName(file.val)] {
		c.ranDownload = how
	}
}

// unpacked: an archive that was downloaded (or piped from a download) yields
// files of unknown names.
func (c *checker) unpacked(rest []arg) {
	if c.piped && c.sawDownload {
		c.downloadAny = true // wget -O- … | tar xz
		return
	}
	for _, a := range rest {
		if !a.lit || c.downloaded[baseName(a.val)] {
			c.downloadAny = true
			return
		}
		// tar -xzf x.tgz, tar xf=x.tgz
		if _, v, ok := strings.Cut(a.val, "="); ok && c.downloaded[baseName(v)] {
			c.downloadAny = true
			return
		}
	}
}

// systemDirs hold the system's programs and libraries: a write into them
// installs or replaces software outside the workspace.
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/boot"}

func isSystemPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	cl := path.Clean(p)
	for _, d := range systemDirs {
		if cl == d || strings.HasPrefix(cl, d+"/") {
			return true
		}
	}
	return false
}

// servedDirs are the directories a web server or a static site serves from:
// a secret written under one is published.
var servedDirs = set("public", "public_html", "static", "www", "wwwroot", "htdocs", "html", "dist", "build",
	"out", "_site", "assets", "uploads", "site")

func isServedPath(p string) bool {
	cl := path.Clean(p)
	if strings.HasPrefix(cl, "/var/www") || strings.HasPrefix(cl, "/srv/") {
		return true
	}
	for _, part := range strings.Split(strings.ToLower(cl), "/") {
		if servedDirs[part] {
			return true
		}
	}
	return false
}

// written judges a literal write target beyond the config-file table: a
// system directory escalates; a served path is remembered for the secrets
// check.
func (c *checker) written(p string) {
	if isSystemPath(p) {
		c.escalate(because(classSystemDir, p))
		return
	}
	if c.servedWrite == "" && isServedPath(p) {
		c.servedWrite = p
	}
}

// isSecretPath reports a file that holds secrets: dotenv files (not their
// examples), keys, credential stores, a process environment.
func isSecretPath(p string) bool {
	cl := path.Clean(p)
	lower := strings.ToLower(cl)
	b := path.Base(lower)
	switch {
	case strings.HasSuffix(lower, "/environ") && strings.HasPrefix(lower, "/proc/"):
		return true
	case strings.Contains("/"+lower, "/.aws/") || strings.Contains("/"+lower, "/.kube/config") ||
		strings.Contains("/"+lower, "/.docker/config.json") || strings.Contains("/"+lower, "/.gnupg/"):
		return true
	case strings.Contains("/"+lower, "/.ssh/"):
		return !strings.HasSuffix(b, ".pub") && b != "known_hosts" && b != "config"
	case b == ".env" || strings.HasPrefix(b, ".env."):
		for _, s := range []string{"example", "sample", "template", "dist", "defaults"} {
			if strings.HasSuffix(b, "."+s) {
				return false
			}
		}
		return true
	}
	for _, pat := range []string{"*.pem", "*.key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "credentials",
		"credentials.json", ".netrc", ".git-credentials", ".pgpass", ".my.cnf", ".npmrc", ".pypirc", "*.p12",
		"*.pfx", "*.jks", "*.keystore", ".htpasswd", "secrets.*", "secret.*", "*.tfstate", "*.tfvars",
		"service-account*.json"} {
		if ok, _ := path.Match(pat, b); ok {
			return true
		}
	}
	return false
}

// secretReaders print or copy the files they are given.
var secretReaders = set("cat", "head", "tail", "tac", "nl", "less", "more", "base64", "xxd", "od", "strings",
	"cp", "ln", "rsync", "install", "mv", "tee", "sort", "uniq", "jq", "yq", "sed", "awk", "grep", "zip", "tar",
	"gzip", "openssl", "gpg", "scp", "dd")

// secrets notes a command whose output or copy is a secret: the whole
// environment (printenv, env, set, export -p), a secret file, a secret
// variable echoed. It escalates together with a write under a served
// directory anywhere in the same command line (effects).
func (c *checker) secrets(base string, rest []arg) {
	if c.secretSource != "" {
		return
	}
	switch base {
	case "printenv":
		_, ops, _ := parseOpts(rest, nil, true)
		if len(ops) == 0 {
			c.secretSource = "printenv"
		}
		for _, o := range ops {
			if !o.lit || isSecretName(o.val) {
				c.secretSource = "printenv " + o.val
			}
		}
	case "env":
		_, _, first := parseOpts(rest, envArgs, false)
		for _, a := range rest[first:] {
			if !a.lit || !strings.Contains(a.val, "=") {
				return // env runs a command
			}
		}
		c.secretSource = "env (the environment)"
	case "set", "export", "declare", "typeset":
		if len(rest) == 0 || (rest[0].lit && (rest[0].val == "-p" || rest[0].val == "-x" || rest[0].val == "-v")) {
			c.secretSource = base + " (the environment)"
		}
	case "echo", "printf":
		for _, a := range rest {
			if a.secret {
				c.secretSource = base + " of a secret variable"
			}
		}
	default:
		if !secretReaders[base] {
			return
		}
		for _, a := range rest {
			p := a.val
			if _, v, ok := strings.Cut(p, "="); ok && strings.HasPrefix(p, "-") || ok && base == "dd" {
				p = v
			}
			if a.lit && isSecretPath(p) {
				c.secretSource = base + " " + a.val
				return
			}
		}
	}
}

// declClause: export, declare -p, typeset -x alone print the environment.
func (c *checker) declClause(d *syntax.DeclClause) {
	if d.Variant == nil || c.secretSource != "" {
		return
	}
	switch d.Variant.Value {
	case "export", "declare", "typeset", "readonly", "local":
	default:
		return
	}
	for _, a := range d.Args {
		if a.Name != nil || !a.Naked || a.Value == nil {
			return
		}
		if v := wordValue(a.Value); !v.lit || !strings.HasPrefix(v.val, "-") {
			return
		}
	}
	c.secretSource = d.Variant.Value + " (the environment)"
}

// reasonsFromStdin are escalations of code that is read, not seen: when a
// download is on the same command line, that code is most likely it.
var reasonsFromStdin = set(reasonShellStdin, reasonShellCode, reasonEval, "interpreter reads code from stdin, a pipe or a here-document",
	"interpreter option or code that is not a literal", "interpreter code is not a literal")

var configWrites = set("copy/move/link onto a config file", "truncating redirect into a config file",
	"write to a config file")

// effects judges what only the whole command line shows.
func (c *checker) effects() {
	if c.ranDownload != "" {
		c.escalate(because(classDownload, c.ranDownload))
	}
	if c.sawDownload && reasonsFromStdin[c.reason] {
		c.reason = because(classDownload, "runs downloaded code the check cannot see ("+c.reason+")")
	}
	if c.secretSource != "" && c.servedWrite != "" {
		// More telling than the config-file rule a copied .env also trips.
		if configWrites[c.reason] {
			c.reason = ""
		}
		c.escalate(because(classSecrets, c.secretSource+" with a write to "+c.servedWrite))
	}
}
