package quality

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rgba is a colour in 8-bit sRGB channels plus alpha (0–255), the precision every
// CSS colour form we normalize rounds to.
type rgba struct{ r, g, b, a uint8 }

// String is the one normal form of the style record: lowercase #rrggbb, or
// #rrggbbaa when the colour is not opaque, so #abc, #aabbcc, rgb(170 187 204)
// and a named colour of the same value are counted as one.
func (c rgba) String() string {
	if c.a == 255 {
		return fmt.Sprintf("#%02x%02x%02x", c.r, c.g, c.b)
	}
	return fmt.Sprintf("#%02x%02x%02x%02x", c.r, c.g, c.b, c.a)
}

// parseHexColour reads the digits of a hash token (without '#'): 3, 4, 6 or 8 hex
// digits; anything else is not a colour (an id selector, a typo).
func parseHexColour(h string) (rgba, bool) {
	for _, c := range h {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return rgba{}, false
		}
	}
	nib := func(i int) uint8 { v, _ := strconv.ParseUint(h[i:i+1], 16, 8); return uint8(v) * 17 }
	byt := func(i int) uint8 { v, _ := strconv.ParseUint(h[i:i+2], 16, 8); return uint8(v) }
	switch len(h) {
	case 3:
		return rgba{nib(0), nib(1), nib(2), 255}, true
	case 4:
		return rgba{nib(0), nib(1), nib(2), nib(3)}, true
	case 6:
		return rgba{byt(0), byt(2), byt(4), 255}, true
	case 8:
		return rgba{byt(0), byt(2), byt(4), byt(6)}, true
	}
	return rgba{}, false
}

// colourArg is one argument of rgb()/hsl(): its number and whether it was a
// percentage (or an angle unit for a hue).
type colourArg struct {
	v       float64
	percent bool
	unit    string
}

// parseColourArgs splits the inside of rgb(…)/hsl(…) in either syntax — legacy
// commas or space-separated with "/ alpha" — into its 3 or 4 numeric arguments.
func parseColourArgs(inner string) ([]colourArg, bool) {
	inner = strings.ReplaceAll(inner, ",", " ")
	inner = strings.ReplaceAll(inner, "/", " ")
	fields := strings.Fields(inner)
	if len(fields) != 3 && len(fields) != 4 {
		return nil, false
	}
	out := make([]colourArg, 0, 4)
	for _, f := range fields {
		a := colourArg{}
		num := strings.ToLower(f)
		switch {
		case strings.HasSuffix(num, "%"):
			a.percent = true
			num = strings.TrimSuffix(num, "%")
		case strings.HasSuffix(num, "deg"), strings.HasSuffix(num, "grad"), strings.HasSuffix(num, "rad"), strings.HasSuffix(num, "turn"):
			for _, u := range []string{"deg", "grad", "rad", "turn"} {
				if strings.HasSuffix(num, u) {
					a.unit, num = u, strings.TrimSuffix(num, u)
					break
				}
			}
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, false
		}
		a.v = v
		out = append(out, a)
	}
	return out, true
}

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }

func to8(v float64) uint8 { return uint8(math.Round(clamp01(v) * 255)) }

// alphaOf reads the optional fourth argument (0–1 or a percentage).
func alphaOf(args []colourArg) uint8 {
	if len(args) < 4 {
		return 255
	}
	a := args[3]
	if a.percent {
		return to8(a.v / 100)
	}
	return to8(a.v)
}

// parseColourFunction normalizes rgb()/rgba()/hsl()/hsla(); other colour
// functions (oklch, color-mix, …) are not counted rather than guessed.
func parseColourFunction(name, inner string) (rgba, bool) {
	args, ok := parseColourArgs(inner)
	if !ok {
		return rgba{}, false
	}
	switch strings.ToLower(name) {
	case "rgb", "rgba":
		ch := func(a colourArg) uint8 {
			if a.percent {
				return to8(a.v / 100)
			}
			return to8(a.v / 255)
		}
		return rgba{ch(args[0]), ch(args[1]), ch(args[2]), alphaOf(args)}, true
	case "hsl", "hsla":
		h := args[0].v
		switch args[0].unit {
		case "rad":
			h = h * 180 / math.Pi
		case "grad":
			h = h * 0.9
		case "turn":
			h *= 360
		}
		s, l := args[1].v/100, args[2].v/100
		r, g, b := hslToRGB(h, clamp01(s), clamp01(l))
		return rgba{to8(r), to8(g), to8(b), alphaOf(args)}, true
	}
	return rgba{}, false
}

// hslToRGB is CSS Color 4's hsl-to-rgb conversion.
func hslToRGB(h, s, l float64) (float64, float64, float64) {
	h = math.Mod(h, 360)
	if h < 0 {
		h += 360
	}
	f := func(n float64) float64 {
		k := math.Mod(n+h/30, 12)
		a := s * math.Min(l, 1-l)
		return l - a*math.Max(-1, math.Min(k-3, math.Min(9-k, 1)))
	}
	return f(0), f(8), f(4)
}

