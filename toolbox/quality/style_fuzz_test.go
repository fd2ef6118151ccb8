package quality

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

var normalColourForm = regexp.MustCompile(`^#[0-9a-f]{6}([0-9a-f]{2})?$`)

// FuzzNormalizeColour: whatever the input, a colour comes out in the one normal
// form, and normalizing it again changes nothing.
func FuzzNormalizeColour(f *testing.F) {
	for _, s := range []string{"#abc", "#AABBCCDD", "rgb(1 2 3 / 40%)", "rgba(255,0,0,.5)", "hsl(-30deg 150% 50%)",
		"hsla(1e3turn, 50%, 50%, 2)", "tomato", "transparent", "rgb(nan, 1, 2)", "hsl(1 2 3 4 5)", "#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := NormalizeColour(s)
		if !ok {
			return
		}
		if !normalColourForm.MatchString(got) {
			t.Fatalf("%q → %q is not #rrggbb[aa]", s, got)
		}
		if again, ok := NormalizeColour(got); !ok || again != got {
			t.Fatalf("%q → %q → %q", s, got, again)
		}
	})
}

// FuzzStyleTables: any stylesheet either fails to parse with an error or yields
// tables whose colours are normal and whose ratios are in WCAG's 1–21 range,
// quickly (var() chains and nesting are bounded).
func FuzzStyleTables(f *testing.F) {
	for _, s := range []string{
		":root{--a:var(--b);--b:var(--a)} a{color:var(--a);background:var(--b,#fff)}",
		"@media (min-width: 40em) and (width < 900px) { .x { padding: calc(1rem + 2px) 0 } }",
		"@container (min-width: 1px) { @container (min-width: 2px) { a { color: red } } }",
		"a{font:italic 700 1.25rem/1.4 \"Inter\",sans-serif;box-shadow:0 0 0 1px hsl(0 0% 0% / .1)}",
		"a{color:rgba(0,0,0,.5);background-color:#fff8}",
		"--x: 1; a { --y: {a:b}; color: var(--y) }",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		start := time.Now()
		sheet := &cssSheet{}
		if err := parseStylesheet(sheet, "fuzz.css", []byte(src), 0); err != nil {
			return
		}
		tb := buildStyleTables(sheet)
		_ = renderStyle("d", "r", []string{"fuzz.css"}, tb)
		for _, c := range tb.colours {
			if !normalColourForm.MatchString(c.colour) {
				t.Fatalf("colour %q is not normal", c.colour)
			}
		}
		for _, c := range tb.contrast {
			if !math.IsNaN(c.ratio) && (c.ratio < 1 || c.ratio > 21.01) {
				t.Fatalf("ratio %v out of range", c.ratio)
			}
		}
		if d := time.Since(start); d > 20*time.Second { // generous: -race on a loaded machine
			t.Fatalf("took %v on %d bytes", d, len(src))
		}
	})
}

// TestVarResolutionIsBounded: definitions that reference each other many times
// would multiply to 2^n values; the budget keeps one declaration cheap.
func TestVarResolutionIsBounded(t *testing.T) {
	t.Parallel()
	src := ":root{--a:#000}[data-x]{--a:#fff}\n"
	for i := 0; i < 40; i++ {
		src += "a{color:" + strings.Repeat("var(--a) ", 200) + "}\n"
	}
	start := time.Now()
	sheet := &cssSheet{}
	if err := parseStylesheet(sheet, "x.css", []byte(src), 0); err != nil {
		t.Fatal(err)
	}
	tb := buildStyleTables(sheet)
	if len(tb.colours) != 2 {
		t.Fatalf("colours: %+v", tb.colours)
	}
	if d := time.Since(start); d > 20*time.Second { // unbounded would be 2^200 substitutions; 20s leaves room for -race on a loaded machine
		t.Fatalf("took %v", d)
	}
}
