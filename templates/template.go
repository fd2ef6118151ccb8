// Package templates defines team templates: the supervisor and worker nodes of a run,
// their permissions, model, egress allowlist, budget and (for the script model) the
// screenplay. Templates live as YAML files in the templates directory, or inline (as
// JSON) in a run request; both go through the same validation.
package templates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/review"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Template is a team.
type Template struct {
	Name           string                    `yaml:"name" json:"name"`
	Description    string                    `yaml:"description,omitempty" json:"description,omitempty"`
	Model          llm.ModelConfig           `yaml:"model" json:"model"`
	Supervisor     Node                      `yaml:"supervisor" json:"supervisor"`
	Workers        []Node                    `yaml:"workers" json:"workers"`
	AllowedDomains []string                  `yaml:"allowed_domains" json:"allowed_domains"`
	Egress         Egress                    `yaml:"egress" json:"egress"`
	GPUServices    []string                  `yaml:"gpu_services" json:"gpu_services"`
	ToolDefaults   map[string]map[string]any `yaml:"tool_defaults" json:"tool_defaults"`
	Budget         Budget                    `yaml:"budget" json:"budget"`
	Script         script.Script             `yaml:"script" json:"script"`
	// EgressPorts are destination ports a sandbox may reach through the egress
	// proxy beyond 80 and 443.
	EgressPorts []int `yaml:"egress_ports" json:"egress_ports,omitempty"`
	// Knowledge is the team's knowledge scope beyond its project: the packs
	// (directories under knowledge.packs_dir) search_knowledge searches.
	Knowledge Knowledge `yaml:"knowledge,omitempty" json:"knowledge,omitempty"`
	// ImageModel picks the team's image model for comfyui_generate: "" or "sd"
	// (the comfyui service, the default text-to-image workflow) or "qwen" (its
	// own comfyui-qwen service with the Qwen-Image workflow, which adds ratio,
	// transparent and reference_images). The team must list the model's
	// service in gpu_services.
	ImageModel string `yaml:"image_model,omitempty" json:"image_model,omitempty"`
	// FairnessKey chooses whose share of the fleet a run of this team draws on
	// (issue 39): "owner" (the default: its submitter), "project" (its project;
	// the owner for a run without one), "team" (this team's name) or
	// "var:<name>" (the value of the template variable <name>, e.g. the customer
	// a team serves). fairness.keys configures each key's weight and limits.
	FairnessKey string `yaml:"fairness_key,omitempty" json:"fairness_key,omitempty"`
	// CountRejections makes a human reviewer's rejection of a call count toward
	// the circuit breaker like a failed call. False by default: a rejection is
	// feedback the agent acts on, not its failure.
	CountRejections bool `yaml:"count_rejections,omitempty" json:"count_rejections,omitempty"`
}

// ImageModels are the known image_model values and the GPU service each renders
// on (toolbox/comfyui keeps the workflows; a test checks the two agree).
var ImageModels = map[string]string{"sd": "comfyui", "qwen": "comfyui-qwen"}

// Knowledge names a team's knowledge packs.
type Knowledge struct {
	Packs []string `yaml:"packs,omitempty" json:"packs,omitempty"`
}

// packRE is a pack's name (knowledge.IndexPacks indexes only such directories).
var packRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Egress tightens the deployment's egress policy for one team.
type Egress struct {
	// Private is "deny" to refuse loopback and private-range destinations to this
	// team. "allow" or empty keep the deployment's security.egress.private: a team
	// can tighten it, never loosen it.
	Private string `yaml:"private,omitempty" json:"private,omitempty"`
}

// isAddrEntry tells an allowed_domains entry that names an address or a network
// prefix rather than a host name.
func isAddrEntry(d string) bool {
	if _, err := netip.ParseAddr(strings.Trim(d, "[]")); err == nil {
		return true
	}
	_, err := netip.ParsePrefix(d)
	return err == nil
}

// DenyPrivate reports whether the team refuses private ranges.
func (e Egress) DenyPrivate() bool { return e.Private == "deny" }

// Node is one agent of the team.
type Node struct {
	Name       string   `yaml:"name" json:"name"`
	Prompt     string   `yaml:"prompt" json:"prompt"`
	MCPServers []string `yaml:"mcp_servers" json:"mcp_servers"`
	Tools      []string `yaml:"tools" json:"tools"`
	// Model overrides the team's model for this node.
	Model *llm.ModelConfig `yaml:"model,omitempty" json:"model,omitempty"`
	// QA marks a quality-assurance node: its verdicts (VERDICT <page> PASS|FAIL
	// <reason> lines) count only for pages it played with play_test in the same
	// session, as they stand now (a node holding play_test is held to it too).
	QA bool `yaml:"qa,omitempty" json:"qa,omitempty"`
	// RequiredOutput is a deliverable the node's final answer must leave in the
	// workspace: an answer given while the file is missing, or has fewer spoken
	// words than asked (counted by media/script, the parser tts_render speaks
	// with), goes back to the agent with the reason, like the QA rule.
	RequiredOutput *RequiredOutput `yaml:"required_output,omitempty" json:"required_output,omitempty"`
}

