package quality

import (
	"context"
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// StyleArgs are record_style's arguments.
type StyleArgs struct {
	Direction string `json:"direction" jsonschema:"description=The approved design direction, as prose (it becomes the record's Direction section)"`
	Rules     string `json:"rules" jsonschema:"description=The rules a later run must not break, as prose (the record's Rules section)"`
	// Stylesheet is required; MoreStylesheets add to the same tables.
	Stylesheet      string   `json:"stylesheet" jsonschema:"description=The stylesheet (.css, workspace path) the token tables are generated from"`
	MoreStylesheets []string `json:"more_stylesheets,omitempty" jsonschema:"description=Further .css files whose tokens join the same tables"`
	Out             string   `json:"out,omitempty" jsonschema:"description=Where to write the record (a .md workspace path; default STYLE.md)"`
}

// StyleSummary is record_style's answer: where the record is and what its tables
// hold (the tables themselves are in the file).
type StyleSummary struct {
	Path             string   `json:"path"`
	Stylesheets      []string `json:"stylesheets"`
	Colours          int      `json:"colours"`
	ContrastPairs    int      `json:"contrast_pairs"`
	ContrastFailures int      `json:"contrast_failures"`
	FontFamilies     int      `json:"font_families"`
	TypeScale        int      `json:"type_scale"`
	SpacingSteps     int      `json:"spacing_steps"`
	RadiusSteps      int      `json:"radius_steps"`
	Shadows          int      `json:"shadows"`
	Breakpoints      int      `json:"breakpoints"`
	CustomProperties int      `json:"custom_properties"`
	// UnresolvedVars are var() references with neither a definition nor a
	// fallback in the stylesheets given.
	UnresolvedVars []string `json:"unresolved_vars,omitempty"`
}

// Limits of record_style.
const (
	// StyleRecord is where record_style writes without an out argument.
	StyleRecord      = "STYLE.md"
	maxStylesheets   = 16
	maxStylesheetLen = 1 << 20 // per stylesheet
	maxProseLen      = 32 << 10
)

// registerStyle adds record_style.
func registerStyle(reg *tools.Registry, ws workspace.Config) {
	tools.Register(reg, "record_style", "Write the style record (default STYLE.md): the approved direction and the rules a later run must not break, as prose, "+
		"plus token tables generated from the stylesheet itself — colours with use counts, contrast pairs (WCAG AA), font families, type scale, spacing, radii, shadows, "+
		"breakpoints and custom properties — so the record cannot document a palette the code does not contain. Returns a JSON summary.",
		func(ctx context.Context, call tools.Call, a StyleArgs) (tools.Result, error) {
			res, err := recordStyle(ctx, call, a, ws)
			if err != nil {
				return tools.Result{}, fmt.Errorf("record_style: %w", explainQuota(call, err))
			}
			return res, nil
		}, tools.Idempotent(), tools.WritesPath("out", StyleRecord), tools.InGroup("quality"))
}

// explainQuota turns a write that did not fit the workspace's quota (ENOSPC in
// a quota workspace) into "workspace quota exceeded: …" instead of the bare
// "no space left on device".
func explainQuota(call tools.Call, err error) error {
	if s := call.Session; s != nil && s.Workspace != "" {
		return wsquota.Explain(s.Workspace, err)
	}
	return err
}

func recordStyle(ctx context.Context, call tools.Call, a StyleArgs, ws workspace.Config) (tools.Result, error) {
	direction, rules := strings.TrimSpace(a.Direction), strings.TrimSpace(a.Rules)
	if direction == "" || rules == "" {
		return tools.Result{}, fmt.Errorf("direction and rules are both required (prose: the approved direction, and the rules a later run must not break)")
	}
	if len(direction) > maxProseLen || len(rules) > maxProseLen {
		return tools.Result{}, fmt.Errorf("direction and rules are limited to %d bytes each", maxProseLen)
	}
	out := a.Out
	if out == "" {
		out = StyleRecord
	}
	outRel, err := cleanPathArg(out)
	if err != nil {
		return tools.Result{}, fmt.Errorf("out: %w", err)
	}
	if !strings.EqualFold(path.Ext(outRel), ".md") {
		return tools.Result{}, fmt.Errorf("out: %q must be a .md file", out)
	}
	var sheets []string
	for _, s := range append([]string{a.Stylesheet}, a.MoreStylesheets...) {
		rel, err := cleanPathArg(s)
		if err != nil {
			return tools.Result{}, fmt.Errorf("stylesheet: %w", err)
		}
		if !strings.EqualFold(path.Ext(rel), ".css") {
			return tools.Result{}, fmt.Errorf("stylesheet: %q is not a .css file", s)
		}
		if !inStrings(sheets, rel) {
			sheets = append(sheets, rel)
		}
	}
	if len(sheets) > maxStylesheets {
		return tools.Result{}, fmt.Errorf("stylesheet: %d files, the limit is %d", len(sheets), maxStylesheets)
	}
	root, _, err := openSessionRoot(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer root.Close()
	sheet := &cssSheet{}
	for _, rel := range sheets {
		src, err := readRootFile(root, rel, maxStylesheetLen)
		if err != nil {
			return tools.Result{}, fmt.Errorf("stylesheet: %w", err)
		}
		if !utf8.Valid(src) || strings.ContainsRune(string(src), 0) {
			return tools.Result{}, fmt.Errorf("stylesheet: %s is not UTF-8 text", rel)
		}
		if err := parseStylesheet(sheet, rel, src, 0); err != nil {
			return tools.Result{}, fmt.Errorf("stylesheet does not parse: %w", err)
		}
	}
	t := buildStyleTables(sheet)
	doc := renderStyle(direction, rules, sheets, t)
	if int64(len(doc)) > ws.MaxFileBytes && ws.MaxFileBytes > 0 {
		return tools.Result{}, fmt.Errorf("%w: the record would be %d bytes, the limit is %d", workspace.ErrTooLarge, len(doc), ws.MaxFileBytes)
	}
	if err := writeRootFile(root, outRel, []byte(doc), ws.Owner); err != nil {
		return tools.Result{}, err
	}
	sum := StyleSummary{Path: outRel, Stylesheets: sheets, Colours: len(t.colours), ContrastPairs: len(t.contrast),
		FontFamilies: len(t.families), TypeScale: len(t.typeScale), SpacingSteps: len(t.spacing), RadiusSteps: len(t.radius),
		Shadows: len(t.shadows), Breakpoints: len(t.breakpoints), CustomProperties: len(t.vars), UnresolvedVars: t.unresolved}
	for _, c := range t.contrast {
		if c.aa == "fail" {
			sum.ContrastFailures++
		}
	}
	return tools.JSON(sum)
}

type colourRow struct {
	colour string
	uses   int
	vars   []string
}

type contrastRow struct {
	selector, fg, bg string
	ratio            float64 // NaN: not computable (translucent background)
	aa, aaLarge      string
}

type familyRow struct {
	family   string
	uses     int
	fontFace bool
}

type stepRow struct {
	dim  dimension
	uses int
}

type shadowRow struct {
	value string
	uses  int
}

type breakpointRow struct {
	kind string
	dim  dimension
	uses int
}

type varRow struct {
	name             string
	values, resolved []string
	uses             int
}

// styleTables are the generated sections of the style record.
type styleTables struct {
	colours     []colourRow
	contrast    []contrastRow
	families    []familyRow
	typeScale   []stepRow
	spacing     []stepRow
	radius      []stepRow
	shadows     []shadowRow
	breakpoints []breakpointRow
	vars        []varRow
	unresolved  []string
}

// cssWideKeyword is a value that names no token (inherit, …).
func cssWideKeyword(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "inherit", "initial", "unset", "revert", "revert-layer", "none", "":
		return true
	}
	return false
}

func isSpacingProp(p string) bool {
	switch p {
	case "gap", "row-gap", "column-gap", "grid-gap", "grid-row-gap", "grid-column-gap":
		return true
	}
	return strings.HasPrefix(p, "margin") || strings.HasPrefix(p, "padding")
}

// stepCounter counts lengths once per declaration.
type stepCounter struct {
	rows  map[string]*stepRow
	order []string
}

func newStepCounter() *stepCounter { return &stepCounter{rows: map[string]*stepRow{}} }

func (s *stepCounter) add(ds []dimension) {
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.text] {
			continue
		}
		seen[d.text] = true
		r, ok := s.rows[d.text]
		if !ok {
			r = &stepRow{dim: d}
			s.rows[d.text] = r
			s.order = append(s.order, d.text)
		}
		r.uses++
	}
}

