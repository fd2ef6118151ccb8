package egress

import (
	"regexp"

	"github.com/zricethezav/gitleaks/v8/report"
)

// hostPortPath is a URL's authority and path as gitleaks' generic-api-key rule sees
// it: "api.example.test:35973/api/runs" reads as keyword "api", separator ":" and a
// value "35973/api/runs" whose entropy passes for some port numbers and not for
// others — a plain URL refused at random. The rule's match ends at a quote, a
// space, a semicolon or a line's end, which JSON escapes (a URL inside a shell
// command line: run_shell's arguments are scanned when its sandbox has a network).
var hostPortPath = regexp.MustCompile(`(?i)^[a-z0-9.-]*\.[a-z0-9-]+:[0-9]{1,5}(/[\w./%~+-]*)?(["'\x60\s;\\]|\\[nrt])*$`)

// ignoredFinding reports a finding that is a known false positive of a default rule.
func ignoredFinding(f report.Finding) bool {
	return f.RuleID == "generic-api-key" && hostPortPath.MatchString(f.Match)
}
