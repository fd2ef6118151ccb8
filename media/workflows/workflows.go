// Package workflows ships the ComfyUI workflows the fleet queues, in ComfyUI's
// API format (what "Export (API)" saves: node id → {class_type, inputs}), each
// beside a <name>.params.json naming its parameters: parameter → the node ids
// and input names it sets. Parameters are injected into the decoded graph by
// node and input, never by editing the JSON text, so a prompt containing quotes
// or braces is just a string value, and a workflow exported from ComfyUI can be
// dropped in by writing its params file.
package workflows

import (
	"embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

//go:embed *.json
var files embed.FS

// Names of the shipped workflows.
const (
	SD        = "sd-txt2img"
	Qwen      = "qwen-image"
	QwenEdit  = "qwen-image-edit"
	MaxRefs   = 3 // reference images QwenEdit takes (reference_1..3)
	refPrefix = "reference_"

	// WanT2V and WanI2V are Wan 2.2 A14B text-to-video and image-to-video: the
	// high-noise and the low-noise expert, each a UNETLoader with
	// ModelSamplingSD3, split across two KSamplerAdvanced (steps 0-10, then
	// 10-end) as ComfyUI's own Wan 2.2 templates do; EmptyHunyuanLatentVideo
	// (text) or WanImageToVideo (a LoadImage start image) make the latent,
	// VAEDecode the frames, ImageFromBatch keeps the first "frames" of them
	// (see WanLength), and the core CreateVideo + SaveVideo write an H.264
	// MP4 (no custom node pack, unlike VHS_VideoCombine; SaveVideo lists the
	// file under the history's "images" with "animated": [true]). Parameters:
	// prompt, negative, seed, width, height, length, frames, fps, prefix (and
	// image for WanI2V).
	WanT2V = "wan22-t2v"
	WanI2V = "wan22-i2v"
)

// QwenUpscale is finish_image's post-run 2K upscale of a Qwen-Image picture:
// LoadImage (the uploaded original) → UpscaleModelLoader and
// ImageUpscaleWithModel (a 4x ESRGAN-family model) → ImageScale to the exact
// target size (lanczos) → SaveImage. Parameters: image, model, width, height,
// prefix.
const QwenUpscale = "qwen-upscale"

// WanLength is the latent length Wan renders for frames frames: Wan's VAE
// compresses time fourfold around a first frame, so it makes 4n+1 frames;
// this is the smallest 4n+1 of at least frames+1 (frames=32 → 33, i.e. 2 s at
// 16 fps plus the first frame). The workflows then keep exactly frames of
// them, so the clip lasts frames/fps seconds, not (4n+1)/fps.
func WanLength(frames int) int {
	return (frames+3)/4*4 + 1
}

// RemoveBackgroundClass is the node RemoveBackground splices in:
// InspyrenetRembg of the ComfyUI-Inspyrenet-Rembg node pack (inputs image,
// torchscript_jit), which returns the picture as RGBA with a transparent
// background; SaveImage writes such an image as an RGBA PNG.
const RemoveBackgroundClass = "InspyrenetRembg"

// Node is one API-format node.
type Node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

// Target is one input a parameter sets.
type Target struct {
	Node  string `json:"node"`
	Input string `json:"input"`
}

// Workflow is a decoded workflow and its parameters; Load returns a fresh copy
// each time, so callers may change it.
type Workflow struct {
	Name   string
	Nodes  map[string]Node
	Params map[string][]Target
}

// Names lists the shipped workflows.
func Names() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasSuffix(n, ".params") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Load decodes the named workflow and checks that every parameter targets an
// existing node and input.
func Load(name string) (*Workflow, error) {
	b, err := files.ReadFile(name + ".json")
	if err != nil {
		return nil, fmt.Errorf("workflows: unknown workflow %q", name)
	}
	w := &Workflow{Name: name}
	if err := json.Unmarshal(b, &w.Nodes); err != nil {
		return nil, fmt.Errorf("workflows: %s: %w", name, err)
	}
	pb, err := files.ReadFile(name + ".params.json")
	if err != nil {
		return nil, fmt.Errorf("workflows: %s has no params file", name)
	}
	if err := json.Unmarshal(pb, &w.Params); err != nil {
		return nil, fmt.Errorf("workflows: %s.params: %w", name, err)
	}
	for p, ts := range w.Params {
		for _, t := range ts {
			n, ok := w.Nodes[t.Node]
			if !ok {
				return nil, fmt.Errorf("workflows: %s: parameter %s targets missing node %s", name, p, t.Node)
			}
			if _, ok := n.Inputs[t.Input]; !ok {
				return nil, fmt.Errorf("workflows: %s: parameter %s targets missing input %s of node %s (%s)", name, p, t.Input, t.Node, n.ClassType)
			}
		}
	}
	return w, nil
}

// Has reports whether the workflow takes parameter p.
func (w *Workflow) Has(p string) bool { _, ok := w.Params[p]; return ok }

// Set puts v into every input parameter p targets.
func (w *Workflow) Set(p string, v any) error {
	ts, ok := w.Params[p]
	if !ok {
		return fmt.Errorf("workflows: %s has no parameter %q", w.Name, p)
	}
	for _, t := range ts {
		w.Nodes[t.Node].Inputs[t.Input] = v
	}
	return nil
}

// Drop removes node id and every input that links to it: for optional inputs
// only, such as an unused reference image slot.
func (w *Workflow) Drop(id string) {
	delete(w.Nodes, id)
	for _, n := range w.Nodes {
		for k, v := range n.Inputs {
			if link, ok := v.([]any); ok && len(link) == 2 && link[0] == id {
				delete(n.Inputs, k)
			}
		}
	}
	for p, ts := range w.Params {
		kept := ts[:0]
		for _, t := range ts {
			if t.Node != id {
				kept = append(kept, t)
			}
		}
		if len(kept) == 0 {
			delete(w.Params, p)
		} else {
			w.Params[p] = kept
		}
	}
}

// SetReferences fills reference_1..n with ComfyUI input image names and drops
// the unused slots' loader nodes.
func (w *Workflow) SetReferences(names []string) error {
	if len(names) > MaxRefs {
		return fmt.Errorf("workflows: %s takes at most %d reference images, got %d", w.Name, MaxRefs, len(names))
	}
	for i := 1; i <= MaxRefs; i++ {
		p := fmt.Sprintf("%s%d", refPrefix, i)
		ts, ok := w.Params[p]
		if !ok {
			if i <= len(names) {
				return fmt.Errorf("workflows: %s has no parameter %s", w.Name, p)
			}
			continue
		}
		if i <= len(names) {
			if err := w.Set(p, names[i-1]); err != nil {
				return err
			}
			continue
		}
		for _, t := range ts {
			w.Drop(t.Node)
		}
	}
	return nil
}

// RemoveBackground puts a RemoveBackgroundClass node in front of the images
// input of every node the "prefix" parameter targets (the workflow's
// SaveImage), so the saved pictures carry an alpha channel. A real ComfyUI
// needs the node pack installed; without it /prompt refuses the workflow
// naming the class.
func (w *Workflow) RemoveBackground() error {
	ts, ok := w.Params["prefix"]
	if !ok || len(ts) == 0 {
		return fmt.Errorf("workflows: %s has no prefix parameter naming its save node", w.Name)
	}
	for i, t := range ts {
		save := w.Nodes[t.Node]
		src, ok := save.Inputs["images"].([]any)
		if !ok || len(src) != 2 {
			return fmt.Errorf("workflows: %s: node %s (%s) has no linked images input", w.Name, t.Node, save.ClassType)
		}
		id := fmt.Sprintf("aeth-rembg-%d", i+1)
		if _, taken := w.Nodes[id]; taken {
			return fmt.Errorf("workflows: %s: the background is already removed", w.Name)
		}
		w.Nodes[id] = Node{ClassType: RemoveBackgroundClass, Inputs: map[string]any{"image": src, "torchscript_jit": "default"},
			Meta: map[string]any{"title": "Remove background (alpha)"}}
		save.Inputs["images"] = []any{id, 0}
	}
	return nil
}

// Prompt is the graph as POST /prompt's "prompt" field.
func (w *Workflow) Prompt() map[string]Node { return w.Nodes }
