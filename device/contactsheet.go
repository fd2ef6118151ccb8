package device

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
)

// Contact-sheet geometry.
const (
	sheetThumbW   = 320
	sheetMaxCols  = 6
	sheetMaxTiles = 60
	sheetGap      = 8
	// maxCapturePixels refuses a capture whose header claims more than 8K×8K before
	// it is decoded (a PNG "bomb" would otherwise allocate gigabytes).
	maxCapturePixels = 8192 * 8192
)

var sheetBG = color.RGBA{R: 24, G: 24, B: 28, A: 255}

// ContactSheet composes captures into one PNG grid at out: thumbnails 320 px wide in
// capture order, at most six columns, a thin progress bar under each showing where
// in the run it was taken. More than 60 captures are sampled evenly. Captures that
// do not decode are skipped; it fails only when none does.
func ContactSheet(out string, captures []string) (int, error) {
	if len(captures) == 0 {
		return 0, errors.New("contact sheet: no captures")
	}
	picked := sample(captures, sheetMaxTiles)
	var thumbs []image.Image
	var where []float64
	for i, p := range picked {
		img, err := decodeCapture(p)
		if err != nil {
			continue
		}
		thumbs = append(thumbs, thumbnail(img, sheetThumbW))
		where = append(where, float64(i+1)/float64(len(picked)))
	}
	if len(thumbs) == 0 {
		return 0, fmt.Errorf("contact sheet: none of %d captures decodes", len(picked))
	}
	cols := min(sheetMaxCols, int(math.Ceil(math.Sqrt(float64(len(thumbs))))))
	rows := (len(thumbs) + cols - 1) / cols
	th := 0
	for _, t := range thumbs {
		th = max(th, t.Bounds().Dy())
	}
	const bar = 4
	cellH := th + bar + sheetGap
	sheet := image.NewRGBA(image.Rect(0, 0, sheetGap+cols*(sheetThumbW+sheetGap), sheetGap+rows*cellH))
	draw.Draw(sheet, sheet.Bounds(), &image.Uniform{C: sheetBG}, image.Point{}, draw.Src)
	for i, t := range thumbs {
		x := sheetGap + (i%cols)*(sheetThumbW+sheetGap)
		y := sheetGap + (i/cols)*cellH
		r := image.Rect(x, y, x+t.Bounds().Dx(), y+t.Bounds().Dy())
		draw.Draw(sheet, r, t, t.Bounds().Min, draw.Src)
		progress := image.Rect(x, y+th+1, x+int(where[i]*float64(sheetThumbW)), y+th+bar)
		draw.Draw(sheet, progress, &image.Uniform{C: color.RGBA{R: 90, G: 170, B: 255, A: 255}}, image.Point{}, draw.Src)
	}
	f, err := os.Create(out)
	if err != nil {
		return 0, fmt.Errorf("contact sheet: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := png.Encode(w, sheet); err != nil {
		f.Close()
		return 0, fmt.Errorf("contact sheet: %w", err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, fmt.Errorf("contact sheet: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("contact sheet: %w", err)
	}
	return len(thumbs), nil
}

func sample(xs []string, n int) []string {
	if len(xs) <= n {
		return xs
	}
	out := make([]string, n)
	for i := range n {
		out[i] = xs[i*(len(xs)-1)/(n-1)]
	}
	return out
}

// decodeCapture reads a PNG after checking its claimed size.
func decodeCapture(p string) (image.Image, error) {
	f, err := openCaptured(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		return nil, err
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > maxCapturePixels {
		return nil, fmt.Errorf("%s: %dx%d is not a plausible capture", p, cfg.Width, cfg.Height)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return png.Decode(bufio.NewReader(f))
}

// thumbnail scales img to width w by averaging the source pixels under each target
// pixel (a box filter: no aliasing shimmer, stdlib only).
func thumbnail(img image.Image, w int) image.Image {
	b := img.Bounds()
	sw, sh := b.Dx(), b.Dy()
	h := max(1, int(math.Round(float64(sh)*float64(w)/float64(sw))))
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	src := image.NewRGBA(b)
	draw.Draw(src, b, img, b.Min, draw.Src)
	for y := range h {
		y0 := b.Min.Y + y*sh/h
		y1 := max(y0+1, b.Min.Y+(y+1)*sh/h)
		for x := range w {
			x0 := b.Min.X + x*sw/w
			x1 := max(x0+1, b.Min.X+(x+1)*sw/w)
			var r, g, bl, a, n uint32
			for yy := y0; yy < y1; yy++ {
				off := src.PixOffset(x0, yy)
				for xx := x0; xx < x1; xx++ {
					r += uint32(src.Pix[off])
					g += uint32(src.Pix[off+1])
					bl += uint32(src.Pix[off+2])
					a += uint32(src.Pix[off+3])
					off += 4
					n++
				}
			}
			o := dst.PixOffset(x, y)
			dst.Pix[o], dst.Pix[o+1], dst.Pix[o+2], dst.Pix[o+3] = uint8(r/n), uint8(g/n), uint8(bl/n), uint8(a/n)
		}
	}
	return dst
}