// RequiredOutput is a node's required deliverable.
type RequiredOutput struct {
	// File is a workspace path (e.g. script.md).
	File string `yaml:"file" json:"file"`
	// MinSpokenWords is the least number of spoken words the file must hold
	// (speaker lines only); 0 asks only that the file exists.
	MinSpokenWords int `yaml:"min_spoken_words,omitempty" json:"min_spoken_words,omitempty"`
}

// MaxRequiredWords bounds min_spoken_words (a script far longer than anything
// tts_render reads is a typo).
const MaxRequiredWords = 1_000_000

// Budget caps a run's spend.
type Budget struct {
	// MaxTokens is the run's token budget (input + output, all agents). 0 means
	// the default of 200000.
	MaxTokens int64 `yaml:"max_tokens" json:"max_tokens"`
	// MaxCost is the run's money budget in US dollars, a decimal such as
	// "0.50" (all agents, by the fleet's price table; llm.ParseDollars). ""
	// means none. A run with one is refused at submit when one of its models
	// has no price.
	MaxCost string `yaml:"max_cost,omitempty" json:"max_cost,omitempty"`
}

// CostBudget is the run's money budget (0: none). Validate has checked it.
func (t Template) CostBudget() llm.Money {
	m, _ := llm.ParseDollars(t.Budget.MaxCost)
	return m
}

// Models lists every model the team may ask: each node's (or the team's) and
// their fallbacks, once each, in order.
func (t Template) Models() []llm.ModelConfig {
	var out []llm.ModelConfig
	seen := map[[2]string]bool{}
	add := func(m llm.ModelConfig) {
		for _, m := range append([]llm.ModelConfig{m}, m.Fallback...) {
			k := [2]string{m.Provider, m.Model}
			if !seen[k] {
				seen[k] = true
				m.Fallback = nil
				out = append(out, m)
			}
		}
	}
	for _, n := range append([]Node{t.Supervisor}, t.Workers...) {
		add(t.ModelFor(n))
	}
	return out
}

// DefaultMaxTokens applies when a template sets no budget.
const DefaultMaxTokens = 200000

// ErrInvalid wraps every validation failure; the message lists all problems.
var ErrInvalid = errors.New("invalid template")

// ErrUnknownTemplate is a template name with no file behind it.
var ErrUnknownTemplate = errors.New("unknown template")

// ParseYAML decodes a template strictly (unknown keys are errors). A run stores its
// team as JSON, so mappings inside tool arguments get string keys, as in JSON
// (YAML decodes `{1: x}` with an integer key, which JSON cannot encode).
func ParseYAML(raw []byte) (Template, error) {
	var t Template
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for _, args := range t.ToolDefaults {
		stringKeys(args)
	}
	for _, turns := range t.Script.Agents {
		for i := range turns {
			for j := range turns[i].Calls {
				stringKeys(turns[i].Calls[j].Args)
			}
		}
	}
	return t, nil
}

// stringKeys rewrites the nested mappings of m that have non-string keys into
// string-keyed ones, in place.
func stringKeys(m map[string]any) {
	for k, v := range m {
		m[k] = jsonValue(v)
	}
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			out[fmt.Sprint(k)] = jsonValue(vv)
		}
		return out
	case map[string]any:
		stringKeys(x)
	case []any:
		for i, vv := range x {
			x[i] = jsonValue(vv)
		}
	}
	return v
}

