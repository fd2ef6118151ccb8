package quality

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/css"
)

// cssDecl is one declaration of a stylesheet, its value serialized from the
// parser's tokens (whitespace already collapsed by the parser).
type cssDecl struct {
	prop  string // lowercase; custom properties keep their case (--Brand ≠ --brand)
	value string
	// selector is the rule the declaration sits in ("" at the top level);
	// atRule is the innermost enclosing at-rule ("@font-face", "@media", …).
	selector string
	atRule   string
	rule     int // index of the rule, so contrast pairs stay within one rule
}

// cssSheet is what one or more stylesheets declare.
type cssSheet struct {
	decls []cssDecl
	// media are the preludes of @media rules, each once per occurrence.
	media []string
	rules int
}

// maxNesting bounds the at-rules re-parsed from unknown blocks (@container,
// @scope…): hostile input must not recurse without end.
const maxNesting = 8

// parseStylesheet adds the declarations of src (named name in errors) to sheet.
// A parse error is returned with its line and column: a style record must not be
// generated from half of a stylesheet.
func parseStylesheet(sheet *cssSheet, name string, src []byte, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("%s: at-rules nested more than %d deep", name, maxNesting)
	}
	p := css.NewParser(parse.NewInputBytes(src), false)
	type frame struct {
		selector, atRule string
		rule             int
		unknown          *bytes.Buffer // the raw block of an at-rule the parser does not know
	}
	stack := []frame{{rule: -1}}
	top := func() *frame { return &stack[len(stack)-1] }
	for {
		gt, _, data := p.Next()
		switch gt {
		case css.ErrorGrammar:
			if errors.Is(p.Err(), io.EOF) {
				return nil
			}
			if p.HasParseError() {
				return fmt.Errorf("%s: %w", name, p.Err())
			}
			return fmt.Errorf("%s: %w", name, p.Err())
		case css.BeginRulesetGrammar:
			sel := strings.TrimSpace(tokensString(p.Values()))
			stack = append(stack, frame{selector: sel, atRule: top().atRule, rule: sheet.rules})
			sheet.rules++
		case css.BeginAtRuleGrammar:
			at := strings.ToLower(string(data))
			prelude := strings.TrimSpace(tokensString(p.Values()))
			if at == "@media" {
				sheet.media = append(sheet.media, prelude)
			}
			f := frame{selector: top().selector, atRule: at, rule: top().rule}
			if at == "@font-face" || at == "@page" {
				f.rule = sheet.rules
				sheet.rules++
			}
			if !knownAtRule(at) {
				f.unknown = &bytes.Buffer{}
			}
			stack = append(stack, f)
		case css.TokenGrammar:
			if u := top().unknown; u != nil {
				u.Write(data)
			}
		case css.EndRulesetGrammar, css.EndAtRuleGrammar:
			if len(stack) > 1 {
				f := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if f.unknown != nil {
					// The parser streams unknown at-rules (@container, @scope) as raw
					// tokens; their block is ordinary rules, so parse it as such.
					if err := parseStylesheet(sheet, name+" "+f.atRule, f.unknown.Bytes(), depth+1); err != nil {
						return err
					}
				}
			}
		case css.DeclarationGrammar:
			f := top()
			sheet.decls = append(sheet.decls, cssDecl{prop: strings.ToLower(string(data)), value: stripImportant(tokensString(p.Values())),
				selector: f.selector, atRule: f.atRule, rule: f.rule})
		case css.CustomPropertyGrammar:
			f := top()
			sheet.decls = append(sheet.decls, cssDecl{prop: string(data), value: strings.TrimSpace(tokensString(p.Values())),
				selector: f.selector, atRule: f.atRule, rule: f.rule})
		}
	}
}

// stripImportant drops a trailing !important: it changes the cascade, not the
// token (1rem!important is the 1rem step).
func stripImportant(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.LastIndexByte(v, '!'); i >= 0 && strings.EqualFold(strings.TrimSpace(v[i+1:]), "important") {
		v = strings.TrimSpace(v[:i])
	}
	return v
}