func (s *stepCounter) sorted() []stepRow {
	out := make([]stepRow, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, *s.rows[k])
	}
	sortDimensions(out, func(r stepRow) dimension { return r.dim })
	return out
}

// buildStyleTables counts the tokens of sheet. A count is the number of
// declarations using the token, literally or through var(); a var() with several
// definitions (themes, media queries) counts toward every value it can take.
func buildStyleTables(sheet *cssSheet) styleTables {
	r := newVarResolver(sheet.decls)
	var t styleTables
	colours := map[string]*colourRow{}
	colourRowOf := func(c rgba) *colourRow {
		k := c.String()
		row, ok := colours[k]
		if !ok {
			row = &colourRow{colour: k}
			colours[k] = row
		}
		return row
	}
	families := map[string]*familyRow{}
	var familyOrder []string
	familyRowOf := func(f string) *familyRow {
		k := strings.ToLower(f)
		row, ok := families[k]
		if !ok {
			row = &familyRow{family: f}
			families[k] = row
			familyOrder = append(familyOrder, k)
		}
		return row
	}
	typeScale, spacing, radius := newStepCounter(), newStepCounter(), newStepCounter()
	shadows := map[string]*shadowRow{}
	var shadowOrder []string
	type ruleColours struct {
		selector, atRule string
		fg, bg           string // values as declared, var()s unresolved
	}
	rules := map[int]*ruleColours{}
	var ruleOrder []int

	for _, d := range sheet.decls {
		isVar := strings.HasPrefix(d.prop, "--")
		variants := r.resolve(d.value, true)
		// Colours, once per declaration.
		seen := map[string]bool{}
		for _, v := range variants {
			for _, c := range coloursIn(d.prop, v) {
				row := colourRowOf(c)
				if isVar {
					if !inStrings(row.vars, d.prop) {
						row.vars = append(row.vars, d.prop)
					}
					continue
				}
				if !seen[row.colour] {
					seen[row.colour] = true
					row.uses++
				}
			}
		}
		if isVar {
			continue
		}
		if d.rule >= 0 && (d.prop == "color" || d.prop == "background-color" || d.prop == "background") {
			rc, ok := rules[d.rule]
			if !ok {
				rc = &ruleColours{selector: d.selector, atRule: d.atRule}
				rules[d.rule] = rc
				ruleOrder = append(ruleOrder, d.rule)
			}
			// The last declaration of the rule wins, as in the cascade.
			if d.prop == "color" {
				rc.fg = d.value
			} else {
				rc.bg = d.value
			}
		}
		switch {
		case d.prop == "font-family":
			fs := map[string]bool{}
			for _, v := range variants {
				for _, f := range fontFamilies(v) {
					row := familyRowOf(f)
					if d.atRule == "@font-face" {
						row.fontFace = true
						continue
					}
					if !fs[strings.ToLower(f)] {
						fs[strings.ToLower(f)] = true
						row.uses++
					}
				}
			}
		case d.prop == "font":
			fs := map[string]bool{}
			var sizes []dimension
			for _, v := range variants {
				size, fam, ok := fontShorthand(v)
				if !ok {
					continue
				}
				sizes = append(sizes, fontSizeDim(size))
				for _, f := range fontFamilies(fam) {
					if !fs[strings.ToLower(f)] {
						fs[strings.ToLower(f)] = true
						familyRowOf(f).uses++
					}
				}
			}
			typeScale.add(sizes)
		case d.prop == "font-size":
			var sizes []dimension
			for _, v := range variants {
				if !cssWideKeyword(v) {
					sizes = append(sizes, fontSizeDim(v))
				}
			}
			typeScale.add(sizes)
		case isSpacingProp(d.prop):
			var ds []dimension
			for _, v := range variants {
				ds = append(ds, lengthsIn(v)...)
			}
			spacing.add(ds)
		case strings.HasSuffix(d.prop, "radius"):
			var ds []dimension
			for _, v := range variants {
				ds = append(ds, lengthsIn(v)...)
			}
			radius.add(ds)
		case d.prop == "box-shadow" || d.prop == "text-shadow":
			ss := map[string]bool{}
			for _, v := range variants {
				// The parser drops the space after commas; put it back to read.
				v = strings.ReplaceAll(v, ",", ", ")
				if cssWideKeyword(v) || ss[v] {
					continue
				}
				ss[v] = true
				row, ok := shadows[v]
				if !ok {
					row = &shadowRow{value: v}
					shadows[v] = row
					shadowOrder = append(shadowOrder, v)
				}
				row.uses++
			}
		}
	}

	for _, row := range colours {
		sort.Strings(row.vars)
		t.colours = append(t.colours, *row)
	}
	sort.Slice(t.colours, func(i, j int) bool {
		a, b := t.colours[i], t.colours[j]
		if a.uses != b.uses {
			return a.uses > b.uses
		}
		return a.colour < b.colour
	})

	for _, idx := range ruleOrder {
		rc := rules[idx]
		if rc.fg == "" || rc.bg == "" {
			continue
		}
		t.contrast = append(t.contrast, contrastPairs(r, rc.selector, rc.atRule, rc.fg, rc.bg)...)
	}

	for _, k := range familyOrder {
		t.families = append(t.families, *families[k])
	}
	sort.SliceStable(t.families, func(i, j int) bool { return t.families[i].uses > t.families[j].uses })

	t.typeScale, t.spacing, t.radius = typeScale.sorted(), spacing.sorted(), radius.sorted()
	for _, k := range shadowOrder {
		t.shadows = append(t.shadows, *shadows[k])
	}
	sort.SliceStable(t.shadows, func(i, j int) bool { return t.shadows[i].uses > t.shadows[j].uses })

	bps := map[string]*breakpointRow{}
	for _, m := range sheet.media {
		for _, bp := range breakpointsIn(m) {
			k := bp.kind + " " + bp.dim.text
			row, ok := bps[k]
			if !ok {
				row = &breakpointRow{kind: bp.kind, dim: bp.dim}
				bps[k] = row
			}
			row.uses++
		}
	}
	for _, row := range bps {
		t.breakpoints = append(t.breakpoints, *row)
	}
	sort.Slice(t.breakpoints, func(i, j int) bool {
		a, b := t.breakpoints[i], t.breakpoints[j]
		if a.dim.text != b.dim.text {
			an, bn := math.IsNaN(a.dim.px), math.IsNaN(b.dim.px)
			switch {
			case an != bn:
				return !an
			case !an && a.dim.px != b.dim.px:
				return a.dim.px < b.dim.px
			}
			return a.dim.text < b.dim.text
		}
		return a.kind < b.kind
	})

	names := make([]string, 0, len(r.defs))
	for n := range r.defs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row := varRow{name: n, values: r.defs[n], uses: r.used[n]}
		for _, v := range r.defs[n] {
			for _, res := range r.resolve(v, false) {
				if !inStrings(row.resolved, res) {
					row.resolved = append(row.resolved, res)
				}
			}
		}
		t.vars = append(t.vars, row)
	}
	for n := range r.unresolved {
		t.unresolved = append(t.unresolved, n)
	}
	sort.Strings(t.unresolved)
	return t
}

