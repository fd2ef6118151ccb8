package security

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/internal/filewatch"
	"github.com/aetherium-engine/aetherium/tools"
)

// Rule actions. Only always_deny is enforced; the other two are parsed and logged as
// advisory (as in the reference design).
const (
	ActionAlwaysDeny  = "always_deny"
	ActionAlwaysAllow = "always_allow"
	ActionAskUser     = "ask_user"
)

// Rule is one entry of permissions.yaml.
type Rule struct {
	Match  Match  `yaml:"match" json:"match"`
	Action string `yaml:"action" json:"action"`
	Reason string `yaml:"reason" json:"reason,omitempty"`
}

// Team sources a rule can match (match.source): how the run's team was submitted.
const (
	SourceTemplate = tools.TeamSourceTemplate
	SourceInline   = tools.TeamSourceInline
)

// Match selects calls; every field given must match. Patterns are Go regexps.
type Match struct {
	Tool  string `yaml:"tool" json:"tool,omitempty"`
	Team  string `yaml:"team" json:"team,omitempty"` // the team's name; see Source for what a name proves
	Agent string `yaml:"agent" json:"agent,omitempty"`
	// Source is template or inline. A team name is only the submitter's word for an
	// inline team, so "this template's team" is team + source: template, and "no
	// inline team may" is source: inline.
	Source      string `yaml:"source" json:"source,omitempty"`
	ArgPattern  string `yaml:"arg_pattern" json:"arg_pattern,omitempty"`   // any string argument value, as given
	PathPattern string `yaml:"path_pattern" json:"path_pattern,omitempty"` // path arguments, normalized (NormalizePath)
	URLPattern  string `yaml:"url_pattern" json:"url_pattern,omitempty"`   // URL arguments, normalized (NormalizeURL)
}

type compiledRule struct {
	Rule
	arg, path, url *regexp.Regexp
}

// RuleSet is an immutable, compiled rules file.
type RuleSet struct {
	rules []compiledRule
	// flow is the file's flow: section (nil: the fleet's security.flow settings).
	flow *FlowPolicy
	// revision names the file's bytes (PolicyRevision).
	revision string
}

// NoPolicyRevision is the revision of no permissions file.
const NoPolicyRevision = "none"

// Revision names the permissions file the rules came from: "sha256:" and 16 hex
// digits of its bytes (NoPolicyRevision without a file). Approvals and grants are
// bound to it: a reload that changes the file suspends grants made under the
// old one.
func (rs *RuleSet) Revision() string {
	if rs == nil || rs.revision == "" {
		return NoPolicyRevision
	}
	return rs.revision
}

// Len is the number of rules.
func (rs *RuleSet) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.rules)
}

