package research

import (
	"image"
	"image/color"
	"testing"

	"github.com/aetherium-engine/aetherium/store"
	"github.com/chromedp/cdproto/network"
	"github.com/stretchr/testify/require"
)

// bands paints horizontal bands of solid colours, heights in pixels.
func bands(width int, bs ...band) *image.RGBA {
	h := 0
	for _, b := range bs {
		h += b.height
	}
	img := image.NewRGBA(image.Rect(0, 0, width, h))
	y := 0
	for _, b := range bs {
		for end := y + b.height; y < end; y++ {
			for x := range width {
				img.Set(x, y, b.c)
			}
		}
	}
	return img
}

type band struct {
	c      color.RGBA
	height int
}

func rgb(r, g, b uint8) color.RGBA { return color.RGBA{r, g, b, 255} }

func TestPalette(t *testing.T) {
	t.Parallel()
	navy, amber, white := rgb(0x1e, 0x3a, 0x8a), rgb(0xf5, 0x9e, 0x0b), rgb(255, 255, 255)
	// Noise: a gradient of near-navy shades (antialiasing) that must merge
	// into navy, and a sprinkle too small to be listed.
	noisy := bands(100, band{navy, 50}, band{amber, 25}, band{white, 25})
	for x := range 100 {
		noisy.Set(x, 10, rgb(0x1e+uint8(x%6), 0x3a, 0x8a-uint8(x%5)))
	}
	for x := range 20 {
		noisy.Set(x, 90, rgb(255, 0, 0))
	}
	cases := []struct {
		name string
		img  image.Image
		k    int
		want []Swatch
	}{
		{"three known blocks", bands(200, band{navy, 60}, band{amber, 30}, band{white, 30}), 8,
			[]Swatch{{"#1e3a8a", 0.5}, {"#f59e0b", 0.25}, {"#ffffff", 0.25}}},
		{"one colour", bands(10, band{white, 10}), 8, []Swatch{{"#ffffff", 1}}},
		{"k caps the colours: the nearest merge", bands(10, band{navy, 5}, band{rgb(0, 0, 20), 3}, band{white, 2}), 2,
			[]Swatch{{"#13245e", 0.8}, {"#ffffff", 0.2}}},
		{"near shades merge, specks drop", noisy, 8, []Swatch{{"#1e3a8a", 0.5}, {"#f59e0b", 0.25}, {"#ffffff", 0.248}}},
		{"empty image", image.NewRGBA(image.Rect(0, 0, 0, 0)), 8, []Swatch{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, palette(tc.img, tc.k))
		})
	}
}

// A large screenshot is sampled, not read whole, and the shares hold.
func TestPaletteSamplesLargeImages(t *testing.T) {
	t.Parallel()
	img := bands(1440, band{rgb(0, 0, 0), 1500}, band{rgb(255, 255, 255), 500})
	require.Equal(t, []Swatch{{"#000000", 0.75}, {"#ffffff", 0.25}}, palette(img, 8))
}

func TestAggregate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		probe probe
		check func(t *testing.T, f Facts)
	}{
		{"type scale by characters, body size is the largest share", probe{Runs: []textRun{
			{Chars: 20, Size: 32, Family: `"Inter", sans-serif`, Weight: "700", LineHeight: 40, Tag: "h1"},
			{Chars: 300, Size: 16, Family: `"Inter", sans-serif`, Weight: "400", LineHeight: 24, Tag: "p"},
			{Chars: 100, Size: 16, Family: `Georgia, serif`, Weight: "400", LineHeight: 24, Tag: "li"},
			{Chars: 80, Size: 12.004, Family: `"Inter", sans-serif`, Weight: "400", LineHeight: 0, Tag: "small"},
		}}, func(t *testing.T, f Facts) {
			require.Equal(t, []TypeSize{
				{PX: 32, Ratio: 2, Share: 0.04, Chars: 20, Tags: []string{"h1"}, Weight: "700"},
				{PX: 16, Ratio: 1, Share: 0.8, Chars: 400, Tags: []string{"p", "li"}, Weight: "400"},
				{PX: 12, Ratio: 0.75, Share: 0.16, Chars: 80, Tags: []string{"small"}, Weight: "400"},
			}, f.TypeScale)
			require.Equal(t, []FontUse{
				{Family: "Inter", Stack: `"Inter", sans-serif`, Share: 0.8},
				{Family: "Georgia", Stack: "Georgia, serif", Share: 0.2},
			}, f.Fonts)
			require.Equal(t, 16.0, f.Rhythm.BodyFontPX)
			require.Equal(t, 24.0, f.Rhythm.BodyLineHeightPX, "from the runs when no paragraph measured it")
			require.Equal(t, LineHeight{PX: 24, Ratio: 1.5, Share: 0.8}, f.Rhythm.LineHeights[0])
		}},
		{"measure over every line, median paragraph", probe{Paras: []paragraph{
			{Chars: 300, Lines: 5, Width: 600, FontSize: 16, LineHeight: 24},
			{Chars: 140, Lines: 2, Width: 600, FontSize: 16, LineHeight: 24},
			{Chars: 90, Lines: 3, Width: 400, FontSize: 16, LineHeight: 24},
			{Chars: 50, Lines: 0},
		}, Runs: []textRun{{Chars: 10, Size: 16, LineHeight: 0}}, Gaps: []float64{24, 24, 23.6, 48, 16}},
			func(t *testing.T, f Facts) {
				require.Equal(t, Measure{CharsPerLine: 53, Median: 60, Paragraphs: 3, WidthPX: 600}, f.Measure)
				require.Equal(t, 24.0, f.Rhythm.BodyLineHeightPX, "\"normal\" line heights come from the paragraphs")
				require.Equal(t, []Gap{{24, 3}, {16, 1}, {48, 1}}, f.Rhythm.BlockGaps)
				require.Empty(t, f.Rhythm.LineHeights)
			}},
		{"breakpoints from every syntax, em at 16 px, narrowest first", probe{Media: []string{
			"(min-width: 768px)", "screen and (min-width:48em)", "(max-width: 1023.98px)", "print",
			"(width >= 1280px)", "(width < 40rem)", "(min-width: 768px) and (max-width: 1023.98px)", "(orientation: portrait)",
		}}, func(t *testing.T, f Facts) {
			require.Equal(t, []Breakpoint{
				{PX: 640, Feature: "max-width", Count: 1, Queries: []string{"(width < 40rem)"}},
				{PX: 768, Feature: "min-width", Count: 3, Queries: []string{"(min-width: 768px)", "screen and (min-width:48em)", "(min-width: 768px) and (max-width: 1023.98px)"}},
				{PX: 1023.98, Feature: "max-width", Count: 2, Queries: []string{"(max-width: 1023.98px)", "(min-width: 768px) and (max-width: 1023.98px)"}},
				{PX: 1280, Feature: "min-width", Count: 1, Queries: []string{"(width >= 1280px)"}},
			}, f.Breakpoints)
		}},
		{"an empty page", probe{}, func(t *testing.T, f Facts) {
			require.Empty(t, f.TypeScale)
			require.Empty(t, f.Fonts)
			require.Equal(t, Measure{}, f.Measure)
			require.Empty(t, f.Breakpoints)
			require.NotNil(t, f.Rhythm.BlockGaps)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.check(t, aggregate(tc.probe))
		})
	}
}