// contrastPairs measures a rule's text colour on its background colour: once as
// the values resolve at :root, and once per scope that redefines a custom
// property they use (a dark theme's ink is measured on the dark theme's paper,
// never on the light one).
func contrastPairs(r *varResolver, selector, atRule, fg, bg string) []contrastRow {
	sel := selector
	if atRule != "" {
		sel += " (in " + atRule + ")"
	}
	var out []contrastRow
	seen := map[[2]rgba]bool{}
	for i, scope := range append([]string{""}, r.scopes...) {
		fv, fIn := r.resolveIn(fg, scope, 0)
		bv, bIn := r.resolveIn(bg, scope, 0)
		if i > 0 && !fIn && !bIn {
			continue
		}
		// A pair needs one colour on each side: a gradient background has no
		// single colour to measure against.
		fc, bc := coloursIn("color", fv), coloursIn("background", bv)
		if len(fc) != 1 || len(bc) != 1 || seen[[2]rgba{fc[0], bc[0]}] {
			continue
		}
		seen[[2]rgba{fc[0], bc[0]}] = true
		row := contrastRow{selector: sel, fg: fc[0].String(), bg: bc[0].String(), ratio: math.NaN(), aa: "n/a", aaLarge: "n/a"}
		if i > 0 {
			row.selector += " with the custom properties of " + scope
		}
		if bc[0].a == 255 {
			row.ratio = contrastRatio(fc[0], bc[0])
			row.aa, row.aaLarge = passFail(row.ratio >= 4.5), passFail(row.ratio >= 3)
		}
		out = append(out, row)
	}
	return out
}