func knownAtRule(at string) bool {
	switch at {
	case "@media", "@supports", "@document", "@layer", "@font-face", "@page":
		return true
	}
	// Vendor-prefixed @-webkit-keyframes is keyframes to the parser.
	return strings.HasSuffix(at, "keyframes")
}

func tokensString(ts []css.Token) string {
	var b strings.Builder
	for _, t := range ts {
		b.Write(t.Data)
	}
	return b.String()
}

// maxVariants caps the values one declaration can take through var()s with
// several definitions (themes): a product of them must not explode.
const maxVariants = 8

// varResolver substitutes var(--x, fallback) with every definition of --x.
type varResolver struct {
	defs map[string][]string // custom property → its distinct raw values, in order
	// scoped are the definitions by where they sit (selector and at-rule), so
	// a theme's text and background colours are paired with each other only.
	scoped map[string][]varDef
	scopes []string       // every scope a definition sits in, in order
	used   map[string]int // var() references per custom property
	// unresolved are the names referenced without a definition or fallback.
	unresolved map[string]bool
}

func newVarResolver(decls []cssDecl) *varResolver {
	r := &varResolver{defs: map[string][]string{}, scoped: map[string][]varDef{}, used: map[string]int{}, unresolved: map[string]bool{}}
	for _, d := range decls {
		if strings.HasPrefix(d.prop, "--") {
			if !inStrings(r.defs[d.prop], d.value) {
				r.defs[d.prop] = append(r.defs[d.prop], d.value)
			}
			scope := strings.TrimSpace(d.atRule + " " + d.selector)
			r.scoped[d.prop] = append(r.scoped[d.prop], varDef{value: d.value, scope: scope})
			if !inStrings(r.scopes, scope) {
				r.scopes = append(r.scopes, scope)
			}
		}
	}
	return r
}

// varDef is one definition of a custom property and the scope it sits in.
type varDef struct{ value, scope string }

// resolveIn substitutes each var() with its definition in scope, or where the
// scope does not redefine it with its first definition (what inheritance from
// :root gives). ok is false when the value used no var() defined in scope: the
// pair it makes is then the same in every scope.
func (r *varResolver) resolveIn(v, scope string, depth int) (string, bool) {
	start := indexFold(v, "var(")
	if start < 0 || depth > maxNesting {
		return v, false
	}
	end := matchParen(v, start+3)
	if end < 0 {
		return v, false
	}
	name, fallback, hasFallback := strings.Cut(v[start+4:end], ",")
	name = strings.TrimSpace(name)
	sub, inScope := "", false
	if defs := r.scoped[name]; len(defs) > 0 {
		sub = defs[0].value
		for _, d := range defs {
			if d.scope == scope {
				sub, inScope = d.value, true
				break
			}
		}
	} else if hasFallback {
		sub = strings.TrimSpace(fallback)
	}
	sub, subIn := r.resolveIn(sub, scope, depth+1)
	rest, restIn := r.resolveIn(v[end+1:], scope, depth+1)
	return v[:start] + sub + rest, inScope || subIn || restIn
}

// resolveBudget bounds the substitutions of one value: definitions that
// reference each other several times would otherwise multiply without end.
const resolveBudget = 512

// resolve returns the values v can take with its var()s substituted. count
// records the references (only for declarations, so a chain counts once).
func (r *varResolver) resolve(v string, count bool) []string {
	budget := resolveBudget
	return r.resolveDepth(v, count, 0, &budget)
}

