package research

import (
	"cmp"
	"fmt"
	"image"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// probe is what capture.js measures in the page.
type probe struct {
	Title            string      `json:"title"`
	Runs             []textRun   `json:"runs"`
	Paras            []paragraph `json:"paras"`
	Gaps             []float64   `json:"gaps"`
	Media            []string    `json:"media"`
	UnreadableSheets int         `json:"unreadable_sheets"`
	WebFonts         []string    `json:"web_fonts"`
	Height           float64     `json:"height"`
}

type textRun struct {
	Chars      int     `json:"chars"`
	Size       float64 `json:"size"`
	Family     string  `json:"family"`
	Weight     string  `json:"weight"`
	LineHeight float64 `json:"line_height"`
	Tag        string  `json:"tag"`
}

type paragraph struct {
	Chars      int     `json:"chars"`
	Lines      int     `json:"lines"`
	Width      float64 `json:"width"`
	FontSize   float64 `json:"font_size"`
	LineHeight float64 `json:"line_height"`
}

// Swatch is one colour of the palette and its share of the painted area.
type Swatch struct {
	Hex   string  `json:"hex"`
	Share float64 `json:"share"`
}

// TypeSize is one step of the type scale: a computed font size and its share of
// the page's visible text (by characters).
type TypeSize struct {
	PX float64 `json:"px"`
	// Ratio is PX over the body size (the size with the largest share).
	Ratio float64 `json:"ratio"`
	Share float64 `json:"share"`
	Chars int     `json:"chars"`
	// Tags are the elements that use it most, most first.
	Tags   []string `json:"tags"`
	Weight string   `json:"weight"`
}

// FontUse is a font family (the first of its stack) and its share of the text.
type FontUse struct {
	Family string  `json:"family"`
	Stack  string  `json:"stack"`
	Share  float64 `json:"share"`
}

// Measure is the main text's characters per line.
type Measure struct {
	// CharsPerLine is all characters over all lines of the main text's
	// paragraphs; Median the median paragraph's.
	CharsPerLine float64 `json:"chars_per_line"`
	Median       float64 `json:"median"`
	Paragraphs   int     `json:"paragraphs"`
	// WidthPX is the median paragraph width.
	WidthPX float64 `json:"width_px"`
}

// Rhythm is the page's vertical rhythm.
type Rhythm struct {
	// BodyFontPX and BodyLineHeightPX are the main text's size and line height.
	BodyFontPX       float64 `json:"body_font_px"`
	BodyLineHeightPX float64 `json:"body_line_height_px"`
	// LineHeights are the line heights of the text (share by characters), with
	// their ratio to the font size.
	LineHeights []LineHeight `json:"line_heights"`
	// BlockGaps are the vertical gaps between sibling blocks, most frequent first.
	BlockGaps []Gap `json:"block_gaps"`
}

// LineHeight is one line height in use.
type LineHeight struct {
	PX    float64 `json:"px"`
	Ratio float64 `json:"ratio"`
	Share float64 `json:"share"`
}

// Gap is one block spacing and how often it occurs.
type Gap struct {
	PX    float64 `json:"px"`
	Count int     `json:"count"`
}

// Breakpoint is a width the stylesheets' media queries switch at.
type Breakpoint struct {
	PX      float64  `json:"px"`
	Feature string   `json:"feature"` // min-width | max-width
	Count   int      `json:"count"`
	Queries []string `json:"queries"`
}

// Facts are the computed design facts of a page.
type Facts struct {
	TypeScale   []TypeSize   `json:"type_scale"`
	Fonts       []FontUse    `json:"fonts"`
	WebFonts    []string     `json:"web_fonts,omitempty"`
	Measure     Measure      `json:"measure"`
	Rhythm      Rhythm       `json:"rhythm"`
	Breakpoints []Breakpoint `json:"breakpoints"`
	// UnreadableStylesheets counts cross-origin sheets whose rules (and media
	// queries) the page may not read.
	UnreadableStylesheets int `json:"unreadable_stylesheets,omitempty"`
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// aggregate turns the probe's measurements into facts.
func aggregate(p probe) Facts {
	f := Facts{WebFonts: p.WebFonts, UnreadableStylesheets: p.UnreadableSheets}
	total := 0
	for _, r := range p.Runs {
		if r.Chars > 0 && r.Size > 0 {
			total += r.Chars
		}
	}
	f.TypeScale, f.Fonts = typeScale(p.Runs, total)
	f.Measure = measure(p.Paras)
	f.Rhythm = rhythm(p.Runs, p.Paras, p.Gaps, total, f.TypeScale)
	f.Breakpoints = breakpoints(p.Media)
	return f
}

// maxTypeSizes caps the type scale (the sizes with the largest shares).
const maxTypeSizes = 12

func typeScale(runs []textRun, total int) ([]TypeSize, []FontUse) {
	if total == 0 {
		return []TypeSize{}, []FontUse{}
	}
	type acc struct {
		chars   int
		tags    map[string]int
		weights map[string]int
	}
	sizes := map[float64]*acc{}
	fonts := map[string]int{}
	stacks := map[string]map[string]int{}
	for _, r := range runs {
		if r.Chars <= 0 || r.Size <= 0 {
			continue
		}
		px := round(r.Size, 1)
		a := sizes[px]
		if a == nil {
			a = &acc{tags: map[string]int{}, weights: map[string]int{}}
			sizes[px] = a
		}
		a.chars += r.Chars
		a.tags[r.Tag] += r.Chars
		a.weights[r.Weight] += r.Chars
		fam := firstFamily(r.Family)
		fonts[fam] += r.Chars
		if stacks[fam] == nil {
			stacks[fam] = map[string]int{}
		}
		stacks[fam][r.Family] += r.Chars
	}
	var out []TypeSize
	for px, a := range sizes {
		out = append(out, TypeSize{PX: px, Chars: a.chars, Share: round(float64(a.chars)/float64(total), 3),
			Tags: topKeys(a.tags, 3), Weight: topKeys(a.weights, 1)[0]})
	}
	// The largest shares survive the cap; the scale reads largest size first.
	slices.SortFunc(out, func(a, b TypeSize) int { return cmp.Or(cmp.Compare(b.Chars, a.Chars), cmp.Compare(b.PX, a.PX)) })
	body := out[0].PX
	if len(out) > maxTypeSizes {
		out = out[:maxTypeSizes]
	}
	for i := range out {
		out[i].Ratio = round(out[i].PX/body, 3)
	}
	slices.SortFunc(out, func(a, b TypeSize) int { return cmp.Compare(b.PX, a.PX) })
	var fu []FontUse
	for fam, n := range fonts {
		fu = append(fu, FontUse{Family: fam, Stack: topKeys(stacks[fam], 1)[0], Share: round(float64(n)/float64(total), 3)})
	}
	slices.SortFunc(fu, func(a, b FontUse) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), strings.Compare(a.Family, b.Family))
	})
	return out, fu
}