func hasRGBA(xs []rgba, x rgba) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "fail"
}

// fontSizeDim is a font-size value as a type-scale step.
func fontSizeDim(v string) dimension {
	v = strings.TrimSpace(v)
	if px, ok := fontSizeKeyword(strings.ToLower(v)); ok {
		return dimension{text: strings.ToLower(v), px: px}
	}
	if toks := valueTokens(v); len(toks) == 1 {
		return normalDimension(v)
	}
	return dimension{text: strings.ToLower(v), px: math.NaN()}
}

// mdCell makes a value safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	return s
}

func mdCode(s string) string {
	if s == "" {
		return ""
	}
	return "`" + mdCell(strings.ReplaceAll(s, "`", "'")) + "`"
}

func pxCell(d dimension) string {
	if math.IsNaN(d.px) {
		return "—"
	}
	return strconv.FormatFloat(math.Round(d.px*100)/100, 'f', -1, 64)
}

// mdSection writes one generated section: a heading, then the sentence none
// when there are no rows, else an optional intro and a table whose header cells
// are "name" or "name:" (right-aligned, for counts).
func mdSection(b *strings.Builder, title, none, intro string, header []string, rows [][]string) {
	fmt.Fprintf(b, "## %s\n\n", title)
	if len(rows) == 0 {
		fmt.Fprintf(b, "%s\n\n", none)
		return
	}
	if intro != "" {
		fmt.Fprintf(b, "%s\n\n", intro)
	}
	names, rules := make([]string, len(header)), make([]string, len(header))
	for i, h := range header {
		names[i], rules[i] = strings.TrimSuffix(h, ":"), "---"
		if strings.HasSuffix(h, ":") {
			rules[i] = "---:"
		}
	}
	fmt.Fprintf(b, "| %s |\n| %s |\n", strings.Join(names, " | "), strings.Join(rules, " | "))
	for _, r := range rows {
		fmt.Fprintf(b, "| %s |\n", strings.Join(r, " | "))
	}
	b.WriteString("\n")
}