// resolveDepth substitutes the first var() of v and recurses into the
// definition (depth+1) and into the rest of v (same depth).
func (r *varResolver) resolveDepth(v string, count bool, depth int, budget *int) []string {
	*budget--
	start := indexFold(v, "var(")
	if start < 0 || depth > maxNesting || *budget <= 0 {
		return []string{v}
	}
	end := matchParen(v, start+3)
	if end < 0 {
		return []string{v}
	}
	inner := v[start+4 : end]
	name, fallback, hasFallback := strings.Cut(inner, ",")
	name = strings.TrimSpace(name)
	if count {
		r.used[name]++
	}
	var subs []string
	if defs, ok := r.defs[name]; ok {
		for _, d := range defs {
			for _, s := range r.resolveDepth(d, false, depth+1, budget) {
				if !inStrings(subs, s) && len(subs) < maxVariants {
					subs = append(subs, s)
				}
			}
		}
	} else if hasFallback {
		subs = r.resolveDepth(strings.TrimSpace(fallback), count, depth+1, budget)
	} else {
		r.unresolved[name] = true
		subs = []string{""}
	}
	rests := r.resolveDepth(v[end+1:], count, depth, budget)
	var out []string
	for _, s := range subs {
		for _, rest := range rests {
			val := v[:start] + s + rest
			if !inStrings(out, val) {
				out = append(out, val)
			}
			if len(out) >= maxVariants {
				return out
			}
		}
	}
	return out
}

// indexFold is strings.Index ignoring ASCII case.
func indexFold(s, sub string) int {
	return strings.Index(strings.ToLower(s), sub)
}

// matchParen returns the index of the ')' closing the '(' at open, or -1.
func matchParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func inStrings(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// valueTokens lexes a declaration value, dropping whitespace and comments.
func valueTokens(v string) []css.Token {
	l := css.NewLexer(parse.NewInputString(v))
	var out []css.Token
	for {
		tt, data := l.Next()
		switch tt {
		case css.ErrorToken:
			return out
		case css.WhitespaceToken, css.CommentToken:
			continue
		}
		out = append(out, css.Token{TokenType: tt, Data: append([]byte(nil), data...)})
	}
}

// colourBearing reports whether a property takes named colours: elsewhere an
// identifier like "tan" or "red" is an animation or grid-area name.
func colourBearing(prop string) bool {
	switch {
	case strings.Contains(prop, "color"), prop == "background", prop == "fill", prop == "stroke",
		strings.HasPrefix(prop, "border"), strings.HasPrefix(prop, "outline"),
		strings.HasSuffix(prop, "shadow"), strings.HasPrefix(prop, "text-decoration"),
		strings.HasPrefix(prop, "column-rule"), strings.HasPrefix(prop, "text-emphasis"):
		return true
	}
	return false
}

// coloursIn returns the colours a value holds, in order, with duplicates.
// Colours inside other functions (gradients) count; rgb()/hsl() are read whole.
func coloursIn(prop, value string) []rgba {
	toks := valueTokens(value)
	named := colourBearing(prop)
	if strings.HasPrefix(prop, "--") {
		// A custom property is untyped: only a value that is one named colour
		// reads as one ("--accent: tomato", not "--font: Georgia").
		named = len(toks) == 1
	}
	var out []rgba
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.TokenType {
		case css.HashToken:
			if c, ok := parseHexColour(string(t.Data[1:])); ok {
				out = append(out, c)
			}
		case css.IdentToken:
			if named {
				if c, ok := namedColour(string(t.Data)); ok {
					out = append(out, c)
				}
			}
		case css.FunctionToken:
			fn := strings.ToLower(strings.TrimSuffix(string(t.Data), "("))
			if fn != "rgb" && fn != "rgba" && fn != "hsl" && fn != "hsla" {
				continue
			}
			var inner strings.Builder
			j := i + 1
			for ; j < len(toks) && toks[j].TokenType != css.RightParenthesisToken; j++ {
				inner.Write(toks[j].Data)
				inner.WriteByte(' ')
			}
			if c, ok := parseColourFunction(fn, inner.String()); ok {
				out = append(out, c)
			}
			i = j
		}
	}
	return out
}

// dimension is one length-like value: its normal text and its approximate
// size in CSS pixels for sorting (NaN when it has none, e.g. calc()).
type dimension struct {
	text string
	px   float64
}

