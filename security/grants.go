package security

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/shell"
	"github.com/aetherium-engine/aetherium/store"
)

// Grant defaults.
const (
	// DefaultGrantTTL is a grant's life when the approver names none.
	DefaultGrantTTL = time.Hour
	// DefaultGrantMaxTTL caps the life of a grant (security.grant_max_ttl).
	DefaultGrantMaxTTL = 24 * time.Hour
	// MaxGrantPattern bounds a pattern.
	MaxGrantPattern = 1000
)

// broadFirstWords are commands that run whatever their arguments say: a
// command grant ending in * after one of them covers anything, so only a
// principal with the grant_broad role may make it.
var broadFirstWords = []string{
	"sh", "bash", "zsh", "dash", "ksh", "fish", "busybox", "env", "sudo", "su", "doas", "nice", "nohup", "timeout",
	"time", "xargs", "exec", "eval", "command", "builtin", "find", "python", "python3", "perl", "ruby", "node",
	"deno", "bun", "php", "lua", "awk", "gawk", "sed", "ssh", "parallel", "watch", "script", "strace", "chroot",
	// Commands whose options name another program to run (git -c core.pager=…,
	// npx any-package, docker run any-image).
	"git", "npx", "docker", "podman", "kubectl",
}

// commandPattern is a parsed command grant: its words, and whether any further
// arguments may follow.
type commandPattern struct {
	words []string
	rest  bool
}

func parseCommandPattern(p string) (commandPattern, error) {
	words := strings.Fields(p)
	var cp commandPattern
	if len(words) > 0 && words[len(words)-1] == "*" {
		cp.rest, words = true, words[:len(words)-1]
	}
	for _, w := range words {
		if strings.ContainsAny(w, "*?[]$`\\\"'(){};|&<>") {
			return cp, fmt.Errorf("command pattern word %q: only literal words and a final * are allowed", w)
		}
	}
	cp.words = words
	return cp, nil
}

// broad reports why a command pattern covers any command ("" when it does not).
func (cp commandPattern) broad() string {
	switch {
	case len(cp.words) == 0:
		return "a bare * covers every command"
	case cp.rest && slices.Contains(broadFirstWords, path.Base(cp.words[0])):
		return fmt.Sprintf("%q followed by * runs whatever its arguments say", cp.words[0])
	}
	return ""
}

func (cp commandPattern) covers(words []string) bool {
	if len(words) < len(cp.words) || (!cp.rest && len(words) != len(cp.words)) {
		return false
	}
	return slices.Equal(words[:len(cp.words)], cp.words)
}

// urlPattern is a parsed URL prefix.
type urlPattern struct {
	scheme, host, path string
}

func parseURLPattern(p string) (urlPattern, error) {
	u, err := url.Parse(strings.TrimSpace(p))
	switch {
	case err != nil:
		return urlPattern{}, fmt.Errorf("url prefix: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return urlPattern{}, fmt.Errorf("url prefix %q: want an absolute http or https URL", p)
	case u.Host == "" || u.Hostname() == "" || strings.Contains(u.Host, "*"):
		return urlPattern{}, fmt.Errorf("url prefix %q: want a host (no wildcard)", p)
	case u.User != nil:
		return urlPattern{}, fmt.Errorf("url prefix %q: credentials are not allowed", p)
	case u.RawQuery != "" || u.Fragment != "":
		return urlPattern{}, fmt.Errorf("url prefix %q: no query or fragment", p)
	}
	return urlPattern{scheme: u.Scheme, host: strings.ToLower(u.Host), path: cleanURLPath(u.EscapedPath())}, nil
}

// cleanURLPath resolves dot segments, so /docs/../admin is not under /docs/.
func cleanURLPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

func (up urlPattern) covers(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Scheme != up.scheme || strings.ToLower(u.Host) != up.host {
		return false
	}
	p := cleanURLPath(u.EscapedPath())
	if up.path == "/" || p == up.path {
		return true
	}
	prefix := up.path
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return strings.HasPrefix(p, prefix)
}

// grantCovers reports whether grant g covers a call with args (hashing to hash).
func grantCovers(g store.Grant, args json.RawMessage, hash string) bool {
	switch g.Match {
	case store.GrantExact:
		return g.Pattern == hash
	case store.GrantCommand:
		cp, err := parseCommandPattern(g.Pattern)
		if err != nil {
			return false
		}
		var a struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(args, &a) != nil || a.Command == "" {
			return false
		}
		cmds, err := shell.Words(a.Command)
		if err != nil {
			return false
		}
		for _, ws := range cmds {
			if !cp.covers(ws) {
				return false
			}
		}
		return true
	case store.GrantURLPrefix:
		up, err := parseURLPattern(g.Pattern)
		if err != nil {
			return false
		}
		urls := argURLs(args)
		if len(urls) == 0 {
			return false
		}
		for _, u := range urls {
			if !up.covers(u) {
				return false
			}
		}
		return true
	}
	return false
}

// argURLs are the URLs in a call's arguments, as the egress layer finds them.
func argURLs(args json.RawMessage) []string {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil
	}
	var strs, paths, urls []string
	collect("", v, &strs, &paths, &urls)
	return urls
}