// relativeLuminance is WCAG 2's relative luminance of an opaque sRGB colour.
func relativeLuminance(c rgba) float64 {
	lin := func(v uint8) float64 {
		s := float64(v) / 255
		if s <= 0.04045 {
			return s / 12.92
		}
		return math.Pow((s+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c.r) + 0.7152*lin(c.g) + 0.0722*lin(c.b)
}

// composite lays fg on an opaque bg, which is what the eye sees of a
// translucent text colour.
func composite(fg, bg rgba) rgba {
	a := float64(fg.a) / 255
	mix := func(f, b uint8) uint8 { return uint8(math.Round(float64(f)*a + float64(b)*(1-a))) }
	return rgba{mix(fg.r, bg.r), mix(fg.g, bg.g), mix(fg.b, bg.b), 255}
}

// contrastRatio is WCAG 2's contrast ratio of text fg on an opaque background.
func contrastRatio(fg, bg rgba) float64 {
	if fg.a != 255 {
		fg = composite(fg, bg)
	}
	l1, l2 := relativeLuminance(fg), relativeLuminance(bg)
	if l1 < l2 {
		l1, l2 = l2, l1
	}
	return (l1 + 0.05) / (l2 + 0.05)
}

// namedColour resolves a CSS named colour (CSS Color 4's 148 names plus
// transparent). A switch rather than a package map: no mutable globals.
func namedColour(name string) (rgba, bool) {
	var hex string
	switch strings.ToLower(name) {
	case "transparent":
		return rgba{0, 0, 0, 0}, true
	case "aliceblue":
		hex = "f0f8ff"
	case "antiquewhite":
		hex = "faebd7"
	case "aqua", "cyan":
		hex = "00ffff"
	case "aquamarine":
		hex = "7fffd4"
	case "azure":
		hex = "f0ffff"
	case "beige":
		hex = "f5f5dc"
	case "bisque":
		hex = "ffe4c4"
	case "black":
		hex = "000000"
	case "blanchedalmond":
		hex = "ffebcd"
	case "blue":
		hex = "0000ff"
	case "blueviolet":
		hex = "8a2be2"
	case "brown":
		hex = "a52a2a"
	case "burlywood":
		hex = "deb887"
	case "cadetblue":
		hex = "5f9ea0"
	case "chartreuse":
		hex = "7fff00"
	case "chocolate":
		hex = "d2691e"
	case "coral":
		hex = "ff7f50"
	case "cornflowerblue":
		hex = "6495ed"
	case "cornsilk":
		hex = "fff8dc"
	case "crimson":
		hex = "dc143c"
	case "darkblue":
		hex = "00008b"
	case "darkcyan":
		hex = "008b8b"
	case "darkgoldenrod":
		hex = "b8860b"
	case "darkgray", "darkgrey":
		hex = "a9a9a9"
	case "darkgreen":
		hex = "006400"
	case "darkkhaki":
		hex = "bdb76b"
	case "darkmagenta":
		hex = "8b008b"
	case "darkolivegreen":
		hex = "556b2f"
	case "darkorange":
		hex = "ff8c00"
	case "darkorchid":
		hex = "9932cc"
	case "darkred":
		hex = "8b0000"
	case "darksalmon":
		hex = "e9967a"
	case "darkseagreen":
		hex = "8fbc8f"
	case "darkslateblue":
		hex = "483d8b"
	case "darkslategray", "darkslategrey":
		hex = "2f4f4f"
	case "darkturquoise":
		hex = "00ced1"
	case "darkviolet":
		hex = "9400d3"
	case "deeppink":
		hex = "ff1493"
	case "deepskyblue":
		hex = "00bfff"
	case "dimgray", "dimgrey":
		hex = "696969"
	case "dodgerblue":
		hex = "1e90ff"
	case "firebrick":
		hex = "b22222"
	case "floralwhite":
		hex = "fffaf0"
	case "forestgreen":
		hex = "228b22"
	case "fuchsia", "magenta":
		hex = "ff00ff"
	case "gainsboro":
		hex = "dcdcdc"
	case "ghostwhite":
		hex = "f8f8ff"
	case "gold":
		hex = "ffd700"
	case "goldenrod":
		hex = "daa520"
	case "gray", "grey":
		hex = "808080"
	case "green":
		hex = "008000"
	case "greenyellow":
		hex = "adff2f"
	case "honeydew":
		hex = "f0fff0"
	case "hotpink":
		hex = "ff69b4"
	case "indianred":
		hex = "cd5c5c"
	case "indigo":
		hex = "4b0082"
	case "ivory":
		hex = "fffff0"
	case "khaki":
		hex = "f0e68c"
	case "lavender":
		hex = "e6e6fa"
	case "lavenderblush":
		hex = "fff0f5"
	case "lawngreen":
		hex = "7cfc00"
	case "lemonchiffon":
		hex = "fffacd"
	case "lightblue":
		hex = "add8e6"
	case "lightcoral":
		hex = "f08080"
	case "lightcyan":
		hex = "e0ffff"
	case "lightgoldenrodyellow":
		hex = "fafad2"
	case "lightgray", "lightgrey":
		hex = "d3d3d3"
	case "lightgreen":
		hex = "90ee90"
	case "lightpink":
		hex = "ffb6c1"
	case "lightsalmon":
		hex = "ffa07a"
	case "lightseagreen":
		hex = "20b2aa"
	case "lightskyblue":
		hex = "87cefa"
	case "lightslategray", "lightslategrey":
		hex = "778899"
	case "lightsteelblue":
		hex = "b0c4de"
	case "lightyellow":
		hex = "ffffe0"
	case "lime":
		hex = "00ff00"
	case "limegreen":
		hex = "32cd32"
	case "linen":
		hex = "faf0e6"
	case "maroon":
		hex = "800000"
	case "mediumaquamarine":
		hex = "66cdaa"
	case "mediumblue":
		hex = "0000cd"
	case "mediumorchid":
		hex = "ba55d3"
	case "mediumpurple":
		hex = "9370db"
	case "mediumseagreen":
		hex = "3cb371"
	case "mediumslateblue":
		hex = "7b68ee"
	case "mediumspringgreen":
		hex = "00fa9a"
	case "mediumturquoise":
		hex = "48d1cc"
	case "mediumvioletred":
		hex = "c71585"
	case "midnightblue":
		hex = "191970"
	case "mintcream":
		hex = "f5fffa"
	case "mistyrose":
		hex = "ffe4e1"
	case "moccasin":
		hex = "ffe4b5"
	case "navajowhite":
		hex = "ffdead"
	case "navy":
		hex = "000080"
	case "oldlace":
		hex = "fdf5e6"
	case "olive":
		hex = "808000"
	case "olivedrab":
		hex = "6b8e23"
	case "orange":
		hex = "ffa500"
	case "orangered":
		hex = "ff4500"
	case "orchid":
		hex = "da70d6"
	case "palegoldenrod":
		hex = "eee8aa"
	case "palegreen":
		hex = "98fb98"
	case "paleturquoise":
		hex = "afeeee"
	case "palevioletred":
		hex = "db7093"
	case "papayawhip":
		hex = "ffefd5"
	case "peachpuff":
		hex = "ffdab9"
	case "peru":
		hex = "cd853f"
	case "pink":
		hex = "ffc0cb"
	case "plum":
		hex = "dda0dd"
	case "powderblue":
		hex = "b0e0e6"
	case "purple":
		hex = "800080"
	case "rebeccapurple":
		hex = "663399"
	case "red":
		hex = "ff0000"
	case "rosybrown":
		hex = "bc8f8f"
	case "royalblue":
		hex = "4169e1"
	case "saddlebrown":
		hex = "8b4513"
	case "salmon":
		hex = "fa8072"
	case "sandybrown":
		hex = "f4a460"
	case "seagreen":
		hex = "2e8b57"
	case "seashell":
		hex = "fff5ee"
	case "sienna":
		hex = "a0522d"
	case "silver":
		hex = "c0c0c0"
	case "skyblue":
		hex = "87ceeb"
	case "slateblue":
		hex = "6a5acd"
	case "slategray", "slategrey":
		hex = "708090"
	case "snow":
		hex = "fffafa"
	case "springgreen":
		hex = "00ff7f"
	case "steelblue":
		hex = "4682b4"
	case "tan":
		hex = "d2b48c"
	case "teal":
		hex = "008080"
	case "thistle":
		hex = "d8bfd8"
	case "tomato":
		hex = "ff6347"
	case "turquoise":
		hex = "40e0d0"
	case "violet":
		hex = "ee82ee"
	case "wheat":
		hex = "f5deb3"
	case "white":
		hex = "ffffff"
	case "whitesmoke":
		hex = "f5f5f5"
	case "yellow":
		hex = "ffff00"
	case "yellowgreen":
		hex = "9acd32"
	default:
		return rgba{}, false
	}
	return parseHexColour(hex)
}

// NormalizeColour returns the style record's form of one CSS colour value
// (#abc, #aabbccdd, rgb()/rgba()/hsl()/hsla() in either syntax, a named colour,
// transparent): lowercase #rrggbb, or #rrggbbaa when not opaque. ok is false for
// anything else (currentColor, var(), other colour functions).
func NormalizeColour(s string) (string, bool) {
	c, ok := parseColour(strings.TrimSpace(s))
	if !ok {
		return "", false
	}
	return c.String(), true
}

func parseColour(s string) (rgba, bool) {
	if strings.HasPrefix(s, "#") {
		return parseHexColour(s[1:])
	}
	if open := strings.IndexByte(s, '('); open > 0 && strings.HasSuffix(s, ")") {
		return parseColourFunction(s[:open], s[open+1:len(s)-1])
	}
	return namedColour(s)
}
