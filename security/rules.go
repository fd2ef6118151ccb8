package security

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"gopkg.in/yaml.v3"
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
	Match  Match  `yaml:"match"`
	Action string `yaml:"action"`
	Reason string `yaml:"reason"`
}

// Match selects calls; every field given must match. Patterns are Go regexps.
type Match struct {
	Tool        string `yaml:"tool"`
	Team        string `yaml:"team"`
	Agent       string `yaml:"agent"`
	ArgPattern  string `yaml:"arg_pattern"`  // any string argument value
	PathPattern string `yaml:"path_pattern"` // arguments named path / *_path / file
	URLPattern  string `yaml:"url_pattern"`  // arguments named url / *_url
}

type compiledRule struct {
	Rule
	arg, path, url *regexp.Regexp
}

// RuleSet is an immutable, compiled rules file.
type RuleSet struct {
	rules []compiledRule
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
		Rules []Rule `yaml:"rules"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("permissions: %w", err)
	}
	var errs []error
	rs := &RuleSet{}
	for i, r := range doc.Rules {
		c := compiledRule{Rule: r}
		switch r.Action {
		case ActionAlwaysDeny, ActionAlwaysAllow, ActionAskUser:
		default:
			errs = append(errs, fmt.Errorf("rules[%d].action: %q is not always_deny, always_allow or ask_user", i, r.Action))
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
	Args              json.RawMessage
}

// Evaluate returns the first matching rule per action (deny wins and is checked first).
func (rs *RuleSet) Evaluate(f CallFacts) (deny *Rule, advisory []Rule) {
	if rs == nil || len(rs.rules) == 0 {
		return nil, nil
	}
	var strs, paths, urls []string
	var args map[string]any
	if len(f.Args) > 0 {
		_ = json.Unmarshal(f.Args, &args)
	}
	collect("", args, &strs, &paths, &urls)
	for i := range rs.rules {
		r := &rs.rules[i]
		if !r.matches(f, strs, paths, urls) {
			continue
		}
		if r.Action == ActionAlwaysDeny {
			if deny == nil {
				rr := r.Rule
				deny = &rr
			}
			continue
		}
		advisory = append(advisory, r.Rule)
	}
	return deny, advisory
}

func (r *compiledRule) matches(f CallFacts, strs, paths, urls []string) bool {
	if r.Match.Tool != "" && r.Match.Tool != "*" && r.Match.Tool != f.Tool {
		return false
	}
	if r.Match.Team != "" && r.Match.Team != f.Team {
		return false
	}
	if r.Match.Agent != "" && r.Match.Agent != f.Agent {
		return false
	}
	if r.arg != nil && !anyMatch(r.arg, strs) {
		return false
	}
	if r.path != nil && !anyMatch(r.path, paths) {
		return false
	}
	if r.url != nil && !anyMatch(r.url, urls) {
		return false
	}
	return true
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
		if k == "path" || k == "file" || strings.HasSuffix(k, "_path") || k == "apk" || k == "dir" {
			*paths = append(*paths, x)
		}
		if k == "url" || strings.HasSuffix(k, "_url") {
			*urls = append(*urls, x)
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

// Watch reloads the file on change, debounced, until ctx ends. It watches the
// directory so editors that replace the file (rename over it) are seen too.
func (r *Rules) Watch(ctx context.Context, debounce time.Duration) error {
	if r.path == "" {
		return nil
	}
	if debounce <= 0 {
		debounce = 200 * time.Millisecond
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch permissions: %w", err)
	}
	dir := filepath.Dir(r.path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("watch permissions dir %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		fire := make(chan struct{}, 1)
		base := filepath.Base(r.path)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) != base {
					continue
				}
				if timer != nil {
					timer.Stop()
				}
				timer = time.AfterFunc(debounce, func() {
					select {
					case fire <- struct{}{}:
					default:
					}
				})
			case <-fire:
				if err := r.reload(); err != nil {
					if errors.Is(err, os.ErrNotExist) {
						r.log.Warn("permissions file removed: no rules in force", "path", r.path)
						continue
					}
					r.log.Error("permissions reload failed; keeping the last good rules", "path", r.path, "err", err)
					continue
				}
				r.log.Info("permissions reloaded", "path", r.path, "rules", r.Current().Len())
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.log.Warn("permissions watcher", "err", err)
			}
		}
	}()
	return nil
}
