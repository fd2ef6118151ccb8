package evals

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// ErrInvalidSuite is wrapped by every refusal of a suite file: the command
// says so before it submits a run.
var ErrInvalidSuite = errors.New("invalid eval suite")

// Suite is an eval suite: tasks run against one team, each with assertions
// on its run (docs/evals.md).
type Suite struct {
	// Name names the suite in reports (default: the file's name).
	Name string `yaml:"name"`
	// Description is for the reader.
	Description string `yaml:"description"`
	// Team is the team the tasks run against unless the command names one.
	Team TeamRef `yaml:"team"`
	// Timeout is each task's timeout unless the task has its own.
	Timeout time.Duration `yaml:"timeout"`
	// Variables are the template variables of every task (a task's own win).
	Variables map[string]string `yaml:"variables"`
	// Judge is the model the judge assertions ask; without a real one
	// configured they are skipped.
	Judge *JudgeModel `yaml:"judge"`
	// Tasks are the runs.
	Tasks []Task `yaml:"tasks"`
}

// TeamRef names a team: a template of the fleet or a team file, relative to
// the suite's directory.
type TeamRef struct {
	Template string `yaml:"template"`
	File     string `yaml:"file"`
}

// JudgeModel is the model of the judge assertions.
type JudgeModel struct {
	Provider string `yaml:"provider"`
	Model    string `yaml:"model"`
}

// Task is one run and what it must show.
type Task struct {
	Name   string `yaml:"name"`
	Prompt string `yaml:"prompt"`
	// Variables are the run's template variables, over the suite's.
	Variables map[string]string `yaml:"variables"`
	// Project is the project the run works in ("" a scratch one).
	Project string `yaml:"project"`
	// Timeout bounds the run from submission to its end.
	Timeout time.Duration `yaml:"timeout"`
	// Assert are the assertions; without a status one the run must complete.
	Assert []Assertion `yaml:"assert"`
	// Line is the task's line in the suite file.
	Line int `yaml:"-"`
}

// Assertion is one check of a task's run. Exactly one kind is set; Agent
// narrows the trajectory kinds (called, not_called, in_order, gate) to one
// agent's calls.
type Assertion struct {
	// Status is the run's final status: completed, failed or cancelled.
	Status string `yaml:"status"`
	// Called are tools every one of which was called (in any order). A call
	// counts whatever the gate decided: the agent asked for it.
	Called []string `yaml:"called"`
	// NotCalled are tools none of which was called.
	NotCalled []string `yaml:"not_called"`
	// InOrder are tools called in this order (others may come between).
	InOrder []string `yaml:"in_order"`
	// Agent limits called, not_called, in_order and gate to an agent's calls.
	Agent string `yaml:"agent"`
	// Gate is a call's outcome at the gate.
	Gate *GateExpect `yaml:"gate"`
	// Delegated is a delegation.
	Delegated *DelegationExpect `yaml:"delegated"`
	// Contains and NotContains are substrings of the run's result.
	Contains    string `yaml:"contains"`
	NotContains string `yaml:"not_contains"`
	// Regex is an RE2 expression the result matches.
	Regex string `yaml:"regex"`
	// JSONSchema is a JSON Schema the result (JSON) is valid against.
	JSONSchema map[string]any `yaml:"json_schema"`
	// Judge asks the suite's judge model whether the result meets a rubric.
	Judge *JudgeExpect `yaml:"judge"`
	// MaxCostUSD, MaxTokens and MaxTurns bound the run's cost, tokens and
	// model answers (turns, every agent's).
	MaxCostUSD *float64 `yaml:"max_cost_usd"`
	MaxTokens  *int64   `yaml:"max_tokens"`
	MaxTurns   *int     `yaml:"max_turns"`

	// Line is the assertion's line in the suite file (0: implied).
	Line   int                `yaml:"-"`
	regex  *regexp.Regexp     `yaml:"-"`
	schema *jsonschema.Schema `yaml:"-"`
}

// GateExpect is a gate outcome: some call of Tool had Decision (allowed,
// denied, failed, …) and, when given, was refused at Layer.
type GateExpect struct {
	Tool     string `yaml:"tool"`
	Decision string `yaml:"decision"`
	Layer    string `yaml:"layer"`
}

// DelegationExpect is a delegation to an agent that, when Status is given,
// ended so (completed, failed, cancelled).
type DelegationExpect struct {
	To     string `yaml:"to"`
	Status string `yaml:"status"`
}

// JudgeExpect is a rubric the judge model grades the result against.
type JudgeExpect struct {
	Rubric string `yaml:"rubric"`
}

// Kinds of assertion, as reports name them.
const (
	KindStatus      = "status"
	KindCalled      = "called"
	KindNotCalled   = "not_called"
	KindInOrder     = "in_order"
	KindGate        = "gate"
	KindDelegated   = "delegated"
	KindContains    = "contains"
	KindNotContains = "not_contains"
	KindRegex       = "regex"
	KindJSONSchema  = "json_schema"
	KindJudge       = "judge"
	KindMaxCost     = "max_cost_usd"
	KindMaxTokens   = "max_tokens"
	KindMaxTurns    = "max_turns"
)

