package comfyui

// finish_image: the slow 2K upscale of a qwen team's pictures, queued during
// the run and done after it.
//
// The tool only records the request: one finish_images row per picture
// (store.RequestFinishImages; a repeated call names the same pictures and
// records nothing new), and returns what it queued. When the run has ended and
// its cleanup released the run's leases, run:cleanup enqueues run:finish-image
// for a completed run with pending pictures (a cancelled or failed run's are
// settled as skipped: upscaling a run nobody finished is wasted GPU time). The
// post-run task (package finishimage) takes a lease of its own on comfyui-qwen
// (holder "finish:<run_id>"), runs the qwen-upscale workflow through the
// fencing proxy for each pending picture with Finisher.Upscale, writes
// <name>-2k.png beside each original and records the outcome as the run's
// postrun.finish_image event.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui"
	"github.com/aetherium-engine/aetherium/media/workflows"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// finish_image's bounds and naming.
const (
	// FinishLongSide is the long side of an upscaled picture; the short side
	// keeps the original's aspect ratio.
	FinishLongSide = 2048
	// MaxFinishImages bounds the pictures one run may ask to finish (in all
	// its calls).
	MaxFinishImages = 16
	// FinishSuffix ends an upscale's name: images/hero.png → images/hero-2k.png.
	FinishSuffix = "-2k.png"
	// FinishModel is the upscale model the workflow loads (ComfyUI's
	// models/upscale_models).
	FinishModel = "4x-UltraSharp.pth"
)

// FinishArgs are finish_image's arguments.
type FinishArgs struct {
	Paths []string `json:"paths,omitempty" jsonschema:"description=Workspace PNGs to upscale (default: every picture this run's comfyui_generate saved); up to 16 per run"`
}

// FinishStore records finish_image's requests (*store.Store).
type FinishStore interface {
	RequestFinishImages(ctx context.Context, runID string, imgs []store.FinishImage, limit int) ([]string, error)
}

// FinishQueued is one picture of finish_image's answer.
type FinishQueued struct {
	Path   string `json:"path"`
	Output string `json:"output"`
	// Already: an earlier call queued it.
	Already bool `json:"already_queued,omitempty"`
}

// FinishResult is finish_image's answer.
type FinishResult struct {
	Queued   []FinishQueued `json:"queued"`
	LongSide int            `json:"long_side"`
	When     string         `json:"when"`
	Event    string         `json:"event"`
}

// PostRunFinishImage is the type of the run event the post-run task records
// its outcome as (events.PostRunFinishImage).
const PostRunFinishImage = events.PostRunFinishImage

// RegisterFinish adds finish_image. st nil: the tool refuses to run (this
// deployment cannot record post-run work).
func RegisterFinish(reg *tools.Registry, st FinishStore, cfg Config) {
	cfg = cfg.WithDefaults()
	f := &finishTool{st: st, cfg: cfg}
	tools.Register(reg, "finish_image",
		"Queue the final 2K upscale of this qwen team's pictures for after the run: it runs once the run has completed, writes <name>-2k.png beside each original (long side 2048) and reports as the run's postrun.finish_image event. paths: workspace PNGs (default: every picture this run's comfyui_generate saved). Calling it again with the same pictures queues nothing new.",
		f.finish, tools.Idempotent(), tools.InGroup("comfyui"))
}

type finishTool struct {
	st  FinishStore
	cfg Config
}