// pxPer is how many CSS pixels one unit is; rem and em assume the 16px default.
func pxPer(unit string) (float64, bool) {
	switch unit {
	case "px", "":
		return 1, true
	case "rem", "em":
		return 16, true
	case "pt":
		return 96.0 / 72, true
	case "pc":
		return 16, true
	case "in":
		return 96, true
	case "cm":
		return 96 / 2.54, true
	case "mm":
		return 96 / 25.4, true
	case "q":
		return 96 / 101.6, true
	}
	return 0, false
}

// numUnit splits "1.50rem" into 1.5 and "rem".
func numUnit(s string) (float64, string, bool) {
	i := 0
	for i < len(s) && strings.ContainsRune("+-.0123456789eE", rune(s[i])) {
		// An exponent only after a digit: "1em" is one em, not 1e-m.
		if (s[i] == 'e' || s[i] == 'E') && (i+1 >= len(s) || !strings.ContainsRune("+-0123456789", rune(s[i+1]))) {
			break
		}
		i++
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, "", false
	}
	return v, strings.ToLower(s[i:]), true
}

// normalDimension writes a number token the same way whatever its spelling
// (.5rem = 0.50rem = 0.5rem; 0px = 0).
func normalDimension(s string) dimension {
	v, unit, ok := numUnit(s)
	if !ok {
		return dimension{text: s, px: math.NaN()}
	}
	if v == 0 {
		return dimension{text: "0", px: 0}
	}
	text := strconv.FormatFloat(v, 'f', -1, 64) + unit
	if unit == "%" {
		return dimension{text: text, px: math.NaN()}
	}
	if f, ok := pxPer(unit); ok {
		return dimension{text: text, px: v * f}
	}
	return dimension{text: text, px: math.NaN()}
}

// fontSizeKeyword is CSS's absolute size keywords at the 16px default.
func fontSizeKeyword(k string) (float64, bool) {
	switch k {
	case "xx-small":
		return 9, true
	case "x-small":
		return 10, true
	case "small":
		return 13, true
	case "medium":
		return 16, true
	case "large":
		return 18, true
	case "x-large":
		return 24, true
	case "xx-large":
		return 32, true
	case "xxx-large":
		return 48, true
	}
	return 0, false
}

// lengthsIn lists the lengths of a spacing or radius value: each dimension, 0,
// and each calc()/clamp()/min()/max() whole; keywords (auto) are not steps.
func lengthsIn(value string) []dimension {
	toks := valueTokens(value)
	var out []dimension
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.TokenType {
		case css.DimensionToken, css.PercentageToken:
			out = append(out, normalDimension(string(t.Data)))
		case css.NumberToken:
			if v, _, ok := numUnit(string(t.Data)); ok && v == 0 {
				out = append(out, dimension{text: "0", px: 0})
			}
		case css.FunctionToken:
			var b strings.Builder
			b.Write(t.Data)
			depth := 1
			j := i + 1
			for ; j < len(toks) && depth > 0; j++ {
				switch toks[j].TokenType {
				case css.FunctionToken, css.LeftParenthesisToken:
					depth++
				case css.RightParenthesisToken:
					depth--
				}
				if toks[j].TokenType == css.CommaToken {
					b.WriteString(", ")
					continue
				}
				if b.Len() > 0 && needsSpace(b.String(), toks[j]) {
					b.WriteByte(' ')
				}
				b.Write(toks[j].Data)
			}
			out = append(out, dimension{text: strings.ToLower(b.String()), px: math.NaN()})
			i = j - 1
		}
	}
	return out
}

// needsSpace keeps the operators of calc() readable when re-serialized from
// tokens ("calc(1rem + 2px)", not "calc(1rem+2px)", which is invalid CSS).
func needsSpace(sofar string, t css.Token) bool {
	last := sofar[len(sofar)-1]
	if last == '(' || last == ' ' || t.TokenType == css.RightParenthesisToken {
		return false
	}
	return true
}

