package pricing

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/llm"
)

//go:embed default_prices.yaml
var defaultPrices []byte

// DateLayout is the layout of as_of.
const DateLayout = "2006-01-02"

// Line is one model's entry in a table.
type Line struct {
	Provider string
	Model    string
	Rates
	// Aliases are other names the server answers with for this model.
	Aliases []string
	// Prefix is `match: prefix`: the line also prices Model followed by a
	// dated-snapshot suffix (see Table.Lookup).
	Prefix bool
	// AsOf is the as_of of the file the line came from.
	AsOf time.Time
}

type key struct{ provider, name string }

// Table is a price table: which provider+model costs what. Its methods are safe
// for concurrent use (a Table is never changed after it is built) and on a nil
// *Table, which prices nothing.
type Table struct {
	lines []Line
	// names maps every model name and alias to its line in lines.
	names map[key]int
	// origin says where each line was written, for errors.
	origin []string
}

// Default is the table shipped with the fleet (default_prices.yaml, embedded).
// Each call parses it afresh: callers keep the result.
func Default() *Table {
	t, err := Parse(defaultPrices)
	if err != nil {
		// The file is compiled in and its test loads it: this is a build defect.
		panic("pricing: the embedded default_prices.yaml is invalid: " + err.Error())
	}
	return t
}

// DefaultYAML is the text of the shipped table, for `aetherium` to show or
// write out as a starting point.
func DefaultYAML() []byte { return bytes.Clone(defaultPrices) }

// Load reads a price table file (see Parse).
func Load(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// file is the YAML document. Every value is read as a scalar's text, so prices
// stay decimal text until ParsePrice reads them.
type file struct {
	Currency scalar      `yaml:"currency"`
	AsOf     scalar      `yaml:"as_of"`
	Models   []modelLine `yaml:"models"`
}

type modelLine struct {
	Provider    scalar   `yaml:"provider"`
	Model       scalar   `yaml:"model"`
	Input       scalar   `yaml:"input"`
	Output      scalar   `yaml:"output"`
	CachedInput scalar   `yaml:"cached_input"`
	CacheWrite  scalar   `yaml:"cache_write"`
	Aliases     []scalar `yaml:"aliases"`
	Match       scalar   `yaml:"match"`
}

// scalar is a YAML scalar's text as written, and its line. A null leaves it
// unset (yaml.v3 calls no unmarshaler for a null).
type scalar struct {
	text string
	line int
	set  bool
}

func (s *scalar) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a single value here, not a list or a mapping", n.Line)
	}
	*s = scalar{text: n.Value, line: n.Line, set: true}
	return nil
}

// Parse reads a price table:
//
//	currency: USD          # required, and only USD: llm.Money is in US dollars
//	as_of: 2026-11-01      # required: the date the prices were read
//	models:
//	  - provider: openai   # required
//	    model: gpt-4o      # required
//	    input: 2.50        # required: dollars per million tokens
//	    output: 10.00      # required
//	    cached_input: 1.25 # optional; default input
//	    cache_write: 2.50  # optional; default input
//	    aliases: [gpt-4o-2024-08-06]  # optional
//	    match: prefix      # optional: also price dated snapshots of model;
//	                       # "exact" (the default) prices the names above only
//
// Prices are read exactly (ParsePrice). Refused: unknown fields, a missing
// required field, a bad price or date, a currency other than USD, no models, two
// lines for one provider+model, an alias that names another line's model or
// alias (or its own model), match other than "prefix" or "exact", more than one YAML
// document. Errors name the line's index (models[i]), the field and the line of
// the file.
func Parse(data []byte) (*Table, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pricing: empty price table")
		}
		return nil, fmt.Errorf("pricing: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pricing: a price table is one YAML document (a second one starts after the first)")
	}

	if !f.Currency.set || f.Currency.text == "" {
		return nil, fmt.Errorf("pricing: currency: missing; write `currency: USD` (llm.Money is in US dollars)")
	}
	if f.Currency.text != "USD" {
		return nil, fmt.Errorf("pricing: currency (line %d): %q is not supported: llm.Money is in US dollars, so prices must be in USD", f.Currency.line, f.Currency.text)
	}
	if !f.AsOf.set || f.AsOf.text == "" {
		return nil, fmt.Errorf("pricing: as_of: missing; write the date the prices were read, as YYYY-MM-DD")
	}
	asOf, err := time.Parse(DateLayout, f.AsOf.text)
	if err != nil {
		return nil, fmt.Errorf("pricing: as_of (line %d): %q is not a date YYYY-MM-DD", f.AsOf.line, f.AsOf.text)
	}
	if len(f.Models) == 0 {
		return nil, fmt.Errorf("pricing: models: no model lines")
	}

	lines := make([]Line, len(f.Models))
	origin := make([]string, len(f.Models))
	at := entryLines(data, len(f.Models))
	for i, m := range f.Models {
		origin[i] = fmt.Sprintf("models[%d] (line %d)", i, at[i])
		l, err := m.read(origin[i])
		if err != nil {
			return nil, fmt.Errorf("pricing: %w", err)
		}
		l.AsOf = asOf
		lines[i] = l
	}
	t, err := build(lines, origin)
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	return t, nil
}