// Kind is the assertion's kind ("" when none is set, "a+b" when several are).
func (a Assertion) Kind() string {
	var kinds []string
	add := func(set bool, k string) {
		if set {
			kinds = append(kinds, k)
		}
	}
	add(a.Status != "", KindStatus)
	add(a.Called != nil, KindCalled)
	add(a.NotCalled != nil, KindNotCalled)
	add(a.InOrder != nil, KindInOrder)
	add(a.Gate != nil, KindGate)
	add(a.Delegated != nil, KindDelegated)
	add(a.Contains != "", KindContains)
	add(a.NotContains != "", KindNotContains)
	add(a.Regex != "", KindRegex)
	add(a.JSONSchema != nil, KindJSONSchema)
	add(a.Judge != nil, KindJudge)
	add(a.MaxCostUSD != nil, KindMaxCost)
	add(a.MaxTokens != nil, KindMaxTokens)
	add(a.MaxTurns != nil, KindMaxTurns)
	return strings.Join(kinds, "+")
}

// maxSchemaDepth bounds a json_schema's nesting: a real schema is a few
// levels deep, and the validator walks it recursively.
const maxSchemaDepth = 64

var runStatuses = map[string]bool{"completed": true, "failed": true, "cancelled": true}

// Parse reads a suite strictly: an unknown key, a second document, a regex
// that does not compile, a schema that is not one or an assertion of no (or
// two) kinds is an error naming its line. name is the suite's name when the
// file gives none.
func Parse(raw []byte, name string, cfg Config) (Suite, error) {
	cfg = cfg.WithDefaults()
	var s Suite
	if len(raw) > cfg.MaxSuiteBytes {
		return s, fmt.Errorf("%w: %d bytes, more than the %d a suite may have", ErrInvalidSuite, len(raw), cfg.MaxSuiteBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalidSuite, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return s, fmt.Errorf("%w: line %d: a second YAML document; a suite is one", ErrInvalidSuite, extra.Line)
	}
	// The strict decode has no lines; the node tree has them, for the
	// errors below and the reports.
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return s, fmt.Errorf("%w: %v", ErrInvalidSuite, err)
	}
	setLines(&s, &root)
	if s.Name == "" {
		s.Name = name
	}
	return s, s.validate(cfg)
}

// setLines copies the lines of the tasks and their assertions from the node tree.
func setLines(s *Suite, root *yaml.Node) {
	tasks := mapValue(docRoot(root), "tasks")
	if tasks == nil || tasks.Kind != yaml.SequenceNode {
		return
	}
	for i := range s.Tasks {
		if i >= len(tasks.Content) {
			return
		}
		tn := tasks.Content[i]
		s.Tasks[i].Line = tn.Line
		asserts := mapValue(tn, "assert")
		if asserts == nil || asserts.Kind != yaml.SequenceNode {
			continue
		}
		for j := range s.Tasks[i].Assert {
			if j < len(asserts.Content) {
				s.Tasks[i].Assert[j].Line = asserts.Content[j].Line
			}
		}
	}
}