// firstFamily is the first family of a CSS font-family stack, unquoted.
func firstFamily(stack string) string {
	first, _, _ := strings.Cut(stack, ",")
	first = strings.Trim(strings.TrimSpace(first), `"'`)
	if first == "" {
		return "(default)"
	}
	return first
}

// topKeys are the n keys with the largest counts (ties by key).
func topKeys(m map[string]int, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	if len(keys) == 0 {
		return []string{""}
	}
	return keys[:min(n, len(keys))]
}

func measure(paras []paragraph) Measure {
	var chars, lines int
	var per, widths []float64
	for _, p := range paras {
		if p.Lines <= 0 || p.Chars <= 0 {
			continue
		}
		chars += p.Chars
		lines += p.Lines
		per = append(per, float64(p.Chars)/float64(p.Lines))
		widths = append(widths, p.Width)
	}
	if lines == 0 {
		return Measure{}
	}
	return Measure{CharsPerLine: round(float64(chars)/float64(lines), 1), Median: round(median(per), 1),
		Paragraphs: len(per), WidthPX: round(median(widths), 1)}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// maxRhythm caps the line heights and gaps listed.
const maxRhythm = 8

func rhythm(runs []textRun, paras []paragraph, gaps []float64, total int, scale []TypeSize) Rhythm {
	var r Rhythm
	// The body size is the type scale's largest share.
	best := 0
	for _, s := range scale {
		if s.Chars > best {
			best, r.BodyFontPX = s.Chars, s.PX
		}
	}
	lh := map[float64]int{}
	ratio := map[float64]float64{}
	for _, t := range runs {
		if t.Chars <= 0 || t.Size <= 0 || t.LineHeight <= 0 {
			continue
		}
		px := round(t.LineHeight, 1)
		lh[px] += t.Chars
		ratio[px] += t.LineHeight / t.Size * float64(t.Chars)
	}
	// "normal" line heights are measured on the paragraphs instead.
	bodyLH := map[float64]int{}
	for _, p := range paras {
		if p.LineHeight > 0 && round(p.FontSize, 1) == r.BodyFontPX {
			bodyLH[round(p.LineHeight, 1)] += p.Chars
		}
	}
	if k := topFloat(bodyLH); k > 0 {
		r.BodyLineHeightPX = k
	} else {
		r.BodyLineHeightPX = topFloat(lh)
	}
	for px, n := range lh {
		r.LineHeights = append(r.LineHeights, LineHeight{PX: px, Ratio: round(ratio[px]/float64(n), 2), Share: round(float64(n)/float64(max(total, 1)), 3)})
	}
	slices.SortFunc(r.LineHeights, func(a, b LineHeight) int { return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.PX, b.PX)) })
	if len(r.LineHeights) > maxRhythm {
		r.LineHeights = r.LineHeights[:maxRhythm]
	}
	counts := map[float64]int{}
	for _, g := range gaps {
		counts[math.Round(g)]++
	}
	for px, n := range counts {
		r.BlockGaps = append(r.BlockGaps, Gap{PX: px, Count: n})
	}
	slices.SortFunc(r.BlockGaps, func(a, b Gap) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.PX, b.PX)) })
	if len(r.BlockGaps) > maxRhythm {
		r.BlockGaps = r.BlockGaps[:maxRhythm]
	}
	if r.LineHeights == nil {
		r.LineHeights = []LineHeight{}
	}
	if r.BlockGaps == nil {
		r.BlockGaps = []Gap{}
	}
	return r
}