// ParseRules parses and compiles a permissions file, reporting every problem.
func ParseRules(raw []byte) (*RuleSet, error) {
	var doc struct {
		Rules []Rule      `yaml:"rules"`
		Flow  *FlowPolicy `yaml:"flow"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("permissions: %w", err)
	}
	var errs []error
	if err := doc.Flow.validate(); err != nil {
		errs = append(errs, err)
	}
	sum := sha256.Sum256(raw)
	rs := &RuleSet{flow: doc.Flow, revision: "sha256:" + hex.EncodeToString(sum[:8])}
	for i, r := range doc.Rules {
		c := compiledRule{Rule: r}
		switch r.Action {
		case ActionAlwaysDeny, ActionAlwaysAllow, ActionAskUser:
		default:
			errs = append(errs, fmt.Errorf("rules[%d].action: %q is not always_deny, always_allow or ask_user", i, r.Action))
		}
		switch r.Match.Source {
		case "", SourceTemplate, SourceInline:
		default:
			errs = append(errs, fmt.Errorf("rules[%d].match.source: %q is not template or inline", i, r.Match.Source))
		}
		if r.Match == (Match{}) {
			errs = append(errs, fmt.Errorf("rules[%d].match: empty (a rule must match something)", i))
		}
		for _, p := range []struct {
			name, src string
			dst       **regexp.Regexp
		}{{"arg_pattern", r.Match.ArgPattern, &c.arg}, {"path_pattern", r.Match.PathPattern, &c.path}, {"url_pattern", r.Match.URLPattern, &c.url}} {
			if p.src == "" {
				continue
			}
			re, err := regexp.Compile(p.src)
			if err != nil {
				errs = append(errs, fmt.Errorf("rules[%d].match.%s: %v", i, p.name, err))
				continue
			}
			*p.dst = re
		}
		rs.rules = append(rs.rules, c)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("permissions: %w", errors.Join(errs...))
	}
	return rs, nil
}

// CallFacts is what rules match on.
type CallFacts struct {
	Tool, Team, Agent string
	// Source is how the team was submitted (SourceTemplate, SourceInline); unset
	// counts as inline, the one that proves nothing.
	Source string
	// Workspace is the run's workspace on the host: path arguments under it are
	// matched workspace-relative, like those under the sandbox's /workspace.
	Workspace string
	Args      json.RawMessage
}

// normalizedArgs are a call's argument values in the forms the patterns match.
type normalizedArgs struct {
	strs, paths, urls []string
	// badURLs are URL arguments NormalizeURL could not parse, kept raw.
	badURLs []string
}

func normalizeArgs(f CallFacts) normalizedArgs {
	var n normalizedArgs
	var args map[string]any
	if len(f.Args) > 0 {
		_ = json.Unmarshal(f.Args, &args)
	}
	var rawPaths, rawURLs []string
	collect("", args, &n.strs, &rawPaths, &rawURLs)
	for _, p := range rawPaths {
		n.paths = append(n.paths, egress.NormalizePath(p, f.Workspace))
	}
	for _, u := range rawURLs {
		if norm, ok := egress.NormalizeURL(u); ok {
			n.urls = append(n.urls, norm)
		} else {
			n.badURLs = append(n.badURLs, u)
		}
	}
	return n
}

// Evaluate returns the first matching rule per action (deny wins and is checked first).
func (rs *RuleSet) Evaluate(f CallFacts) (deny *Rule, advisory []Rule) {
	d, adv := rs.evaluate(f)
	if d.Index >= 0 {
		r := d.Rule
		deny = &r
	}
	for _, a := range adv {
		advisory = append(advisory, a.Rule)
	}
	return deny, advisory
}

// RuleRef is a rule of a file as it matched a call: its position in rules: and
// the reason the gate gives (a deny of an unparsed URL says so).
type RuleRef struct {
	// Index is the rule's position in the file's rules: list (-1: no rule).
	Index int `json:"index"`
	Rule
}

// evaluate is Evaluate with the rules' positions: the gate's one matcher, which
// the what-if (WhatIf) shares so it judges a recorded call exactly as the gate
// would. d.Index is -1 when no deny rule matches.
func (rs *RuleSet) evaluate(f CallFacts) (d RuleRef, advisory []RuleRef) {
	d.Index = -1
	if rs == nil || len(rs.rules) == 0 {
		return d, nil
	}
	n := normalizeArgs(f)
	for i := range rs.rules {
		r := &rs.rules[i]
		ok, unparsed := r.matches(f, n)
		if !ok {
			continue
		}
		if r.Action == ActionAlwaysDeny {
			if d.Index < 0 {
				rr := r.Rule
				if unparsed {
					rr.Reason = strings.TrimSpace(rr.Reason + " (a URL argument could not be parsed, so this rule cannot rule it out)")
				}
				d = RuleRef{Index: i, Rule: rr}
			}
			continue
		}
		advisory = append(advisory, RuleRef{Index: i, Rule: r.Rule})
	}
	return d, advisory
}

// matches reports whether the rule selects the call. unparsed is set when it does
// only because a URL argument could not be parsed: a deny rule with a url_pattern
// fails closed on such a URL (the HTTP client might read it as a URL the pattern
// names), while an advisory rule matches it raw only.
func (r *compiledRule) matches(f CallFacts, n normalizedArgs) (ok, unparsed bool) {
	if r.Match.Tool != "" && r.Match.Tool != "*" && r.Match.Tool != f.Tool {
		return false, false
	}
	if r.Match.Team != "" && r.Match.Team != f.Team {
		return false, false
	}
	if r.Match.Agent != "" && r.Match.Agent != f.Agent {
		return false, false
	}
	if r.Match.Source != "" {
		src := f.Source
		if src == "" {
			src = SourceInline
		}
		if r.Match.Source != src {
			return false, false
		}
	}
	if r.arg != nil && !anyMatch(r.arg, n.strs) {
		return false, false
	}
	if r.path != nil && !anyMatch(r.path, n.paths) {
		return false, false
	}
	if r.url != nil && !anyMatch(r.url, n.urls) && !anyMatch(r.url, n.badURLs) {
		if r.Action != ActionAlwaysDeny || len(n.badURLs) == 0 {
			return false, false
		}
		return true, true
	}
	return true, false
}

func anyMatch(re *regexp.Regexp, xs []string) bool {
	for _, x := range xs {
		if re.MatchString(x) {
			return true
		}
	}
	return false
}

// collect gathers string argument values, nested ones included, and sorts out the
// ones that name paths and URLs by their key.
func collect(key string, v any, strs, paths, urls *[]string) {
	switch x := v.(type) {
	case string:
		*strs = append(*strs, x)
		k := strings.ToLower(key)
		switch {
		case k == "url" || k == "urls" || strings.HasSuffix(k, "_url") || strings.HasSuffix(k, "_urls"):
			*urls = append(*urls, x)
		case isDestinationKey(k):
			// page, href, …: a URL when it names a scheme's authority, else
			// a workspace path (play_test's page is either).
			if strings.Contains(x, "://") {
				*urls = append(*urls, x)
			} else {
				*paths = append(*paths, x)
			}
		case isPathKey(k):
			*paths = append(*paths, x)
		}
	case map[string]any:
		for k, vv := range x {
			collect(k, vv, strs, paths, urls)
		}
	case []any:
		for _, vv := range x {
			collect(key, vv, strs, paths, urls)
		}
	}
}

// isDestinationKey tells the argument names that hold a URL or a workspace
// path (toolbox's outbound test derives the outbound set from the same
// names).
func isDestinationKey(k string) bool {
	switch strings.TrimSuffix(k, "s") {
	case "page", "href", "uri", "endpoint":
		return true
	}
	return false
}

// isPathKey tells the argument names that hold workspace paths (a list under a
// plural name counts: collect passes each element with the list's key).
func isPathKey(k string) bool {
	switch k {
	case "path", "paths", "file", "files", "dir", "dirs", "workdir", "apk",
		// a non-file tool's output path (capture_api_schema, record_style,
		// tts_render): a path_pattern rule judges it as it judges write_file's
		"out":
		return true
	}
	for _, suf := range []string{"_path", "_paths", "_file", "_files", "_dir"} {
		if strings.HasSuffix(k, suf) {
			return true
		}
	}
	return false
}

// Rules holds the live rule set of a permissions file and reloads it on change.
// A file that fails to parse keeps the last good rules.
type Rules struct {
	path    string
	current atomic.Pointer[RuleSet]
	lastErr atomic.Pointer[string]
	log     *slog.Logger
	// OnReload is called after each reload attempt (metrics).
	OnReload func(rules int, err error)
}

// LoadRules reads path (a missing file means no rules) and returns the live holder.
func LoadRules(path string, log *slog.Logger) (*Rules, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Rules{path: path, log: log}
	r.current.Store(&RuleSet{})
	if path == "" {
		return r, nil
	}
	if err := r.reload(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return r, nil
}

// Current returns the rule set in force.
func (r *Rules) Current() *RuleSet { return r.current.Load() }

// LastError is the error of the latest failed reload ("" when the file is good).
func (r *Rules) LastError() string {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

func (r *Rules) reload() error {
	raw, err := os.ReadFile(r.path)
	if errors.Is(err, os.ErrNotExist) {
		r.current.Store(&RuleSet{})
		empty := ""
		r.lastErr.Store(&empty)
		return err
	}
	var rs *RuleSet
	if err == nil {
		rs, err = ParseRules(raw)
	}
	if err != nil {
		msg := err.Error()
		r.lastErr.Store(&msg)
	} else {
		empty := ""
		r.lastErr.Store(&empty)
		r.current.Store(rs)
	}
	// After the state is updated, so the callback sees what it reports.
	if r.OnReload != nil {
		r.OnReload(rs.Len(), err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	return nil
}

// Watch reloads the file on change, debounced, until ctx ends (package
// filewatch: an editor's rename over the file is seen too).
func (r *Rules) Watch(ctx context.Context, debounce time.Duration) error {
	if r.path == "" {
		return nil
	}
	err := filewatch.Watch(ctx, r.log, debounce, func() {
		if err := r.reload(); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				r.log.Warn("permissions file removed: no rules in force", "path", r.path)
				return
			}
			r.log.Error("permissions reload failed; keeping the last good rules", "path", r.path, "err", err)
			return
		}
		r.log.Info("permissions reloaded", "path", r.path, "rules", r.Current().Len())
	}, r.path)
	if err != nil {
		return fmt.Errorf("watch permissions: %w", err)
	}
	return nil
}
