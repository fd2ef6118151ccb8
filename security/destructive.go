package security

import (
	"regexp"
	"strings"
)

// cmdStart anchors a command word: at the start, after a shell separator, a
// substitution or whitespace (xargs rm, sudo -u x rm), optionally path-qualified
// (/bin/rm); wordEnd ends it.
const (
	cmdStart = `(?:^|[;&|(\x60\s])(?:[\w./-]*/)?`
	wordEnd  = `(?:\s|$|[;&|)\x60])`
)

// destructive lists run_shell command shapes that need a human even though run_shell
// is only Elevated. Each matches as a whole command word, anywhere in a pipeline.
// Order matters only for the name reported (docker rm -f is a docker pattern).
var destructive = []struct {
	name string
	re   *regexp.Regexp
}{
	{"docker rm/stop/restart/kill", regexp.MustCompile(cmdStart + `docker(?:-compose)?\s+(?:(?:container|image|volume|network|system|compose)\s+)?(?:rm|rmi|stop|restart|kill|prune|down)` + wordEnd)},
	{"rm -r/-f", regexp.MustCompile(cmdStart + `rm\s+(?:[^;&|]*\s)?(?:-[a-zA-Z]*[rRf][a-zA-Z]*|--recursive|--force)` + wordEnd)},
	{"chmod", regexp.MustCompile(cmdStart + `chmod\s`)},
	{"chown", regexp.MustCompile(cmdStart + `chown\s`)},
	{"sudo/su", regexp.MustCompile(cmdStart + `(?:sudo|su|doas)` + wordEnd)},
	{"mkfs", regexp.MustCompile(cmdStart + `mkfs(?:\.\w+)?\s`)},
	{"dd if=", regexp.MustCompile(cmdStart + `dd\s+.*\bif=`)},
	{"shred/wipefs", regexp.MustCompile(cmdStart + `(?:shred|wipefs)\s`)},
	{"git push --force / reset --hard / clean -f", regexp.MustCompile(cmdStart + `git\s+(?:-[Cc]\s+\S+\s+|--?[\w-]+(?:=\S+)?\s+)*` +
		`(?:push\s+(?:.*\s)?(?:--force\S*|-[a-zA-Z]*f[a-zA-Z]*|\+\S+)(?:\s|$)|reset\s+(?:.*\s)?--hard|clean\s+(?:.*\s)?-[a-zA-Z]*f)`)},
	{"kill -9 / killall / pkill", regexp.MustCompile(cmdStart + `(?:kill\s+-(?:9|KILL|s\s+KILL)|killall|pkill)` + wordEnd)},
	{"shutdown/reboot", regexp.MustCompile(cmdStart + `(?:shutdown|reboot|halt|poweroff)` + wordEnd)},
	{"dotnet publish", regexp.MustCompile(cmdStart + `dotnet\s+publish` + wordEnd)},
	{"find -delete", regexp.MustCompile(cmdStart + `find\s[^;&|]*\s-delete` + wordEnd)},
	{"truncating redirect into a config file", regexp.MustCompile(`>\s*\S*(?:appsettings[^\s]*\.json|\.env\b|\.ya?ml\b|\.conf\b|\.ini\b|/etc/)`)},
	{"in-place edit of a config file", regexp.MustCompile(`(?:` + cmdStart + `sed\s(?:[^;&|]*\s)?(?:-[a-zA-Z]*i\S*|--in-place\S*)|` + cmdStart + `tee)` +
		`\s[^;&|]*(?:appsettings[^\s]*\.json|\.env\b|\.ya?ml\b|\.conf\b|\.ini\b|/etc/)`)},
	{"fork bomb", regexp.MustCompile(`:\(\)\s*\{\s*:\|:&\s*\};:`)},
}

// Destructive reports whether a shell command matches a destructive pattern, and which.
func Destructive(command string) (bool, string) {
	c := strings.TrimSpace(command)
	for _, d := range destructive {
		if d.re.MatchString(c) {
			return true, d.name
		}
	}
	return false, ""
}