// ParseJSON decodes an inline template strictly.
func ParseJSON(raw []byte) (Template, error) {
	var t Template
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return t, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
var subagentRE = regexp.MustCompile(`^(.+)-sub-\d+$`)
var agentRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Providers are the model providers a template may name.
var Providers = []string{"script", "openai", "anthropic"}

// MaxFallbacks bounds a model's fallback chain.
const MaxFallbacks = 3

// Validate lists every problem at once, so an author fixes a template in one pass.
// Limits on names that reach logs, events and (bounded, see metrics.LabelSet)
// metrics labels.
const (
	MaxModelName = 128
	MaxTeamName  = 128
)

var modelRE = regexp.MustCompile(`^[A-Za-z0-9._:/@+-]{1,128}$`)

func (t *Template) Validate(reg *tools.Registry) error {
	var errs []string
	add := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if t.Name == "" {
		add("name: required")
	} else if len(t.Name) > MaxTeamName || strings.ContainsFunc(t.Name, unicode.IsControl) {
		add("name: %.80q must be at most %d characters, none of them control characters", t.Name, MaxTeamName)
	}
	var checkModel func(where string, m llm.ModelConfig)
	checkModel = func(where string, m llm.ModelConfig) {
		if !containsStr(Providers, m.Provider) {
			add("%s.provider: %q is not one of %s", where, m.Provider, strings.Join(Providers, ", "))
		}
		if m.Model != "" && !modelRE.MatchString(m.Model) {
			add("%s.model: %.80q must be 1-%d letters, digits or . _ - : / @ +", where, m.Model, MaxModelName)
		}
		if len(m.Fallback) > MaxFallbacks {
			add("%s.fallback: %d fallbacks, at most %d", where, len(m.Fallback), MaxFallbacks)
		}
		for i, f := range m.Fallback {
			fw := fmt.Sprintf("%s.fallback[%d]", where, i)
			switch {
			case len(f.Fallback) > 0:
				add("%s.fallback: a fallback has no fallbacks of its own (list them all on the model)", fw)
			case f.Model == "":
				add("%s.model: required (a fallback names its model)", fw)
			case f.Provider == "script" || m.Provider == "script":
				add("%s: the script model neither falls back nor is a fallback", fw)
			case f.Provider == m.Provider && f.Model == m.Model:
				add("%s: falls back to the model itself", fw)
			}
			checkModel(fw, llm.ModelConfig{Provider: f.Provider, Model: f.Model, MaxTokens: f.MaxTokens})
		}
	}
	checkModel("model", t.Model)
	if err := CheckFairnessKey(t.FairnessKey); err != nil {
		add("fairness_key: %v", err)
	}
	if t.Budget.MaxCost != "" {
		if _, err := llm.ParseDollars(t.Budget.MaxCost); err != nil {
			add("budget.max_cost: %v", err)
		}
	}
	if t.ImageModel != "" {
		if svc, ok := ImageModels[t.ImageModel]; !ok {
			add("image_model: %.80q is not one of sd, qwen", t.ImageModel)
		} else if !containsStr(t.GPUServices, svc) {
			add("image_model: %s renders on the %s GPU service: add it to gpu_services", t.ImageModel, svc)
		}
	}
	for i, p := range t.Knowledge.Packs {
		if !packRE.MatchString(p) {
			add("knowledge.packs[%d]: %.80q must be [a-z0-9][a-z0-9_-]* (at most 64), a directory under knowledge.packs_dir", i, p)
		}
	}
	names := map[string]bool{}
	nodes := append([]Node{t.Supervisor}, t.Workers...)
	for i, n := range nodes {
		where := "supervisor"
		if i > 0 {
			where = fmt.Sprintf("workers[%d]", i-1)
		}
		switch {
		case n.Name == "":
			add("%s.name: required", where)
		case !agentRE.MatchString(n.Name):
			add("%s.name: %q must be letters, digits, - or _ (max 64)", where, n.Name)
		case names[n.Name]:
			add("%s.name: duplicate agent name %q", where, n.Name)
		}
		names[n.Name] = true
		for _, g := range n.MCPServers {
			if !tools.IsGroup(g) {
				add("%s.mcp_servers: unknown server group %q", where, g)
			}
		}
		for _, tool := range n.Tools {
			if _, ok := tools.GroupOf(tool); !ok {
				add("%s.tools: unknown tool %q", where, tool)
			} else if _, ok := reg.Spec(tool); !ok {
				add("%s.tools: tool %q is not available in this build", where, tool)
			}
		}
		if n.Model != nil {
			checkModel(where+".model", *n.Model)
		}
		if ro := n.RequiredOutput; ro != nil {
			if ro.File == "" {
				add("%s.required_output.file: required", where)
			} else if c, err := workspace.Clean(ro.File); err != nil {
				add("%s.required_output.file: %v", where, err)
			} else if c == "." {
				add("%s.required_output.file: %q is the workspace itself, not a file", where, ro.File)
			}
			if ro.MinSpokenWords < 0 || ro.MinSpokenWords > MaxRequiredWords {
				add("%s.required_output.min_spoken_words: %d is outside 0..%d", where, ro.MinSpokenWords, MaxRequiredWords)
			}
		}
		if i > 0 && len(n.MCPServers) == 0 && len(n.Tools) == 0 {
			add("%s: a worker needs mcp_servers or tools", where)
		}
	}
	for _, d := range t.AllowedDomains {
		if isAddrEntry(d) {
			continue // an address or a network prefix (a private destination)
		}
		if strings.TrimPrefix(d, "*.") == "" || strings.ContainsAny(d, "/: ") || strings.Count(d, "*") > 1 || (strings.Contains(d, "*") && !strings.HasPrefix(d, "*.")) {
			add("allowed_domains: %q must be a host name, *.example.com, an IP address or a prefix (10.0.0.0/8)", d)
		}
	}
	for _, p := range t.EgressPorts {
		if p < 1 || p > 65535 {
			add("egress_ports: %d is not a port (1-65535)", p)
		}
	}
	if p := t.Egress.Private; p != "" && p != "allow" && p != "deny" {
		add("egress.private: want allow or deny, got %q", p)
	}
	for tool := range t.ToolDefaults {
		if _, ok := tools.GroupOf(tool); !ok {
			add("tool_defaults: unknown tool %q", tool)
		}
	}
	if t.Budget.MaxTokens < 0 {
		add("budget.max_tokens: must not be negative")
	}
	agents := make([]string, 0, len(t.Script.Agents))
	for a := range t.Script.Agents {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		// Subagents spawned by an agent are named <agent>-sub-<n>; their script
		// lines are valid when the parent is on the team.
		if m := subagentRE.FindStringSubmatch(a); m != nil && names[m[1]] {
			continue
		}
		// So are the lines of an agent's code_review reviewer, <agent>-reviewer.
		if c := review.Caller(a); c != a && names[c] {
			continue
		}
		if !names[a] {
			add("script.agents: %q is not an agent of this team", a)
		}
	}
	for _, e := range t.Script.Validate() {
		errs = append(errs, e.Error())
	}
	usesScript := t.Model.Provider == "script"
	for _, n := range nodes {
		if n.Model != nil && n.Model.Provider == "script" {
			usesScript = true
		}
	}
	if usesScript && len(t.Script.Agents) == 0 {
		add("script: provider script needs script.agents")
	}
	// A run stores its team as JSON: a value JSON cannot carry (YAML's .inf, .nan)
	// must fail here, not as a failed submission.
	if _, err := json.Marshal(t); err != nil {
		add("not representable as JSON, which is how a run stores its team: %v", err)
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%w %q: %s", ErrInvalid, t.Name, strings.Join(errs, "; "))
	}
	return nil
}

// MaxRenderedBytes bounds what the placeholders of a team's prompts expand to, all
// prompts together: an inline team is outsider input, and a variable repeated in
// a prompt multiplies the request's size.
const MaxRenderedBytes = 1 << 20

// ErrRenderTooLarge is a rendering past MaxRenderedBytes.
var ErrRenderTooLarge = fmt.Errorf("rendered prompts are over %d bytes", MaxRenderedBytes)

// Render fills {{.var}} placeholders of every prompt from vars; a placeholder with no
// variable is an error (a prompt with a hole would mislead the model silently).
// Placeholders are all a prompt may contain: the rest of Go's template language
// (range, printf, template calls) lets a few bytes of input run for hours or
// expand to gigabytes, so it is refused.
func (t Template) Render(vars map[string]any) (Template, error) {
	out := t
	budget := &cappedBuilder{left: MaxRenderedBytes}
	render := func(where, s string) (string, error) {
		if !strings.Contains(s, "{{") {
			return s, nil
		}
		tpl, err := template.New(where).Option("missingkey=error").Parse(s)
		if err != nil {
			return "", fmt.Errorf("%w: %s.prompt: %v", ErrInvalid, where, err)
		}
		if err := onlyPlaceholders(tpl); err != nil {
			return "", fmt.Errorf("%w: %s.prompt: %v", ErrInvalid, where, err)
		}
		budget.b.Reset()
		if err := tpl.Execute(budget, vars); err != nil {
			if errors.Is(err, ErrRenderTooLarge) {
				return "", fmt.Errorf("%w: %s.prompt: %w", ErrInvalid, where, ErrRenderTooLarge)
			}
			return "", fmt.Errorf("%w: %s.prompt: %v", ErrInvalid, where, err)
		}
		return budget.b.String(), nil
	}
	var err error
	if out.Supervisor.Prompt, err = render("supervisor", t.Supervisor.Prompt); err != nil {
		return t, err
	}
	out.Workers = make([]Node, len(t.Workers))
	for i, w := range t.Workers {
		out.Workers[i] = w
		if out.Workers[i].Prompt, err = render("workers."+w.Name, w.Prompt); err != nil {
			return t, err
		}
	}
	return out, nil
}

// onlyPlaceholders accepts text and {{.name}} actions (.a.b reaches into a map
// variable), nothing else.
func onlyPlaceholders(tpl *template.Template) error {
	if len(tpl.Templates()) > 1 {
		return errors.New("only {{.name}} placeholders are allowed (found a template definition)")
	}
	for _, n := range tpl.Tree.Root.Nodes {
		switch x := n.(type) {
		case *parse.TextNode:
			continue
		case *parse.ActionNode:
			if p := x.Pipe; len(p.Decl) == 0 && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
				if _, ok := p.Cmds[0].Args[0].(*parse.FieldNode); ok {
					continue
				}
			}
		}
		return fmt.Errorf("only {{.name}} placeholders are allowed, not %s", clipNode(n.String()))
	}
	return nil
}

