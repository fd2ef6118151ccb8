package tokens

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed default_windows.yaml
var defaultWindows []byte

// Limits are a model's token limits.
type Limits struct {
	// Context is the window: input and output tokens of one call together.
	Context int `yaml:"context" json:"context"`
	// Output is the most tokens of one answer.
	Output int `yaml:"output" json:"output"`
}

// Validate: both positive, and the output smaller than the window (an answer
// that may fill the window leaves no room for the prompt).
func (l Limits) Validate() error {
	switch {
	case l.Context <= 0:
		return fmt.Errorf("context %d: must be positive", l.Context)
	case l.Output <= 0:
		return fmt.Errorf("output %d: must be positive", l.Output)
	case l.Output >= l.Context:
		return fmt.Errorf("output %d: must be less than context %d", l.Output, l.Context)
	}
	return nil
}

// Config is the window table's section of the fleet configuration: models to
// override or add, and the limits of models that match none. Its zero value
// changes nothing.
type Config struct {
	// Default replaces the limits of unknown models when set.
	Default *Limits `yaml:"default,omitempty" json:"default,omitempty"`
	// Models maps a model name, or the prefix of a family's names, to its
	// limits; an entry replaces the table's entry of that name.
	Models map[string]Limits `yaml:"models,omitempty" json:"models,omitempty"`
}

// Validate checks every entry, naming the first bad one.
func (c Config) Validate() error {
	if c.Default != nil {
		if err := c.Default.Validate(); err != nil {
			return fmt.Errorf("default: %w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		if strings.TrimSpace(name) == "" || strings.TrimSpace(name) != name {
			return fmt.Errorf("model %q: the name must be non-empty, without surrounding spaces", name)
		}
		if err := c.Models[name].Validate(); err != nil {
			return fmt.Errorf("model %q: %w", name, err)
		}
	}
	return nil
}

// Table maps models to their Limits. It is never changed once built (Merge
// returns a new one), so it is safe for concurrent use.
type Table struct {
	asOf     string
	fallback Limits
	models   map[string]Limits
	// prefixes are the model names, longest first, for the prefix lookup.
	prefixes []string
}

// file is the YAML form of a table: a Config with the date its values were
// taken.
type file struct {
	AsOf   string `yaml:"as_of"`
	Config `yaml:",inline"`
}

// Load parses a window table in the format of default_windows.yaml: as_of, a
// default (required) and models. Unknown fields are errors, so a misspelled
// key is not silently ignored.
func Load(data []byte) (*Table, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("tokens: parse window table: %w", err)
	}
	if f.Default == nil {
		return nil, errors.New("tokens: window table: no default limits (the limits of unknown models)")
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("tokens: window table: %w", err)
	}
	return build(f.AsOf, *f.Default, f.Models), nil
}

func build(asOf string, fallback Limits, models map[string]Limits) *Table {
	t := &Table{asOf: asOf, fallback: fallback, models: maps.Clone(models)}
	if t.models == nil {
		t.models = map[string]Limits{}
	}
	t.prefixes = slices.SortedFunc(maps.Keys(t.models), func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return t
}

var defaultTable = sync.OnceValue(func() *Table {
	t, err := Load(defaultWindows)
	if err != nil {
		// The file is compiled in and its test loads it: this is a build defect.
		panic("tokens: the embedded default_windows.yaml is invalid: " + err.Error())
	}
	return t
})

// Default is the table shipped with the fleet (default_windows.yaml,
// embedded), parsed once.
func Default() *Table { return defaultTable() }

// DefaultYAML is the text of the shipped table, to show or to start a
// deployment's own from.
func DefaultYAML() []byte { return bytes.Clone(defaultWindows) }

// Merge is t with c's entries over it: a model c names takes c's limits, and
// c.Default, when set, replaces the limits of unknown models.
func (t *Table) Merge(c Config) (*Table, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("tokens: window overrides: %w", err)
	}
	models := maps.Clone(t.models)
	maps.Copy(models, c.Models)
	fallback := t.fallback
	if c.Default != nil {
		fallback = *c.Default
	}
	return build(t.asOf, fallback, models), nil
}

// Lookup is the limits of model: the entry of its exact name, else of the
// longest entry that is a prefix of it, else the default (and false). Names
// are matched as given, after the last "/" when the whole name has no entry
// (gateways name models "anthropic/claude-sonnet-4-5").
func (t *Table) Lookup(model string) (Limits, bool) {
	name := strings.TrimSpace(model)
	for _, n := range []string{name, name[strings.LastIndex(name, "/")+1:]} {
		if l, ok := t.models[n]; ok {
			return l, true
		}
		for _, p := range t.prefixes {
			if strings.HasPrefix(n, p) {
				return t.models[p], true
			}
		}
	}
	return t.fallback, false
}

// Fallback is the limits of models the table does not know.
func (t *Table) Fallback() Limits { return t.fallback }

// AsOf is the date the table's values were taken, as its file gives it.
func (t *Table) AsOf() string { return t.asOf }

// Models are the table's entries (a copy).
func (t *Table) Models() map[string]Limits { return maps.Clone(t.models) }