func docRoot(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0]
	}
	return n
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func (s *Suite) validate(cfg Config) error {
	var errs []error
	bad := func(line int, format string, a ...any) {
		errs = append(errs, fmt.Errorf("line %d: "+format, append([]any{line}, a...)...))
	}
	if s.Team.Template != "" && s.Team.File != "" {
		errs = append(errs, errors.New("team: give template or file, not both"))
	}
	if s.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout: must not be negative, got %s", s.Timeout))
	}
	if s.Judge != nil && s.Judge.Provider == "" {
		errs = append(errs, errors.New("judge: provider is required (openai or anthropic)"))
	}
	switch {
	case len(s.Tasks) == 0:
		errs = append(errs, errors.New("tasks: a suite needs at least one task"))
	case len(s.Tasks) > cfg.MaxTasks:
		errs = append(errs, fmt.Errorf("tasks: %d tasks, more than the %d a suite may have", len(s.Tasks), cfg.MaxTasks))
	}
	names := map[string]int{}
	for i := range s.Tasks {
		t := &s.Tasks[i]
		if strings.TrimSpace(t.Name) == "" {
			bad(t.Line, "task %d has no name", i+1)
		} else if first, dup := names[t.Name]; dup {
			bad(t.Line, "task %q again (first at line %d): names tell the tasks apart in reports", t.Name, first)
		} else {
			names[t.Name] = t.Line
		}
		if strings.TrimSpace(t.Prompt) == "" {
			bad(t.Line, "task %q has no prompt", t.Name)
		}
		if t.Timeout < 0 {
			bad(t.Line, "task %q: timeout must not be negative, got %s", t.Name, t.Timeout)
		}
		if len(t.Assert) > cfg.MaxAssertions {
			bad(t.Line, "task %q: %d assertions, more than the %d a task may have", t.Name, len(t.Assert), cfg.MaxAssertions)
			continue
		}
		for j := range t.Assert {
			if err := t.Assert[j].compile(); err != nil {
				bad(t.Assert[j].Line, "task %q, assertion %d: %v", t.Name, j+1, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w:\n%w", ErrInvalidSuite, err)
	}
	return nil
}

// compile checks the assertion and prepares its regex or schema.
func (a *Assertion) compile() error {
	kind := a.Kind()
	switch {
	case kind == "":
		return errors.New("no assertion kind (status, called, not_called, in_order, gate, delegated, contains, not_contains, regex, json_schema, judge, max_cost_usd, max_tokens, max_turns)")
	case strings.Contains(kind, "+"):
		return fmt.Errorf("one kind per assertion, got %s", strings.ReplaceAll(kind, "+", ", "))
	}
	if a.Agent != "" && kind != KindCalled && kind != KindNotCalled && kind != KindInOrder && kind != KindGate {
		return fmt.Errorf("agent narrows called, not_called, in_order and gate, not %s", kind)
	}
	switch kind {
	case KindStatus:
		if !runStatuses[a.Status] {
			return fmt.Errorf("status %q: want completed, failed or cancelled", a.Status)
		}
	case KindCalled, KindNotCalled, KindInOrder:
		for _, list := range [][]string{a.Called, a.NotCalled, a.InOrder} {
			if list != nil && len(list) == 0 {
				return fmt.Errorf("%s: name at least one tool", kind)
			}
			for _, tool := range list {
				if strings.TrimSpace(tool) == "" {
					return fmt.Errorf("%s: an empty tool name", kind)
				}
			}
		}
	case KindGate:
		if a.Gate.Tool == "" || a.Gate.Decision == "" {
			return errors.New("gate: tool and decision are required")
		}
	case KindDelegated:
		if a.Delegated.To == "" {
			return errors.New("delegated: to is required")
		}
		if a.Delegated.Status != "" && !runStatuses[a.Delegated.Status] {
			return fmt.Errorf("delegated: status %q: want completed, failed or cancelled", a.Delegated.Status)
		}
	case KindRegex:
		re, err := regexp.Compile(a.Regex)
		if err != nil {
			return fmt.Errorf("regex %q does not compile: %w", a.Regex, err)
		}
		a.regex = re
	case KindJSONSchema:
		sch, err := compileSchema(a.JSONSchema)
		if err != nil {
			return fmt.Errorf("json_schema: %w", err)
		}
		a.schema = sch
	case KindJudge:
		if strings.TrimSpace(a.Judge.Rubric) == "" {
			return errors.New("judge: rubric is required")
		}
	case KindMaxCost:
		if *a.MaxCostUSD < 0 {
			return fmt.Errorf("max_cost_usd must not be negative, got %v", *a.MaxCostUSD)
		}
	case KindMaxTokens:
		if *a.MaxTokens < 0 {
			return fmt.Errorf("max_tokens must not be negative, got %d", *a.MaxTokens)
		}
	case KindMaxTurns:
		if *a.MaxTurns < 0 {
			return fmt.Errorf("max_turns must not be negative, got %d", *a.MaxTurns)
		}
	}
	return nil
}

// noRemoteRefs refuses every $ref outside the suite's own schema: a suite
// is run on machines that should not fetch what it names.
type noRemoteRefs struct{}

func (noRemoteRefs) Load(u string) (any, error) {
	return nil, fmt.Errorf("$ref %s: a suite's schema may only refer inside itself", u)
}

// compileSchema compiles a suite's inline schema. It goes through JSON so
// the library sees the numbers it decodes itself (json.Number).
func compileSchema(s map[string]any) (*jsonschema.Schema, error) {
	if d := depth(s, 0); d > maxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxSchemaDepth)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	const loc = "suite://schema.json"
	c := jsonschema.NewCompiler()
	c.UseLoader(noRemoteRefs{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// depth is v's nesting, stopping early past the bound.
func depth(v any, d int) int {
	if d > maxSchemaDepth {
		return d
	}
	deepest := d
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	case []any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	}
	return deepest
}

// Timeout is the task's timeout under the suite's and the default.
func (s Suite) TimeoutOf(t Task, def time.Duration) time.Duration {
	switch {
	case t.Timeout > 0:
		return t.Timeout
	case s.Timeout > 0:
		return s.Timeout
	}
	return def
}

// VariablesOf are the task's variables over the suite's.
func (s Suite) VariablesOf(t Task) map[string]string {
	out := make(map[string]string, len(s.Variables)+len(t.Variables))
	for k, v := range s.Variables {
		out[k] = v
	}
	for k, v := range t.Variables {
		out[k] = v
	}
	return out
}