func topFloat(m map[float64]int) float64 {
	var best float64
	n := 0
	for k, c := range m {
		if c > n || (c == n && k < best) {
			best, n = k, c
		}
	}
	return best
}

// widthRE finds width conditions of a media query: (min-width: 48em),
// (max-width:767.98px), and the range syntax (width >= 600px), (width < 40rem).
var (
	widthRE = regexp.MustCompile(`(?i)\(\s*(min|max)-width\s*:\s*([0-9.]+)\s*(px|em|rem)\s*\)`)
	rangeRE = regexp.MustCompile(`(?i)\(\s*width\s*(>=|<=|>|<)\s*([0-9.]+)\s*(px|em|rem)\s*\)`)
)

// breakpoints are the distinct widths of the media queries (em and rem at 16 px),
// narrowest first.
func breakpoints(media []string) []Breakpoint {
	type key struct {
		px      float64
		feature string
	}
	found := map[key]*Breakpoint{}
	add := func(feature, num, unit, query string) {
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v <= 0 {
			return
		}
		if u := strings.ToLower(unit); u == "em" || u == "rem" {
			v *= 16
		}
		k := key{round(v, 2), feature}
		b := found[k]
		if b == nil {
			b = &Breakpoint{PX: k.px, Feature: feature}
			found[k] = b
		}
		b.Count++
		if len(b.Queries) < 3 && !slices.Contains(b.Queries, query) {
			b.Queries = append(b.Queries, query)
		}
	}
	for _, q := range media {
		q = strings.TrimSpace(q)
		for _, m := range widthRE.FindAllStringSubmatch(q, -1) {
			add(strings.ToLower(m[1])+"-width", m[2], m[3], q)
		}
		for _, m := range rangeRE.FindAllStringSubmatch(q, -1) {
			feature := "min-width"
			if strings.HasPrefix(m[1], "<") {
				feature = "max-width"
			}
			add(feature, m[2], m[3], q)
		}
	}
	out := make([]Breakpoint, 0, len(found))
	for _, b := range found {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b Breakpoint) int {
		return cmp.Or(cmp.Compare(a.PX, b.PX), strings.Compare(a.Feature, b.Feature))
	})
	return out
}