func clipNode(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return s
}

// cappedBuilder is a strings.Builder that refuses to grow past a byte budget shared
// by every prompt of one Render.
type cappedBuilder struct {
	b    strings.Builder
	left int
}

func (c *cappedBuilder) Write(p []byte) (int, error) {
	if len(p) > c.left {
		return 0, ErrRenderTooLarge
	}
	c.left -= len(p)
	return c.b.Write(p)
}

// Worker returns the worker node named name.
func (t Template) Worker(name string) (Node, bool) {
	for _, w := range t.Workers {
		if w.Name == name {
			return w, true
		}
	}
	return Node{}, false
}

// ModelFor returns the model of a node (its own, else the team's).
func (t Template) ModelFor(n Node) llm.ModelConfig {
	if n.Model != nil {
		return *n.Model
	}
	return t.Model
}

// TokenBudget is the effective budget.
func (t Template) TokenBudget() int64 {
	if t.Budget.MaxTokens == 0 {
		return DefaultMaxTokens
	}
	return t.Budget.MaxTokens
}

// Dir loads templates by name from a directory.
type Dir struct{ Path string }

// Load reads, parses and validates <Path>/<name>.yaml.
func (d Dir) Load(name string, reg *tools.Registry) (Template, error) {
	if !nameRE.MatchString(name) {
		return Template{}, fmt.Errorf("%w %q: names are lowercase letters, digits, - or _", ErrUnknownTemplate, name)
	}
	raw, err := os.ReadFile(filepath.Join(d.Path, name+".yaml"))
	if errors.Is(err, os.ErrNotExist) {
		return Template{}, fmt.Errorf("%w %q (no %s.yaml in %s)", ErrUnknownTemplate, name, name, d.Path)
	}
	if err != nil {
		return Template{}, fmt.Errorf("template %q: %w", name, err)
	}
	t, err := ParseYAML(raw)
	if err != nil {
		return t, fmt.Errorf("template %q: %w", name, err)
	}
	if err := t.Validate(reg); err != nil {
		return t, err
	}
	return t, nil
}