// entryLines are the lines where each entry of models starts, read from the
// document's node tree (the struct decode keeps no line for a mapping).
func entryLines(data []byte, n int) []int {
	lines := make([]int, n)
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return lines
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "models" {
			continue
		}
		seq := doc.Content[i+1]
		if seq.Kind == yaml.AliasNode && seq.Alias != nil {
			seq = seq.Alias
		}
		for j, e := range seq.Content {
			if j < n {
				lines[j] = e.Line
			}
		}
	}
	return lines
}

func (m modelLine) read(where string) (Line, error) {
	var l Line
	for _, f := range []struct {
		name string
		s    scalar
		out  *string
	}{{"provider", m.Provider, &l.Provider}, {"model", m.Model, &l.Model}} {
		if !f.s.set || f.s.text == "" {
			return l, fmt.Errorf("%s: %s: missing", where, f.name)
		}
		if !clean(f.s.text) {
			return l, fmt.Errorf("%s: %s (line %d): %q has spaces or control characters: it would never match a server's name", where, f.name, f.s.line, f.s.text)
		}
		*f.out = f.s.text
	}
	for _, f := range []struct {
		name     string
		s        scalar
		out      *llm.Money
		required bool
	}{
		{"input", m.Input, &l.Input, true},
		{"output", m.Output, &l.Output, true},
		{"cached_input", m.CachedInput, &l.CachedInput, false},
		{"cache_write", m.CacheWrite, &l.CacheWrite, false},
	} {
		if !f.s.set {
			if f.required {
				return l, fmt.Errorf("%s %s/%s: %s: missing (dollars per million tokens)", where, l.Provider, l.Model, f.name)
			}
			// Providers without a cache discount bill these tokens as input.
			*f.out = l.Input
			continue
		}
		p, err := ParsePrice(f.s.text)
		if err != nil {
			return l, fmt.Errorf("%s %s/%s: %s (line %d): %w", where, l.Provider, l.Model, f.name, f.s.line, err)
		}
		*f.out = p
	}
	for j, a := range m.Aliases {
		if a.text == "" {
			return l, fmt.Errorf("%s %s/%s: aliases[%d] (line %d): empty", where, l.Provider, l.Model, j, a.line)
		}
		if !clean(a.text) {
			return l, fmt.Errorf("%s %s/%s: aliases[%d] (line %d): %q has spaces or control characters: it would never match a server's name", where, l.Provider, l.Model, j, a.line, a.text)
		}
		l.Aliases = append(l.Aliases, a.text)
	}
	switch {
	case !m.Match.set, m.Match.text == "exact":
	case m.Match.text == "prefix":
		l.Prefix = true
	default:
		return l, fmt.Errorf("%s %s/%s: match (line %d): %q: write `match: prefix`, or `match: exact` (the default)", where, l.Provider, l.Model, m.Match.line, m.Match.text)
	}
	return l, nil
}