// newGrant checks a grant asked for with an approval and builds its row.
func (a *Approvals) newGrant(spec store.GrantRequest, appr store.Approval, run store.Run, by string, mayBroad bool) (*store.Grant, error) {
	if appr.Kind == store.KindQuestion {
		return nil, store.BadDecision("grant", "a question cannot be granted")
	}
	if strings.Contains(appr.Why, untrustedRead) {
		return nil, store.BadDecision("grant", "this call is held because its session read untrusted content: a grant never covers such a call (approve it once)")
	}
	ttl := DefaultGrantTTL
	if spec.TTL != "" {
		d, err := time.ParseDuration(spec.TTL)
		if err != nil || d <= 0 {
			return nil, store.BadDecision("grant.ttl", "%q is not a positive duration like 30m or 2h", spec.TTL)
		}
		ttl = d
	}
	if ttl > a.cfg.GrantMaxTTL {
		return nil, store.BadDecision("grant.ttl", "%s is over security.grant_max_ttl (%s)", ttl, a.cfg.GrantMaxTTL)
	}
	g := &store.Grant{ID: newGrantID(), CreatedBy: by, ApprovalID: appr.ID, Owner: run.Owner, Tool: appr.Tool,
		Scope: spec.Scope, Match: spec.Match, PolicyRevision: appr.PolicyRevision, ExpiresAt: time.Now().Add(ttl)}
	switch spec.Scope {
	case store.GrantScopeRun:
		g.ScopeID = run.ID
	case store.GrantScopeProject:
		if run.ProjectID == "" {
			return nil, store.BadDecision("grant.scope", "the run has no project")
		}
		g.ScopeID = run.ProjectID
	case store.GrantScopeTeam:
		if appr.Team == "" {
			return nil, store.BadDecision("grant.scope", "the run's team has no name")
		}
		g.ScopeID = appr.Team
	default:
		return nil, store.BadDecision("grant.scope", "%q is not run, project or team", spec.Scope)
	}
	if len(spec.Pattern) > MaxGrantPattern {
		return nil, store.BadDecision("grant.pattern", "over %d bytes", MaxGrantPattern)
	}
	switch spec.Match {
	case store.GrantExact:
		g.Pattern = appr.ArgsHash
	case store.GrantCommand:
		// Keyed on the arguments' shape, as the approver's view is: a "command"
		// string is a shell command line (run_shell's).
		var c struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(appr.Args, &c) != nil || c.Command == "" {
			return nil, store.BadDecision("grant.match", "command grants are for shell commands; %s's arguments hold none", appr.Tool)
		}
		cp, err := parseCommandPattern(spec.Pattern)
		if err != nil {
			return nil, store.BadDecision("grant.pattern", "%v", err)
		}
		if why := cp.broad(); why != "" && !mayBroad {
			return nil, store.BadDecision("grant.pattern", "too broad: %s (needs the grant_broad role)", why)
		}
		g.Pattern = strings.Join(cp.words, " ")
		if cp.rest {
			g.Pattern = strings.TrimSpace(g.Pattern + " *")
		}
	case store.GrantURLPrefix:
		if len(argURLs(appr.Args)) == 0 {
			return nil, store.BadDecision("grant.match", "%s's arguments hold no URL", appr.Tool)
		}
		if _, err := parseURLPattern(spec.Pattern); err != nil {
			return nil, store.BadDecision("grant.pattern", "%v", err)
		}
		g.Pattern = strings.TrimSpace(spec.Pattern)
	default:
		return nil, store.BadDecision("grant.match", "%q is not exact, command or url_prefix", spec.Match)
	}
	// A grant that would not cover the very call it approves is a mistake (the
	// masked arguments differ from the call's only in secret spans).
	if spec.Match != store.GrantExact && !grantCovers(*g, appr.Args, appr.ArgsHash) {
		return nil, store.BadDecision("grant.pattern", "%q does not cover the call it approves", spec.Pattern)
	}
	return g, nil
}

func newGrantID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "grt_" + hex.EncodeToString(b)
}

// hashOf is the approval binding hash of args ("" when they cannot be bound).
func hashOf(args json.RawMessage) string {
	h, err := egress.ArgsHash(args)
	if err != nil {
		return ""
	}
	return h
}