func (f *finishTool) finish(ctx context.Context, call tools.Call, a FinishArgs) (tools.Result, error) {
	s := call.Session
	name, m, err := model(s)
	if err != nil {
		return tools.Result{}, err
	}
	if !m.Qwen {
		return tools.Result{}, fmt.Errorf("finish_image upscales Qwen-Image pictures: it needs a team with image_model: qwen (this team's is %s)", name)
	}
	if f.st == nil {
		return tools.Result{}, errors.New("finish_image is not available on this fleet (no database for post-run work)")
	}
	root, err := os.OpenRoot(s.Workspace)
	if err != nil {
		return tools.Result{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	paths := a.Paths
	if len(paths) == 0 {
		if paths, err = runPictures(root, s.RunID, m.Service); err != nil {
			return tools.Result{}, err
		}
		if len(paths) == 0 {
			return tools.Result{}, errors.New("this run has saved no pictures with comfyui_generate yet: generate them first, or name workspace PNGs in paths")
		}
	}
	if len(paths) > MaxFinishImages {
		return tools.Result{}, fmt.Errorf("paths: at most %d pictures (got %d)", MaxFinishImages, len(paths))
	}
	var imgs []store.FinishImage
	seen := map[string]bool{}
	for i, p := range paths {
		rel, err := f.checkPicture(root, p)
		if err != nil {
			return tools.Result{}, fmt.Errorf("paths[%d]: %w", i, err)
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		imgs = append(imgs, store.FinishImage{Path: rel, Output: FinishOutput(rel)})
	}
	added, err := f.st.RequestFinishImages(ctx, s.RunID, imgs, MaxFinishImages)
	if err != nil {
		return tools.Result{}, err
	}
	now := map[string]bool{}
	for _, p := range added {
		now[p] = true
	}
	res := FinishResult{LongSide: FinishLongSide, Event: PostRunFinishImage,
		When: "after the run completes (skipped if it fails or is cancelled)"}
	for _, im := range imgs {
		res.Queued = append(res.Queued, FinishQueued{Path: im.Path, Output: im.Output, Already: !now[im.Path]})
	}
	return tools.JSON(res)
}

// FinishOutput is where the upscale of rel is written: beside it, named
// <name>-2k.png.
func FinishOutput(rel string) string {
	return strings.TrimSuffix(rel, path.Ext(rel)) + FinishSuffix
}

// checkPicture validates one path: inside the workspace, a regular PNG file
// of at most MaxRefBytes, not itself an upscale, and smaller than the target.
func (f *finishTool) checkPicture(root *os.Root, p string) (string, error) {
	rel, err := workspace.Clean(p)
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(rel, FinishSuffix) {
		return "", fmt.Errorf("%s is already an upscale (its name ends in %s)", rel, FinishSuffix)
	}
	fi, err := root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist in the workspace", rel)
	}
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Size() > f.cfg.MaxRefBytes {
		return "", fmt.Errorf("%s is not a regular file of at most %d bytes", rel, f.cfg.MaxRefBytes)
	}
	// Opened through confine: a name swapped for a FIFO since the Lstat is
	// refused instead of blocking the open.
	ws, err := confined(root, f.cfg.MaxRefBytes)
	if err != nil {
		return "", err
	}
	defer ws.Close()
	fh, err := ws.Open(rel)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	c, err := png.DecodeConfig(fh)
	if err != nil {
		return "", fmt.Errorf("%s is not a PNG picture: %v", rel, err)
	}
	if max(c.Width, c.Height) >= FinishLongSide {
		return "", fmt.Errorf("%s is %dx%d: already at least %d on its long side", rel, c.Width, c.Height, FinishLongSide)
	}
	return rel, nil
}

// runPictures lists the pictures runID's comfyui_generate calls on service
// saved, from their records (a project's workspace holds other runs' too),
// in path order.
func runPictures(root *os.Root, runID, service string) ([]string, error) {
	ents, err := fs.ReadDir(root.FS(), recordDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("comfyui bookkeeping: %w", err)
	}
	var out []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !promptIDRE.MatchString(id) {
			continue
		}
		rec, err := readRecord(root, id)
		if err != nil {
			continue
		}
		if rec.Service != service || !strings.HasPrefix(rec.ClientID, ClientPrefix(runID)) {
			continue
		}
		for _, p := range rec.Saved {
			if _, err := root.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// ErrPicture marks an upscale that failed for the picture itself (it is gone
// or no PNG, or ComfyUI refused or failed the workflow): retrying the task
// cannot help, so the picture is recorded as failed.
var ErrPicture = errors.New("picture cannot be upscaled")

// Finisher upscales pictures for the post-run task through a grant on the
// qwen service (the fencing proxy's URL, the grant's token).
type Finisher struct {
	// Service returns a leased service's definition (lease.Manager.Service).
	Service func(name string) (lease.Service, bool)
	Client  comfyui.Config
	// WaitTimeout bounds one picture's upscale. Default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Log, when set, reports event-stream fallbacks.
	Log *slog.Logger
}

// FinishService is the GPU service finish_image's upscales run on.
func FinishService() string { return Models["qwen"].Service }

// Upscale runs the qwen-upscale workflow on the workspace picture src and
// writes the PNG to dst (through a temporary file, so a crash leaves no half
// picture under dst). It returns the upscale's size. Errors wrapping
// ErrPicture are the picture's; others (the lease was fenced, the service did
// not answer) are worth a retry.
func (f Finisher) Upscale(ctx context.Context, g lease.Grant, root *os.Root, runID, src, dst string) (int, int, error) {
	data, err := readPicture(root, src)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: read %s: %v", ErrPicture, src, err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s is not a PNG: %v", ErrPicture, src, err)
	}
	w, h := FinishSize(cfg.Width, cfg.Height)
	if f.Service == nil {
		return 0, 0, errors.New("ComfyUI is not configured on this fleet (streams.leases.services)")
	}
	svc, ok := f.Service(g.Service)
	if !ok || svc.URL == "" {
		return 0, 0, fmt.Errorf("GPU service %s is not configured with a url (streams.leases.services)", g.Service)
	}
	c, err := comfyui.New(svc.URL, g, finishClientID(runID), f.Client)
	if err != nil {
		return 0, 0, err
	}
	base, _ := sanitizeName(path.Base(src))
	name, err := c.Upload(ctx, "aeth-finish-"+runID[:min(8, len(runID))]+"-"+base+".png", data)
	if err != nil {
		return 0, 0, describe(g.Service, fmt.Errorf("upload %s: %w", src, err))
	}
	wf, err := workflows.Load(workflows.QwenUpscale)
	if err != nil {
		return 0, 0, err
	}
	for p, v := range map[string]any{"image": name, "model": FinishModel, "width": w, "height": h, "prefix": "aetherium/" + runID + "-2k"} {
		if err := wf.Set(p, v); err != nil {
			return 0, 0, err
		}
	}
	wait := f.WaitTimeout
	if wait <= 0 {
		wait = DefaultWaitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ev, err := c.Connect(ctx)
	if err != nil {
		return 0, 0, describe(g.Service, err)
	}
	defer ev.Close()
	q, err := c.Queue(ctx, wf)
	if err != nil {
		return 0, 0, pictureErr(g.Service, err)
	}
	err = ev.Wait(ctx, q.PromptID, nil)
	var lost *comfyui.StreamError
	if errors.As(err, &lost) && ctx.Err() == nil {
		if f.Log != nil {
			f.Log.WarnContext(ctx, "comfyui event stream lost; polling the history", "prompt_id", q.PromptID, "err", err)
		}
		var tk toolset
		err = tk.poll(ctx, c, q.PromptID)
	}
	if err != nil {
		if ctx.Err() != nil {
			var tk toolset
			tk.abandon(c, q.PromptID) // stop the work on the GPU, not only the wait
		}
		return 0, 0, pictureErr(g.Service, err)
	}
	hist, done, err := c.History(ctx, q.PromptID)
	if err != nil {
		return 0, 0, describe(g.Service, err)
	}
	if !done {
		return 0, 0, fmt.Errorf("ComfyUI has no history for prompt %s after it finished", q.PromptID)
	}
	if err := hist.Err(q.PromptID); err != nil {
		return 0, 0, pictureErr(g.Service, err)
	}
	images := hist.Images()
	if len(images) != 1 {
		return 0, 0, fmt.Errorf("%w: upscale prompt %s saved %d images, want 1", ErrPicture, q.PromptID, len(images))
	}
	out, err := c.View(ctx, images[0])
	if err != nil {
		return 0, 0, describe(g.Service, fmt.Errorf("download %s: %w", images[0].Filename, err))
	}
	oc, err := png.DecodeConfig(bytes.NewReader(out))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: the upscale of %s is not a PNG: %v", ErrPicture, src, err)
	}
	if err := saveFile(root, dst, out); err != nil {
		return 0, 0, fmt.Errorf("save %s: %w", dst, err)
	}
	return oc.Width, oc.Height, nil
}

// pictureErr marks ComfyUI's refusal or failure of the workflow as the
// picture's (ErrPicture); anything else is described as usual.
func pictureErr(service string, err error) error {
	var pe *comfyui.PromptError
	var ee *comfyui.ExecutionError
	if errors.As(err, &pe) || errors.As(err, &ee) {
		return fmt.Errorf("%w: %w", ErrPicture, err)
	}
	return describe(service, err)
}

// FinishSize is the size an upscale of a w×h picture gets: FinishLongSide on
// the long side, the short side in proportion (rounded).
func FinishSize(w, h int) (int, int) {
	if w <= 0 || h <= 0 {
		return FinishLongSide, FinishLongSide
	}
	if w >= h {
		return FinishLongSide, max(1, (h*FinishLongSide+w/2)/w)
	}
	return max(1, (w*FinishLongSide+h/2)/h), FinishLongSide
}

// FinishedUpscale reports whether dst already holds a finished upscale (a delivery that
// wrote it crashed before recording it): a PNG of the size FinishSize gives
// src. It returns that size.
func FinishedUpscale(root *os.Root, src, dst string) (int, int, bool) {
	// Both are the agent's files: through confine, so a FIFO under either name
	// is refused instead of hanging the post-run task.
	ws, err := confined(root, confine.DefaultMaxBytes)
	if err != nil {
		return 0, 0, false
	}
	defer ws.Close()
	sc, err := pngConfig(ws, src)
	if err != nil {
		return 0, 0, false
	}
	dc, err := pngConfig(ws, dst)
	if err != nil {
		return 0, 0, false
	}
	w, h := FinishSize(sc.Width, sc.Height)
	return dc.Width, dc.Height, dc.Width == w && dc.Height == h
}

// pngConfig is the size and colour model of the PNG name in ws, read from its
// header alone.
func pngConfig(ws *confine.Root, name string) (image.Config, error) {
	f, err := ws.Open(name)
	if err != nil {
		return image.Config{}, err
	}
	defer f.Close()
	return png.DecodeConfig(f)
}

// readPicture reads the agent's picture src through confine (no FIFO opened,
// no symlink out, at most confine.DefaultMaxBytes).
func readPicture(root *os.Root, src string) ([]byte, error) {
	ws, err := confined(root, confine.DefaultMaxBytes)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	return ws.ReadFile(src)
}

// finishClientID is the ComfyUI client id of one upscale: not under the run's
// ClientPrefix, which the run's cleanup cancels.
func finishClientID(runID string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "aeth-finish-" + runID + "-" + hex.EncodeToString(b)
}
