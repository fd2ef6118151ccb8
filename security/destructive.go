package security

import (
	"regexp"
	"strings"
)

// destructive lists run_shell command shapes that need a human even though run_shell
// is only Elevated. Each matches as a whole command word, anywhere in a pipeline.
var destructive = []struct {
	name string
	re   *regexp.Regexp
}{
	{"rm -r/-f", regexp.MustCompile(`(^|[;&|(\s])rm\s+(-[a-zA-Z]*[rRf][a-zA-Z]*\s+|--recursive|--force)`)},
	{"chmod", regexp.MustCompile(`(^|[;&|(\s])chmod\s`)},
	{"chown", regexp.MustCompile(`(^|[;&|(\s])chown\s`)},
	{"sudo/su", regexp.MustCompile(`(^|[;&|(\s])(sudo|su|doas)(\s|$)`)},
	{"docker rm/stop/restart/kill", regexp.MustCompile(`(^|[;&|(\s])docker\s+(rm|rmi|stop|restart|kill|system\s+prune|volume\s+rm)\b`)},
	{"mkfs", regexp.MustCompile(`(^|[;&|(\s])mkfs(\.\w+)?\s`)},
	{"dd if=", regexp.MustCompile(`(^|[;&|(\s])dd\s+.*\bif=`)},
	{"shred/wipefs", regexp.MustCompile(`(^|[;&|(\s])(shred|wipefs)\s`)},
	{"git push --force / reset --hard / clean -f", regexp.MustCompile(`(^|[;&|(\s])git\s+(push\s+.*(--force|-f\b)|reset\s+--hard|clean\s+-[a-zA-Z]*f)`)},
	{"kill -9 / killall / pkill", regexp.MustCompile(`(^|[;&|(\s])(kill\s+-(9|KILL)|killall|pkill)\b`)},
	{"shutdown/reboot", regexp.MustCompile(`(^|[;&|(\s])(shutdown|reboot|halt|poweroff)\b`)},
	{"dotnet publish", regexp.MustCompile(`(^|[;&|(\s])dotnet\s+publish\b`)},
	{"truncating redirect into a config file", regexp.MustCompile(`>\s*\S*(appsettings[^\s]*\.json|\.env\b|\.ya?ml\b|\.conf\b|\.ini\b|/etc/)`)},
	{"in-place edit of a config file", regexp.MustCompile(`(sed\s+-i|tee)\s+.*(appsettings[^\s]*\.json|\.env\b|\.ya?ml\b|\.conf\b|\.ini\b|/etc/)`)},
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