// List returns the template names in the directory.
func (d Dir) List() ([]string, error) {
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, fmt.Errorf("templates dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && nameRE.MatchString(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Owner names the shipped template that owns a team name: the one whose file is
// named name, or whose own name: field is name (case and surrounding space ignored,
// so "Demo " does not pass for "demo"). Permission rules match team names, so an
// inline team (named by whoever submits it) must not take a shipped template's. A
// missing directory ships nothing; a template file that does not parse still owns
// its file name.
func (d Dir) Owner(name string) (owner string, ok bool, err error) {
	want := strings.TrimSpace(name)
	names, err := d.List()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	for _, n := range names {
		if strings.EqualFold(n, want) {
			return n, true, nil
		}
		raw, err := os.ReadFile(filepath.Join(d.Path, n+".yaml"))
		if err != nil {
			continue // removed since List: it owns nothing any more
		}
		var head struct {
			Name string `yaml:"name"`
		}
		if yaml.Unmarshal(raw, &head) == nil && head.Name != "" && strings.EqualFold(strings.TrimSpace(head.Name), want) {
			return n, true, nil
		}
	}
	return "", false, nil
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// varNameRE is a template variable's name in fairness_key "var:<name>".
var varNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// CheckFairnessKey accepts a team's fairness_key: "", "owner", "project",
// "team" or "var:<name>".
func CheckFairnessKey(k string) error {
	switch k {
	case "", "owner", "project", "team":
		return nil
	}
	if name, ok := strings.CutPrefix(k, "var:"); ok && varNameRE.MatchString(name) {
		return nil
	}
	return fmt.Errorf("%.80q is not owner, project, team or var:<variable name>", k)
}
