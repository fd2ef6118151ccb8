package comfyui

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/comfyui"
	"github.com/aetherium-engine/aetherium/media/workflows"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Bounds of comfyui_video's arguments.
const (
	MinVideoSeconds = 1
	MaxVideoSeconds = 5
	// DefaultVideoFPS is Wan 2.2 A14B's own frame rate.
	DefaultVideoFPS = 16
	MinVideoFPS     = 8
	MaxVideoFPS     = 30
	// VideoDurationTolerance is how far the saved clip's duration (ffprobe's)
	// may be from the seconds asked for.
	VideoDurationTolerance = 100 * time.Millisecond
	DefaultVideoSaveDir    = "videos"
)

// VideoArgs are comfyui_video's arguments.
type VideoArgs struct {
	Description string `json:"description,omitempty" jsonschema:"description=What happens in the clip (text-to-video). Give this or image, not both"`
	Image       string `json:"image,omitempty" jsonschema:"description=Workspace path of a picture the clip starts from (image-to-video), e.g. images/hero.png. Give this or description, not both"`
	Seconds     int    `json:"seconds" jsonschema:"minimum=1,maximum=5,description=Length of the clip in whole seconds (1-5)"`
	FPS         int    `json:"fps,omitempty" jsonschema:"minimum=8,maximum=30,description=Frames per second (default 16, Wan 2.2's own rate)"`
	Seed        *int64 `json:"seed,omitempty" jsonschema:"minimum=0,description=Seed for a reproducible clip (default random)"`
	SaveDir     string `json:"save_dir,omitempty" jsonschema:"description=Workspace directory to save into (default videos/)"`
	Filename    string `json:"filename,omitempty" jsonschema:"description=Base file name (sanitized; .mp4 added)"`
}