// Palette clustering: every pixel (or a regular sample of at most maxSamples)
// goes into a 5-bit-per-channel histogram that keeps each bin's exact mean; the
// bins are split by median cut into at most k boxes, refined by a few weighted
// k-means passes, and clusters closer than mergeDistance (no visible difference
// at a glance) are merged. Deterministic: no random seeds.
const (
	maxSamples    = 1 << 20
	mergeDistance = 16.0
	minShare      = 0.005
)

type bin struct {
	n       float64
	r, g, b float64 // sums
}

func (b bin) mean() [3]float64 { return [3]float64{b.r / b.n, b.g / b.n, b.b / b.n} }

// palette returns at most k colours of img by share of its area, largest first;
// colours under half a percent are left out.
func palette(img image.Image, k int) []Swatch {
	bounds := img.Bounds()
	w, h := bounds.Dx(), bounds.Dy()
	if w == 0 || h == 0 || k <= 0 {
		return []Swatch{}
	}
	step := 1
	for (w/step)*(h/step) > maxSamples {
		step++
	}
	hist := map[uint16]*bin{}
	var total float64
	// Chromium's PNGs decode as *image.RGBA (or NRGBA): read their bytes, not
	// an interface value per pixel.
	at := func(x, y int) (uint32, uint32, uint32, uint32) { return img.At(x, y).RGBA() }
	switch m := img.(type) {
	case *image.RGBA:
		at = func(x, y int) (uint32, uint32, uint32, uint32) {
			p := m.Pix[m.PixOffset(x, y):]
			return uint32(p[0]) * 0x101, uint32(p[1]) * 0x101, uint32(p[2]) * 0x101, uint32(p[3]) * 0x101
		}
	case *image.NRGBA:
		at = func(x, y int) (uint32, uint32, uint32, uint32) {
			p := m.Pix[m.PixOffset(x, y):]
			if p[3] == 0xff {
				return uint32(p[0]) * 0x101, uint32(p[1]) * 0x101, uint32(p[2]) * 0x101, 0xffff
			}
			return m.At(x, y).RGBA()
		}
	}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += step {
		for x := bounds.Min.X; x < bounds.Max.X; x += step {
			r16, g16, b16, a16 := at(x, y)
			if a16 == 0 {
				continue
			}
			// Premultiplied over white: a screenshot is opaque, this only
			// matters for other images.
			r := float64(r16>>8) + float64(255-a16>>8)
			g := float64(g16>>8) + float64(255-a16>>8)
			b := float64(b16>>8) + float64(255-a16>>8)
			key := uint16(int(r)>>3<<10 | int(g)>>3<<5 | int(b)>>3)
			e := hist[key]
			if e == nil {
				e = &bin{}
				hist[key] = e
			}
			e.n++
			e.r += r
			e.g += g
			e.b += b
			total++
		}
	}
	bins := make([]bin, 0, len(hist))
	keys := make([]uint16, 0, len(hist))
	for key := range hist {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		bins = append(bins, *hist[key])
	}
	centers := medianCut(bins, k)
	centers = kmeans(bins, centers, 6)
	clusters := assign(bins, centers)
	clusters = merge(clusters)
	out := make([]Swatch, 0, len(clusters))
	for _, c := range clusters {
		share := c.n / total
		if share < minShare {
			continue
		}
		m := c.mean()
		out = append(out, Swatch{Hex: fmt.Sprintf("#%02x%02x%02x", clamp8(m[0]), clamp8(m[1]), clamp8(m[2])), Share: round(share, 3)})
	}
	slices.SortFunc(out, func(a, b Swatch) int { return cmp.Or(cmp.Compare(b.Share, a.Share), strings.Compare(a.Hex, b.Hex)) })
	return out
}