func TestCaptureStem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, want string }{
		{"", "https://example.org/pricing", "example.org_pricing"},
		{"", "https://Example.org/", "example.org"},
		{"", "https://example.org", "example.org"},
		{"home page", "", "home_page"},
		{"../../etc/passwd", "", "passwd"},
		{".hidden", "", "hidden"},
		{"-rf", "", "rf"},
		{"shot.png", "", "shot"},
		{"ünïcode", "", "n_code"},
		{"", "not a url\x00", "page"},
		{"...", "", "page"},
	} {
		t.Run(tc.name+tc.url, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, CaptureStem(tc.name, tc.url))
		})
	}
}

func TestRefusalsAndFailures(t *testing.T) {
	t.Parallel()
	recs := []store.EgressConnection{
		{Method: "GET", Host: "api.test", Port: 8080, Reason: "refused: this host"},
		{Method: "GET", Host: "api.test", Port: 8080, Reason: "refused: this host"},
		{Method: "CONNECT", Host: "ws.test", Port: 443, Reason: "refused: not allowed"},
		{Method: "CONNECT", Host: "other.test", Port: 443, Reason: "a run_shell command's, not the page's"},
		{Method: "GET", Host: "gone.test", Port: 80, Allowed: true, Reason: "dial failed: lookup gone.test: no such host"},
	}
	hosts := map[string]bool{"api.test:8080": true, "ws.test:443": true, "gone.test:80": true}
	require.Equal(t, []Refusal{
		{Method: "GET", Host: "api.test", Port: 8080, Reason: "refused: this host", Count: 2},
		{Method: "GET", Host: "gone.test", Port: 80, Reason: "dial failed: lookup gone.test: no such host", Count: 1},
		{Method: "CONNECT", Host: "ws.test", Port: 443, Reason: "refused: not allowed", Count: 1},
	}, refusals(recs, hosts))

	for _, tc := range []struct{ url, errorText, want string }{
		{"http://api.test:8080/x", "net::ERR_FAILED", "the egress proxy refused api.test:8080: refused: this host (net::ERR_FAILED)"},
		{"http://gone.test/", "net::ERR_TUNNEL_CONNECTION_FAILED", "DNS: gone.test does not resolve"},
		{"https://nothing.test/", "net::ERR_NAME_NOT_RESOLVED", "DNS: nothing.test:443 does not resolve"},
		{"https://slow.test/", "net::ERR_TIMED_OUT", "timed out connecting to slow.test:443"},
		{"https://odd.test/", "net::ERR_CERT_INVALID", "the page did not load: net::ERR_CERT_INVALID"},
	} {
		require.ErrorContains(t, loadFailure(tc.url, tc.errorText, recs), tc.want, tc.url)
	}
	require.EqualError(t, statusFailure(&network.Response{URL: "http://a.test/x", Status: 404, StatusText: "Not Found"}, nil), "GET http://a.test/x: HTTP 404 Not Found")
	require.EqualError(t, statusFailure(&network.Response{URL: "https://a.test/x", Status: 503}, nil), "GET https://a.test/x: HTTP 503 Service Unavailable")
	require.ErrorContains(t, statusFailure(&network.Response{URL: "http://gone.test/", Status: 502, StatusText: "Bad Gateway"}, recs), "DNS: gone.test does not resolve")
}

// The fast paths for decoded PNGs agree with the generic one.
func TestPaletteImageKinds(t *testing.T) {
	t.Parallel()
	src := bands(40, band{rgb(0x1e, 0x3a, 0x8a), 30}, band{rgb(255, 255, 255), 10})
	nrgba := image.NewNRGBA(src.Bounds())
	gray := image.NewRGBA64(src.Bounds())
	for y := range 40 {
		for x := range 40 {
			nrgba.Set(x, y, src.At(x, y))
			gray.Set(x, y, src.At(x, y))
		}
	}
	want := []Swatch{{"#1e3a8a", 0.75}, {"#ffffff", 0.25}}
	for _, img := range []image.Image{src, nrgba, gray} {
		require.Equal(t, want, palette(img, 8))
	}
}