// VideoResult is comfyui_video's answer: the saved clip as ffprobe decoded it.
type VideoResult struct {
	PromptID string `json:"prompt_id"`
	Status   string `json:"status"` // done
	Path     string `json:"path"`
	// Mode is text-to-video or image-to-video.
	Mode    string `json:"mode"`
	Seconds int    `json:"seconds"`
	FPS     int    `json:"fps"`
	Frames  int    `json:"frames"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	// DurationSeconds is ffprobe's duration of the saved file.
	DurationSeconds float64 `json:"duration_seconds"`
	Codec           string  `json:"codec"`
	Bytes           int     `json:"bytes"`
}

// videoPlan is a checked comfyui_video call.
type videoPlan struct {
	workflow, mode     string
	description, image string // image: the cleaned workspace path
	seconds, fps       int
	frames, length     int // frames kept, Wan's 4n+1 latent length
	width, height      int
	saveDir, filename  string
	seed               int64
	expected           time.Duration
}

func registerVideo(reg *tools.Registry, t *toolset) {
	tools.Register(reg, "comfyui_video",
		fmt.Sprintf("Render a %d-%d s Wan 2.2 video clip on the run's leased %s GPU service, from a description (text-to-video) or from a workspace picture (image-to-video; exactly one of the two), at fps frames per second (default %d, %d-%d). Waits, saves the MP4 into the workspace (save_dir, default videos/), checks that it decodes and returns its path, duration and resolution. Progress is reported as the run's progress events.",
			MinVideoSeconds, MaxVideoSeconds, t.cfg.VideoService, DefaultVideoFPS, MinVideoFPS, MaxVideoFPS),
		t.video, tools.InGroup("video"))
}

// planVideo checks a's values and works out the frames: Wan renders 4n+1
// frames (workflows.WanLength), the workflow keeps seconds×fps of them, so
// the clip lasts exactly seconds.
func (t *toolset) planVideo(a VideoArgs) (videoPlan, error) {
	p := videoPlan{description: strings.TrimSpace(a.Description), seconds: a.Seconds, fps: a.FPS,
		width: t.cfg.VideoWidth, height: t.cfg.VideoHeight}
	hasImage := strings.TrimSpace(a.Image) != ""
	switch {
	case p.description == "" && !hasImage:
		return p, errors.New("give description (text-to-video) or image (a workspace picture to start from)")
	case p.description != "" && hasImage:
		return p, errors.New("give description or image, not both")
	case hasImage:
		rel, err := workspace.Clean(a.Image)
		if err != nil {
			return p, fmt.Errorf("image: %w", err)
		}
		p.image, p.workflow, p.mode = rel, workflows.WanI2V, "image-to-video"
	default:
		p.workflow, p.mode = workflows.WanT2V, "text-to-video"
	}
	if p.seconds < MinVideoSeconds || p.seconds > MaxVideoSeconds {
		return p, fmt.Errorf("seconds must be a whole number in %d..%d (got %d)", MinVideoSeconds, MaxVideoSeconds, a.Seconds)
	}
	if p.fps == 0 {
		p.fps = DefaultVideoFPS
	}
	if p.fps < MinVideoFPS || p.fps > MaxVideoFPS {
		return p, fmt.Errorf("fps must be in %d..%d (got %d)", MinVideoFPS, MaxVideoFPS, a.FPS)
	}
	p.frames = p.seconds * p.fps
	p.length = workflows.WanLength(p.frames)
	p.expected = time.Duration(p.seconds) * time.Second
	p.saveDir = a.SaveDir
	if p.saveDir == "" {
		p.saveDir = DefaultVideoSaveDir
	}
	var err error
	if p.saveDir, err = workspace.Clean(p.saveDir); err != nil {
		return p, fmt.Errorf("save_dir: %w", err)
	}
	if p.filename, err = sanitizeName(a.Filename); err != nil {
		return p, err
	}
	if a.Seed != nil {
		if *a.Seed < 0 {
			return p, fmt.Errorf("seed must not be negative (got %d)", *a.Seed)
		}
		p.seed = *a.Seed
	} else {
		n, _ := rand.Int(rand.Reader, big.NewInt(1<<48))
		p.seed = n.Int64()
	}
	return p, nil
}

func (t *toolset) video(ctx context.Context, call tools.Call, a VideoArgs) (tools.Result, error) {
	s := call.Session
	p, err := t.planVideo(a)
	if err != nil {
		return tools.Result{}, err
	}
	probe := t.d.ProbeVideo
	if probe == nil {
		if t.d.Runner == nil {
			return tools.Result{}, fmt.Errorf("comfyui_video checks each clip with ffprobe in the media image: %w", media.ErrNoRunner)
		}
		probe = func(ctx context.Context, project, name string, data []byte) (media.VideoInfo, error) {
			return media.ProbeVideo(ctx, t.d.Runner, project, name, data)
		}
	}
	service := t.cfg.VideoService
	if _, ok := lease.GrantFrom(ctx, service); !ok {
		return tools.Result{}, fmt.Errorf("%w %s: comfyui_video renders there, so the team must list it in gpu_services", ErrNoLease, service)
	}
	root, err := os.OpenRoot(s.Workspace)
	if err != nil {
		return tools.Result{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	c, err := t.client(ctx, service, newClientID(s.RunID))
	if err != nil {
		return tools.Result{}, err
	}
	wf, err := workflows.Load(p.workflow)
	if err != nil {
		return tools.Result{}, err
	}
	if p.image != "" {
		name, err := t.upload(ctx, c, root, "image", "aeth-start-", p.image)
		if err != nil {
			return tools.Result{}, describe(service, err)
		}
		if err := wf.Set("image", name); err != nil {
			return tools.Result{}, err
		}
	}
	for k, v := range map[string]any{"prompt": p.description, "seed": p.seed, "width": p.width, "height": p.height,
		"length": p.length, "frames": p.frames, "fps": p.fps, "prefix": "aetherium/" + s.RunID + "/video"} {
		if err := wf.Set(k, v); err != nil {
			return tools.Result{}, err
		}
	}
	// Before Queue: events of a fast prompt must not be missed.
	ev, err := c.Connect(ctx)
	if err != nil {
		return tools.Result{}, describe(service, err)
	}
	defer ev.Close()
	q, err := c.Queue(ctx, wf)
	if err != nil {
		return tools.Result{}, describe(service, err)
	}
	if err := t.await(ctx, s, c, ev, "comfyui_video", q.PromptID, samplersPercent()); err != nil {
		return tools.Result{}, describe(service, err)
	}
	res, err := t.saveVideo(ctx, c, root, s.RunID, q.PromptID, p, probe)
	if err != nil {
		return tools.Result{}, describe(service, err)
	}
	return tools.JSON(res)
}

// samplersPercent turns the progress of Wan 2.2's two samplers (the
// high-noise expert's steps, then the low-noise one's, each counting from 0
// to its own max) into one rising percent: each sampler is half the work.
func samplersPercent() func(comfyui.Progress) int {
	var nodes []string
	return func(p comfyui.Progress) int {
		i := -1
		for j, n := range nodes {
			if n == p.Node {
				i = j
			}
		}
		if i < 0 {
			nodes = append(nodes, p.Node)
			i = len(nodes) - 1
		}
		return min(100, (min(i, 1)*100+p.Percent())/2)
	}
}

// saveVideo downloads the finished prompt's clip, has ffprobe decode it in
// the media image and, when it decodes at the planned size and length, saves
// it: a path comfyui_video returns is always a clip that plays.
func (t *toolset) saveVideo(ctx context.Context, c *comfyui.Client, root *os.Root, runID, promptID string, p videoPlan,
	probe func(ctx context.Context, project, name string, data []byte) (media.VideoInfo, error)) (VideoResult, error) {
	h, ok, err := c.History(ctx, promptID)
	if err != nil {
		return VideoResult{}, err
	}
	if !ok {
		return VideoResult{}, fmt.Errorf("ComfyUI has no history for prompt %s after it finished", promptID)
	}
	if err := h.Err(promptID); err != nil {
		return VideoResult{}, err
	}
	var clip *comfyui.Image
	for _, im := range h.Images() {
		if strings.EqualFold(path.Ext(im.Filename), ".mp4") {
			clip = &im
			break
		}
	}
	if clip == nil {
		return VideoResult{}, fmt.Errorf("prompt %s finished without an MP4 output (its workflow's SaveVideo saved nothing)", promptID)
	}
	data, err := c.View(ctx, *clip)
	if err != nil {
		return VideoResult{}, fmt.Errorf("download %s: %w", clip.Filename, err)
	}
	info, err := probe(ctx, runID, "clip.mp4", data)
	if err != nil {
		return VideoResult{}, fmt.Errorf("the video ComfyUI returned (%s, %d bytes) does not decode, so it was not saved: %w", clip.Filename, len(data), err)
	}
	if info.Width != p.width || info.Height != p.height {
		return VideoResult{}, fmt.Errorf("the video ComfyUI returned is %dx%d, not the %dx%d asked for, so it was not saved", info.Width, info.Height, p.width, p.height)
	}
	if off := info.Duration - p.expected; off > VideoDurationTolerance || off < -VideoDurationTolerance {
		return VideoResult{}, fmt.Errorf("the video ComfyUI returned lasts %.3f s (%d frames), not the %d s asked for (more than %.1f s off), so it was not saved",
			info.Duration.Seconds(), info.Frames, p.seconds, VideoDurationTolerance.Seconds())
	}
	if err := root.MkdirAll(p.saveDir, 0o755); err != nil {
		return VideoResult{}, fmt.Errorf("create %s: %w", p.saveDir, err)
	}
	base := p.filename
	if base == "" {
		base = "video-" + promptID[:min(8, len(promptID))]
	}
	rel := path.Join(p.saveDir, base+".mp4")
	if err := saveFile(root, rel, data); err != nil {
		return VideoResult{}, fmt.Errorf("save %s: %w", rel, err)
	}
	return VideoResult{PromptID: promptID, Status: "done", Path: rel, Mode: p.mode, Seconds: p.seconds, FPS: p.fps, Frames: info.Frames,
		Width: info.Width, Height: info.Height, DurationSeconds: math.Round(info.Duration.Seconds()*1000) / 1000, Codec: info.Codec, Bytes: len(data)}, nil
}