func clamp8(v float64) int { return int(math.Max(0, math.Min(255, math.Round(v)))) }

// medianCut splits the bins into at most k boxes along their widest channel at
// the weighted median, and returns the boxes' means.
func medianCut(bins []bin, k int) [][3]float64 {
	boxes := [][]bin{bins}
	for len(boxes) < k {
		// The box with the widest channel range (weighted by its pixels) splits.
		bi, ch, best := -1, 0, 0.0
		for i, bx := range boxes {
			if len(bx) < 2 {
				continue
			}
			var n float64
			for _, b := range bx {
				n += b.n
			}
			for c := range 3 {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, b := range bx {
					v := b.mean()[c]
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
				if score := (hi - lo) * math.Sqrt(n); score > best {
					bi, ch, best = i, c, score
				}
			}
		}
		if bi < 0 || best == 0 {
			break
		}
		bx := slices.Clone(boxes[bi])
		slices.SortStableFunc(bx, func(a, b bin) int { return cmp.Compare(a.mean()[ch], b.mean()[ch]) })
		var n, half float64
		for _, b := range bx {
			n += b.n
		}
		cut := 1
		for i, b := range bx {
			half += b.n
			if half >= n/2 {
				cut = max(1, min(i+1, len(bx)-1))
				break
			}
		}
		boxes[bi] = bx[:cut]
		boxes = append(boxes, bx[cut:])
	}
	centers := make([][3]float64, 0, len(boxes))
	for _, bx := range boxes {
		var s bin
		for _, b := range bx {
			s.n += b.n
			s.r += b.r
			s.g += b.g
			s.b += b.b
		}
		if s.n > 0 {
			centers = append(centers, s.mean())
		}
	}
	return centers
}

func dist2(a, b [3]float64) float64 {
	dr, dg, db := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return dr*dr + dg*dg + db*db
}

func nearest(c [3]float64, centers [][3]float64) int {
	best, bd := 0, math.Inf(1)
	for i, m := range centers {
		if d := dist2(c, m); d < bd {
			best, bd = i, d
		}
	}
	return best
}

// assign sums the bins into one cluster per center.
func assign(bins []bin, centers [][3]float64) []bin {
	out := make([]bin, len(centers))
	for _, b := range bins {
		i := nearest(b.mean(), centers)
		out[i].n += b.n
		out[i].r += b.r
		out[i].g += b.g
		out[i].b += b.b
	}
	return slices.DeleteFunc(out, func(b bin) bool { return b.n == 0 })
}

func kmeans(bins []bin, centers [][3]float64, rounds int) [][3]float64 {
	for range rounds {
		cl := assign(bins, centers)
		next := make([][3]float64, len(cl))
		moved := len(cl) != len(centers)
		for i, c := range cl {
			next[i] = c.mean()
			if !moved && dist2(next[i], centers[i]) > 0.25 {
				moved = true
			}
		}
		centers = next
		if !moved {
			break
		}
	}
	return centers
}

// merge joins clusters whose means are closer than mergeDistance, heaviest first.
func merge(cl []bin) []bin {
	slices.SortFunc(cl, func(a, b bin) int { return cmp.Compare(b.n, a.n) })
	var out []bin
	for _, c := range cl {
		joined := false
		for i := range out {
			if dist2(out[i].mean(), c.mean()) < mergeDistance*mergeDistance {
				out[i].n += c.n
				out[i].r += c.r
				out[i].g += c.g
				out[i].b += c.b
				joined = true
				break
			}
		}
		if !joined {
			out = append(out, c)
		}
	}
	return out
}