func mdCodes(xs []string, sep string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = mdCode(x)
	}
	return strings.Join(out, sep)
}

// renderStyle writes the record. It carries no timestamp: the same stylesheet
// and prose give the same file, so a re-run shows only real changes in a diff.
func renderStyle(direction, rules string, sheets []string, t styleTables) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Style record\n\nThe token tables below are generated by record_style from %s; "+
		"edit the stylesheet and run record_style again rather than editing them.\n\n", mdCodes(sheets, ", "))
	fmt.Fprintf(&b, "## Direction\n\n%s\n\n## Rules\n\n%s\n\n", direction, rules)

	var rows [][]string
	for _, c := range t.colours {
		rows = append(rows, []string{mdCode(c.colour), strconv.Itoa(c.uses), mdCodes(c.vars, ", ")})
	}
	mdSection(&b, "Colours", "No colours.",
		"Uses count the declarations that set the colour, literally or through var(); 0 means only a custom property holds it.",
		[]string{"colour", "uses:", "custom properties"}, rows)

	rows = nil
	for _, c := range t.contrast {
		ratio, aa, large := "—", "n/a (translucent background)", "n/a"
		if !math.IsNaN(c.ratio) {
			// Truncated, never rounded up: 4.496 must not read as 4.50.
			ratio, aa, large = strconv.FormatFloat(math.Floor(c.ratio*100)/100, 'f', 2, 64)+":1", c.aa, c.aaLarge
		}
		rows = append(rows, []string{mdCode(c.selector), mdCode(c.fg), mdCode(c.bg), ratio, aa, large})
	}
	mdSection(&b, "Contrast pairs", "No rule declares both a text colour and a background colour.",
		"Text colour on background colour declared in the same rule; WCAG 2 AA needs 4.5:1 for body text and 3:1 for large text.",
		[]string{"rule", "colour", "background", "ratio:", "AA", "AA large"}, rows)

	rows = nil
	for _, f := range t.families {
		face := ""
		if f.fontFace {
			face = "yes"
		}
		rows = append(rows, []string{mdCell(f.family), strconv.Itoa(f.uses), face})
	}
	mdSection(&b, "Font families", "No font families.", "", []string{"family", "uses:", "@font-face"}, rows)

	for _, st := range []struct {
		title, none string
		rows        []stepRow
	}{
		{"Type scale", "No font sizes.", t.typeScale},
		{"Spacing steps", "No margins, paddings or gaps.", t.spacing},
		{"Radius steps", "No border radii.", t.radius},
	} {
		rows = nil
		for _, s := range st.rows {
			rows = append(rows, []string{mdCode(s.dim.text), pxCell(s.dim), strconv.Itoa(s.uses)})
		}
		mdSection(&b, st.title, st.none, "", []string{"value", "≈ px:", "uses:"}, rows)
	}

	rows = nil
	for _, s := range t.shadows {
		rows = append(rows, []string{mdCode(s.value), strconv.Itoa(s.uses)})
	}
	mdSection(&b, "Shadows", "No shadows.", "", []string{"shadow", "uses:"}, rows)

	rows = nil
	for _, bp := range t.breakpoints {
		rows = append(rows, []string{bp.kind, mdCode(bp.dim.text), pxCell(bp.dim), strconv.Itoa(bp.uses)})
	}
	mdSection(&b, "Breakpoints", "No @media width conditions.", "", []string{"condition", "value", "≈ px:", "uses:"}, rows)

	rows = nil
	for _, v := range t.vars {
		resolved := ""
		// Shown only where var() chains make it differ from the value.
		if strings.Join(v.resolved, "\x00") != strings.Join(v.values, "\x00") {
			resolved = mdCodes(v.resolved, " · ")
		}
		rows = append(rows, []string{mdCode(v.name), mdCodes(v.values, " · "), resolved, strconv.Itoa(v.uses)})
	}
	mdSection(&b, "Custom properties", "No custom properties.", "", []string{"property", "value", "resolved", "var() uses:"}, rows)
	if len(t.unresolved) > 0 {
		fmt.Fprintf(&b, "Referenced through var() but never defined (and without a fallback): %s.\n", mdCodes(t.unresolved, ", "))
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}