// clean is a name with no space or control character, which a quoted YAML
// string could slip in and no provider answers with.
func clean(name string) bool {
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// build indexes lines, refusing any name (model or alias) that would price one
// provider's answer two ways.
func build(lines []Line, origin []string) (*Table, error) {
	t := &Table{lines: lines, origin: origin, names: make(map[key]int, len(lines))}
	for i, l := range lines {
		k := key{l.Provider, l.Model}
		if j, ok := t.names[k]; ok {
			if lines[j].Model == l.Model {
				return nil, fmt.Errorf("%s: %s/%s is already priced by %s", origin[i], l.Provider, l.Model, origin[j])
			}
			return nil, fmt.Errorf("%s: model %s/%s is already an alias of %s (%s)", origin[i], l.Provider, l.Model, lines[j].Model, origin[j])
		}
		t.names[k] = i
	}
	for i, l := range lines {
		for a, name := range l.Aliases {
			if name == l.Model {
				return nil, fmt.Errorf("%s %s/%s: aliases[%d]: %q is the line's own model", origin[i], l.Provider, l.Model, a, name)
			}
			k := key{l.Provider, name}
			if j, ok := t.names[k]; ok {
				if lines[j].Model == name {
					return nil, fmt.Errorf("%s %s/%s: aliases[%d]: %q is the model of %s", origin[i], l.Provider, l.Model, a, name, origin[j])
				}
				return nil, fmt.Errorf("%s %s/%s: aliases[%d]: %q is already an alias of %s (%s)", origin[i], l.Provider, l.Model, a, name, lines[j].Model, origin[j])
			}
			t.names[k] = i
		}
	}
	return t, nil
}

// Lookup finds the line that prices model as answered by provider: the line
// whose model is exactly that name; else the line listing it in its aliases;
// else, for a `match: prefix` line, a name that is the line's model followed by
// a dated-snapshot suffix: "-YYYY-MM-DD" or "-YYYYMMDD" (a real date) and
// nothing else. So with `gpt-4o` marked prefix, "gpt-4o-2024-08-06" is priced
// as gpt-4o, but "gpt-4o-mini" and "gpt-4o-mini-2024-07-18" never are: their
// rest is not a date. Names are compared exactly (case included); provider is
// part of the key.
func (t *Table) Lookup(provider, model string) (Line, bool) {
	i, ok := t.find(provider, model)
	if !ok {
		return Line{}, false
	}
	l := t.lines[i]
	l.Aliases = slices.Clone(l.Aliases)
	return l, true
}

func (t *Table) find(provider, model string) (int, bool) {
	if t == nil || model == "" {
		return 0, false
	}
	if i, ok := t.names[key{provider, model}]; ok {
		return i, true
	}
	base, ok := trimSnapshot(model)
	if !ok {
		return 0, false
	}
	// Only a line's own model, not an alias, takes snapshots.
	if i, ok := t.names[key{provider, base}]; ok && t.lines[i].Prefix && t.lines[i].Model == base {
		return i, true
	}
	return 0, false
}

// trimSnapshot cuts a dated-snapshot suffix off name: OpenAI's
// "-2024-08-06" or Anthropic's "-20250929".
func trimSnapshot(name string) (string, bool) {
	for _, layout := range []string{"2006-01-02", "20060102"} {
		n := len(name) - len(layout) - 1
		if n <= 0 || name[n] != '-' {
			continue
		}
		date := name[n+1:]
		if !digits(stripDashes(date)) {
			continue
		}
		if _, err := time.Parse(layout, date); err == nil {
			return name[:n], true
		}
	}
	return "", false
}

func stripDashes(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			b = append(b, s[i])
		}
	}
	return string(b)
}

// Cost is what usage u of model, answered by provider, costs by the table
// (Rates.Cost; Lookup finds the line). false when the table has no price for
// the model, or u is malformed (a negative count); the cost is then 0.
func (t *Table) Cost(provider, model string, u llm.Usage) (llm.Money, bool) {
	i, ok := t.find(provider, model)
	if !ok {
		return 0, false
	}
	return t.lines[i].Cost(u)
}

// Lines are the table's lines, in file order (for a merged table: base's
// kept lines, then over's).
func (t *Table) Lines() []Line {
	if t == nil {
		return nil
	}
	out := make([]Line, len(t.lines))
	for i, l := range t.lines {
		l.Aliases = slices.Clone(l.Aliases)
		out[i] = l
	}
	return out
}

// AsOf is the oldest as_of among the table's lines: the date of its stalest
// price (a merged table keeps each line's own date). Zero for a nil table.
func (t *Table) AsOf() time.Time {
	var oldest time.Time
	for _, l := range t.Lines() {
		if oldest.IsZero() || l.AsOf.Before(oldest) {
			oldest = l.AsOf
		}
	}
	return oldest
}

// Merge is base extended by over: over's line for a provider+model replaces
// base's whole (its prices, aliases and match; restate the aliases you want
// kept), base's other lines stay, over's new lines are added. A name over gives
// that base still uses for another line (an alias of over naming a base
// model, or a base alias naming over's model) is refused as in one file: say
// in over which line it belongs to by replacing that line too. A nil table
// counts as empty.
func Merge(base, over *Table) (*Table, error) {
	replaced := make(map[key]bool)
	for _, l := range over.Lines() {
		replaced[key{l.Provider, l.Model}] = true
	}
	var lines []Line
	var origin []string
	for i, l := range base.Lines() {
		if !replaced[key{l.Provider, l.Model}] {
			lines = append(lines, l)
			origin = append(origin, "base "+base.origin[i])
		}
	}
	for i, l := range over.Lines() {
		lines = append(lines, l)
		origin = append(origin, "over "+over.origin[i])
	}
	t, err := build(lines, origin)
	if err != nil {
		return nil, fmt.Errorf("pricing: merge: %w", err)
	}
	return t, nil
}