// fontFamilies splits a font-family value into its families, unquoted.
func fontFamilies(value string) []string {
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, t := range valueTokens(value) {
		switch t.TokenType {
		case css.CommaToken:
			flush()
		case css.StringToken:
			s := string(t.Data)
			if len(s) >= 2 {
				s = s[1 : len(s)-1]
			}
			cur = append(cur, s)
		case css.IdentToken:
			cur = append(cur, string(t.Data))
		}
	}
	flush()
	return out
}

// fontShorthand splits `font: italic 700 1.25rem/1.4 "Inter", sans-serif` into
// its size and its family list (ok false for a system keyword like `font: menu`).
func fontShorthand(value string) (size, families string, ok bool) {
	toks := valueTokens(value)
	for i, t := range toks {
		isSize := t.TokenType == css.DimensionToken || t.TokenType == css.PercentageToken
		if t.TokenType == css.IdentToken {
			_, isSize = fontSizeKeyword(strings.ToLower(string(t.Data)))
		}
		if !isSize {
			continue
		}
		rest := i + 1
		if rest < len(toks) && toks[rest].TokenType == css.DelimToken && string(toks[rest].Data) == "/" {
			rest += 2
		}
		var fam strings.Builder
		for _, f := range toks[min(rest, len(toks)):] {
			if fam.Len() > 0 && f.TokenType != css.CommaToken {
				fam.WriteByte(' ')
			}
			fam.Write(f.Data)
		}
		return string(t.Data), fam.String(), true
	}
	return "", "", false
}

// The @media width patterns. Compiled regexps are immutable, so sharing them is
// no shared state.
var (
	mediaWidthRe = regexp.MustCompile(`(?i)\(\s*(min|max)-width\s*:\s*([^)\s]+)\s*\)`)
	mediaRangeRe = regexp.MustCompile(`(?i)\(\s*width\s*(>=|<=|>|<)\s*([^)\s]+)\s*\)`)
	mediaFlipRe  = regexp.MustCompile(`(?i)\(\s*([^)\s]+)\s*(>=|<=|>|<)\s*width\s*\)`)
)

// breakpoint is one width condition of a @media prelude.
type breakpoint struct {
	kind string // min-width | max-width
	dim  dimension
}

// breakpointsIn reads the width conditions of a @media prelude, in both the
// classic (min-width: 768px) and the range syntax (width >= 768px).
func breakpointsIn(prelude string) []breakpoint {
	var out []breakpoint
	for _, m := range mediaWidthRe.FindAllStringSubmatch(prelude, -1) {
		out = append(out, breakpoint{kind: strings.ToLower(m[1]) + "-width", dim: normalDimension(m[2])})
	}
	for _, m := range mediaRangeRe.FindAllStringSubmatch(prelude, -1) {
		kind := "min-width"
		if strings.HasPrefix(m[1], "<") {
			kind = "max-width"
		}
		out = append(out, breakpoint{kind: kind, dim: normalDimension(m[2])})
	}
	for _, m := range mediaFlipRe.FindAllStringSubmatch(prelude, -1) {
		kind := "max-width" // 768px > width
		if strings.HasPrefix(m[2], "<") {
			kind = "min-width" // 768px <= width
		}
		out = append(out, breakpoint{kind: kind, dim: normalDimension(m[1])})
	}
	return out
}

// sortDimensions orders sizes small to large; ones without a pixel size
// (calc(), %, vw) come last, alphabetically.
func sortDimensions[T any](xs []T, dim func(T) dimension) {
	sort.SliceStable(xs, func(i, j int) bool {
		a, b := dim(xs[i]), dim(xs[j])
		an, bn := math.IsNaN(a.px), math.IsNaN(b.px)
		switch {
		case an != bn:
			return !an
		case !an && a.px != b.px:
			return a.px < b.px
		}
		return a.text < b.text
	})
}
