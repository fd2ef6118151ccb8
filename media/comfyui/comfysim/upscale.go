package comfysim

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"regexp"
	"strconv"
	"strings"
)

// The image half of the simulator: workflows whose SaveImage is fed by an
// image chain that starts at a LoadImage (the upscale finish_image queues)
// save the uploaded picture itself, scaled as the chain says, instead of a
// rendered latent:
//
//   - LoadImage decodes the file POST /upload/image stored (input/).
//   - ImageUpscaleWithModel multiplies both sides by the model's scale, read
//     from the UpscaleModelLoader's model_name the way the ESRGAN family
//     names its files ("4x-UltraSharp.pth", "RealESRGAN_x2plus.pth"; 4 when
//     the name says nothing). It reports tiled progress like ComfyUI's.
//   - ImageScale sets the size (a 0 side keeps the aspect ratio, as in
//     ComfyUI); ImageScaleBy multiplies it.
//
// Sizes are tracked without pixels until SaveImage, which samples the
// original once at the final size (nearest neighbour), so a 4x model step
// of a large picture costs no memory.

// upscaleTiles is how many progress steps ImageUpscaleWithModel reports.
const upscaleTiles = 4

var modelScale = regexp.MustCompile(`(?i)(?:^|[^0-9])([1-8])x|x([1-8])(?:[^0-9]|$)`)

// picture is an IMAGE value between nodes: the decoded original and the size
// it has been scaled to so far.
type picture struct {
	src  image.Image
	w, h int
}

// picture evaluates the IMAGE input in (a link [node, slot]); ok is false when
// the chain does not start at a LoadImage (a VAEDecode of a sampled latent).
func (s *Sim) picture(p map[string]Node, in any, depth int) (pic picture, ok bool, err error) {
	link, isLink := in.([]any)
	if !isLink || len(link) != 2 || depth > len(p) {
		return pic, false, nil
	}
	id, _ := link[0].(string)
	n, found := p[id]
	if !found {
		return pic, false, nil
	}
	switch n.ClassType {
	case "LoadImage":
		name, _ := n.Inputs["image"].(string)
		sub := ""
		if i := strings.LastIndex(name, "/"); i >= 0 {
			sub, name = name[:i], name[i+1:]
		}
		s.mu.Lock()
		data, have := s.files["input/"+sub+"/"+name]
		s.mu.Unlock()
		if !have {
			return pic, true, fmt.Errorf("node %s (LoadImage): no input image %q", id, name)
		}
		img, _, err := image.Decode(bytes.NewReader(data))
		if err != nil {
			return pic, true, fmt.Errorf("node %s (LoadImage): %q: %w", id, name, err)
		}
		b := img.Bounds()
		return picture{src: img, w: b.Dx(), h: b.Dy()}, true, nil
	case "ImageUpscaleWithModel", "ImageScale", "ImageScaleBy":
		pic, ok, err = s.picture(p, n.Inputs["image"], depth+1)
		if !ok || err != nil {
			return pic, ok, err
		}
		switch n.ClassType {
		case "ImageUpscaleWithModel":
			k := 4
			if ml, isLink := n.Inputs["upscale_model"].([]any); isLink && len(ml) == 2 {
				src, _ := ml[0].(string)
				name, _ := p[src].Inputs["model_name"].(string)
				if m := modelScale.FindStringSubmatch(name); m != nil {
					k, _ = strconv.Atoi(m[1] + m[2])
				}
			}
			pic.w, pic.h = pic.w*k, pic.h*k
		case "ImageScale":
			w, h := num(n.Inputs["width"], 0), num(n.Inputs["height"], 0)
			switch {
			case w == 0 && h == 0:
			case w == 0:
				w = max(1, (pic.w*h+pic.h/2)/pic.h)
			case h == 0:
				h = max(1, (pic.h*w+pic.w/2)/pic.w)
			}
			if w > 0 && h > 0 {
				pic.w, pic.h = w, h
			}
		case "ImageScaleBy":
			f, _ := n.Inputs["scale_by"].(float64)
			if f > 0 {
				pic.w, pic.h = max(1, int(float64(pic.w)*f+0.5)), max(1, int(float64(pic.h)*f+0.5))
			}
		}
		return pic, true, nil
	}
	return pic, false, nil
}

// savePicture renders pic at its size as a PNG.
func (s *Sim) savePicture(pic picture) ([]byte, error) {
	if pic.w > s.cfg.MaxSide || pic.h > s.cfg.MaxSide {
		return nil, fmt.Errorf("cannot save an image of %dx%d: over the simulated VRAM (sides up to %d)", pic.w, pic.h, s.cfg.MaxSide)
	}
	dst := image.NewNRGBA(image.Rect(0, 0, pic.w, pic.h))
	b := pic.src.Bounds()
	for y := 0; y < pic.h; y++ {
		sy := b.Min.Y + y*b.Dy()/pic.h
		for x := 0; x < pic.w; x++ {
			r, g, bl, a := pic.src.At(b.Min.X+x*b.Dx()/pic.w, sy).RGBA()
			i := dst.PixOffset(x, y)
			dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2], dst.Pix[i+3] = uint8(r>>8), uint8(g>>8), uint8(bl>>8), uint8(a>>8)
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, dst); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
