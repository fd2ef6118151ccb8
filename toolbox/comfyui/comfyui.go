// Package comfyui is the ComfyUITools server class: comfyui_generate and
// comfyui_status (server group comfyui) and comfyui_video (server group video,
// video.go). The image tools talk to the ComfyUI of the team's image model
// (tools.Session.ImageModel: the comfyui service with the default
// text-to-image workflow, or comfyui-qwen with Qwen-Image), comfyui_video to
// the comfyui.video_service one (Wan 2.2), each through the run's lease on
// that service (lease.GrantFrom): every request carries the grant's fencing
// token, and the fencing proxy in front of the service refuses a holder whose
// lease was lost, which the tools report as such.
//
// A generation's bookkeeping (service, client id, where to save, what was
// saved) is kept in the workspace's engine directory (.aetherium/comfyui/), so
// comfyui_status works from any worker and saves each output once.
package comfyui

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"log/slog"
	"math/big"
	"os"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/confine"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/comfyui"
	"github.com/aetherium-engine/aetherium/media/workflows"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Defaults of Config.
const (
	DefaultMaxCount      = 4
	DefaultWidth         = 1024
	DefaultHeight        = 1024
	DefaultSaveDir       = "images"
	DefaultWaitTimeout   = 15 * time.Minute
	DefaultProgressEvery = 10 // percent
	DefaultMaxSide       = 2048
	DefaultMaxRefBytes   = 20 << 20

	// DefaultVideoService is the GPU service comfyui_video renders on.
	DefaultVideoService = "comfyui-video"
	// DefaultVideoWidth and DefaultVideoHeight are Wan 2.2 A14B's 480p size.
	DefaultVideoWidth  = 832
	DefaultVideoHeight = 480
)

// Config bounds the tools (the `comfyui` section).
type Config struct {
	// MaxCount bounds count (images per call). Default DefaultMaxCount.
	MaxCount int `yaml:"max_count"`
	// MaxSide bounds width and height. Default DefaultMaxSide.
	MaxSide int `yaml:"max_side"`
	// WaitTimeout bounds a waiting comfyui_generate. Default DefaultWaitTimeout.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// ProgressEvery is the step, in percent, between progress events. Default
	// DefaultProgressEvery.
	ProgressEvery int `yaml:"progress_every"`
	// MaxRefBytes bounds one reference image. Default DefaultMaxRefBytes.
	MaxRefBytes int64 `yaml:"max_ref_bytes"`
	// Client tunes the ComfyUI client.
	Client comfyui.Config `yaml:"client"`

	// VideoService is the lease service (streams.leases.services) comfyui_video
	// renders on, a ComfyUI with Wan 2.2 (or aetherium/comfysim-video); a team
	// lists it in gpu_services. Default DefaultVideoService.
	VideoService string `yaml:"video_service"`
	// VideoWidth and VideoHeight are the clips' size (an image-to-video start
	// image is scaled to it): multiples of 16 (Wan's latent) in 64..max_side.
	// Default DefaultVideoWidth × DefaultVideoHeight.
	VideoWidth  int `yaml:"video_width"`
	VideoHeight int `yaml:"video_height"`
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.MaxCount = defaults.Positive(c.MaxCount, DefaultMaxCount)
	c.MaxSide = defaults.Positive(c.MaxSide, DefaultMaxSide)
	c.WaitTimeout = defaults.Positive(c.WaitTimeout, DefaultWaitTimeout)
	if c.ProgressEvery <= 0 || c.ProgressEvery > 100 {
		c.ProgressEvery = DefaultProgressEvery
	}
	c.MaxRefBytes = defaults.Positive(c.MaxRefBytes, DefaultMaxRefBytes)
	c.VideoService = cmp.Or(c.VideoService, DefaultVideoService)
	c.VideoWidth = defaults.Positive(c.VideoWidth, DefaultVideoWidth)
	c.VideoHeight = defaults.Positive(c.VideoHeight, DefaultVideoHeight)
	c.Client = c.Client.WithDefaults()
	return c
}

// Validate reports a bad field.
func (c Config) Validate() error {
	if c.MaxSide < 64 {
		return fmt.Errorf("comfyui.max_side %d: want at least 64", c.MaxSide)
	}
	if !serviceRE.MatchString(c.VideoService) {
		return fmt.Errorf("comfyui.video_service %q: want a lease service name (lowercase letters, digits, '.', '_', '-')", c.VideoService)
	}
	for _, v := range []struct {
		key string
		n   int
	}{{"video_width", c.VideoWidth}, {"video_height", c.VideoHeight}} {
		if v.n < 64 || v.n > c.MaxSide || v.n%16 != 0 {
			return fmt.Errorf("comfyui.%s %d: want a multiple of 16 in 64..%d (max_side)", v.key, v.n, c.MaxSide)
		}
	}
	return c.Client.Validate()
}

// Model is what an image_model renders with.
type Model struct {
	Service, Workflow, EditWorkflow string
	// Qwen models take ratio and reference_images.
	Qwen bool
}

// Models are the image models by templates' image_model ("" is "sd").
var Models = map[string]Model{
	"sd":   {Service: "comfyui", Workflow: workflows.SD},
	"qwen": {Service: "comfyui-qwen", Workflow: workflows.Qwen, EditWorkflow: workflows.QwenEdit, Qwen: true},
}

// Ratios are Qwen-Image's trained sizes by aspect ratio.
var Ratios = map[string][2]int{
	"1:1": {1328, 1328}, "16:9": {1664, 928}, "9:16": {928, 1664}, "4:3": {1472, 1140},
	"3:4": {1140, 1472}, "3:2": {1584, 1056}, "2:3": {1056, 1584},
}

// Deps are the tools' collaborators.
type Deps struct {
	// Service returns a leased service's definition (lease.Manager.Service); its
	// URL is where the tools send requests (the fencing proxy's). Nil: the tools
	// fail at call time.
	Service func(name string) (lease.Service, bool)
	// Runner runs ffprobe in the media image (sandbox.Docker) for
	// comfyui_video's decode check; nil: comfyui_video refuses to run (the
	// check never runs on the worker's host).
	Runner media.Runner
	// ProbeVideo replaces media.ProbeVideo on Runner (tests). Nil: that.
	ProbeVideo func(ctx context.Context, project, name string, data []byte) (media.VideoInfo, error)
}

// GenerateArgs are comfyui_generate's arguments.
type GenerateArgs struct {
	Prompt          string   `json:"prompt" jsonschema:"description=What to draw"`
	Negative        string   `json:"negative,omitempty" jsonschema:"description=What to keep out of the picture"`
	Width           int      `json:"width,omitempty" jsonschema:"minimum=64,description=Width in pixels (multiple of 8; default 1024)"`
	Height          int      `json:"height,omitempty" jsonschema:"minimum=64,description=Height in pixels (multiple of 8; default 1024)"`
	Seed            *int64   `json:"seed,omitempty" jsonschema:"minimum=0,description=Seed for a reproducible picture (default random)"`
	Count           int      `json:"count,omitempty" jsonschema:"minimum=1,description=How many pictures (default 1)"`
	SaveDir         string   `json:"save_dir,omitempty" jsonschema:"description=Workspace directory to save into (default images/)"`
	Filename        string   `json:"filename,omitempty" jsonschema:"description=Base file name (sanitized; .png added; numbered when count > 1)"`
	Wait            *bool    `json:"wait,omitempty" jsonschema:"description=Wait for the pictures and save them (default true); false returns the prompt_id for comfyui_status"`
	Ratio           string   `json:"ratio,omitempty" jsonschema:"enum=1:1,enum=16:9,enum=9:16,enum=4:3,enum=3:4,enum=3:2,enum=2:3,description=image_model qwen only: aspect ratio at Qwen-Image's trained size (instead of width/height)"`
	ReferenceImages []string `json:"reference_images,omitempty" jsonschema:"description=image_model qwen only: up to 3 workspace images the picture follows (uploaded to ComfyUI first)"`
	Transparent     bool     `json:"transparent,omitempty" jsonschema:"description=image_model qwen only: remove the background, saving a PNG with an alpha channel"`
}

// StatusArgs are comfyui_status's arguments.
type StatusArgs struct {
	PromptID string `json:"prompt_id" jsonschema:"description=The prompt_id comfyui_generate returned"`
}

// Result is what both tools return.
type Result struct {
	PromptID string   `json:"prompt_id"`
	Status   string   `json:"status"` // queued | running | done | failed
	Position int      `json:"position,omitempty"`
	Percent  *int     `json:"percent,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	Width    int      `json:"width,omitempty"`
	Height   int      `json:"height,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// record is a generation's bookkeeping in .aetherium/comfyui/<prompt_id>.json.
type record struct {
	PromptID string   `json:"prompt_id"`
	Service  string   `json:"service"`
	ClientID string   `json:"client_id"`
	SaveDir  string   `json:"save_dir"`
	Filename string   `json:"filename"`
	Width    int      `json:"width"`
	Height   int      `json:"height"`
	Saved    []string `json:"saved,omitempty"`
}

const recordDir = workspace.InternalDir + "/comfyui"

var (
	promptIDRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	serviceRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) // lease's service names
)

// Register adds comfyui_generate and comfyui_status.
func Register(reg *tools.Registry, d Deps, cfg Config) {
	cfg = cfg.WithDefaults()
	t := &toolset{d: d, cfg: cfg}
	tools.Register(reg, "comfyui_generate",
		"Render pictures with ComfyUI on the team's leased GPU service. By default waits, saves each PNG into the workspace (save_dir, default images/) and returns the paths; wait=false returns a prompt_id for comfyui_status. Progress is reported as the run's progress events. Teams with image_model qwen also take ratio, transparent (a PNG with an alpha channel) and reference_images.",
		t.generate, tools.InGroup("comfyui"))
	registerVideo(reg, t)
	tools.Register(reg, "comfyui_status",
		"Status of a comfyui_generate prompt: queued (with position), running (with percent), done (saving its pictures into the workspace if not yet saved) or failed with ComfyUI's error.",
		t.status, tools.Idempotent(), tools.InGroup("comfyui"))
}

type toolset struct {
	d   Deps
	cfg Config
}

// ErrNoLease is a call from a run that holds no lease on the tool's service.
var ErrNoLease = errors.New("the run holds no lease on the GPU service")

func (t *toolset) client(ctx context.Context, service, clientID string) (*comfyui.Client, error) {
	if t.d.Service == nil {
		return nil, fmt.Errorf("ComfyUI is not configured on this fleet (streams.leases.services)")
	}
	svc, ok := t.d.Service(service)
	if !ok || svc.URL == "" {
		return nil, fmt.Errorf("GPU service %s is not configured with a url (streams.leases.services)", service)
	}
	g, ok := lease.GrantFrom(ctx, service)
	if !ok {
		return nil, fmt.Errorf("%w %s: list it in the team's gpu_services", ErrNoLease, service)
	}
	return comfyui.New(svc.URL, g, clientID, t.cfg.Client)
}

func model(s *tools.Session) (string, Model, error) {
	name := s.ImageModel
	if name == "" {
		name = "sd"
	}
	m, ok := Models[name]
	if !ok {
		return name, m, fmt.Errorf("unknown image_model %q", name)
	}
	return name, m, nil
}

func newClientID(runID string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return ClientPrefix(runID) + hex.EncodeToString(b)
}

// ClientPrefix starts the ComfyUI client_id of every prompt a run queues, so the
// run's cleanup finds its prompts in the queue (CancelRun).
func ClientPrefix(runID string) string { return "aeth-" + runID + "-" }

func (t *toolset) generate(ctx context.Context, call tools.Call, a GenerateArgs) (tools.Result, error) {
	s := call.Session
	name, m, err := model(s)
	if err != nil {
		return tools.Result{}, err
	}
	a.Prompt = strings.TrimSpace(a.Prompt)
	if a.Prompt == "" {
		return tools.Result{}, errors.New("prompt is empty")
	}
	if !m.Qwen && (a.Ratio != "" || len(a.ReferenceImages) > 0 || a.Transparent) {
		return tools.Result{}, fmt.Errorf("ratio, transparent and reference_images need a team with image_model: qwen (this team's is %s)", name)
	}
	w, h := a.Width, a.Height
	if a.Ratio != "" {
		if w != 0 || h != 0 {
			return tools.Result{}, errors.New("give ratio or width/height, not both")
		}
		wh, ok := Ratios[a.Ratio]
		if !ok {
			return tools.Result{}, fmt.Errorf("ratio %q is not one of 1:1, 16:9, 9:16, 4:3, 3:4, 3:2, 2:3", a.Ratio)
		}
		w, h = wh[0], wh[1]
	}
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	if w < 64 || h < 64 || w > t.cfg.MaxSide || h > t.cfg.MaxSide || w%8 != 0 || h%8 != 0 {
		return tools.Result{}, fmt.Errorf("width and height must be multiples of 8 in 64..%d (got %dx%d)", t.cfg.MaxSide, w, h)
	}
	count := a.Count
	if count == 0 {
		count = 1
	}
	if count < 1 || count > t.cfg.MaxCount {
		return tools.Result{}, fmt.Errorf("count must be 1..%d (got %d)", t.cfg.MaxCount, count)
	}
	saveDir := a.SaveDir
	if saveDir == "" {
		saveDir = DefaultSaveDir
	}
	if saveDir, err = workspace.Clean(saveDir); err != nil {
		return tools.Result{}, fmt.Errorf("save_dir: %w", err)
	}
	filename, err := sanitizeName(a.Filename)
	if err != nil {
		return tools.Result{}, err
	}
	var seed int64
	if a.Seed != nil {
		seed = *a.Seed
	} else {
		n, _ := rand.Int(rand.Reader, big.NewInt(1<<48))
		seed = n.Int64()
	}
	root, err := os.OpenRoot(s.Workspace)
	if err != nil {
		return tools.Result{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()

	c, err := t.client(ctx, m.Service, newClientID(s.RunID))
	if err != nil {
		return tools.Result{}, err
	}
	wfName := m.Workflow
	if len(a.ReferenceImages) > 0 {
		wfName = m.EditWorkflow
	}
	wf, err := workflows.Load(wfName)
	if err != nil {
		return tools.Result{}, err
	}
	if len(a.ReferenceImages) > 0 {
		names, err := t.uploadRefs(ctx, c, root, a.ReferenceImages)
		if err != nil {
			return tools.Result{}, err
		}
		if err := wf.SetReferences(names); err != nil {
			return tools.Result{}, err
		}
	}
	if a.Transparent {
		if err := wf.RemoveBackground(); err != nil {
			return tools.Result{}, err
		}
	}
	for p, v := range map[string]any{"prompt": a.Prompt, "seed": seed, "width": w, "height": h, "count": count, "prefix": "aetherium/" + s.RunID} {
		if err := wf.Set(p, v); err != nil {
			return tools.Result{}, err
		}
	}
	if a.Negative != "" {
		if err := wf.Set("negative", a.Negative); err != nil {
			return tools.Result{}, err
		}
	}
	wait := a.Wait == nil || *a.Wait
	var ev *comfyui.Events
	if wait {
		// Before Queue: events of a fast prompt must not be missed.
		if ev, err = c.Connect(ctx); err != nil {
			return tools.Result{}, describe(m.Service, err)
		}
		defer ev.Close()
	}
	q, err := c.Queue(ctx, wf)
	if err != nil {
		return tools.Result{}, describe(m.Service, err)
	}
	rec := record{PromptID: q.PromptID, Service: m.Service, ClientID: c.ClientID(), SaveDir: saveDir, Filename: filename, Width: w, Height: h}
	if err := writeRecord(root, rec); err != nil {
		return tools.Result{}, err
	}
	if !wait {
		return tools.JSON(Result{PromptID: q.PromptID, Status: "queued", Width: w, Height: h})
	}
	if err := t.await(ctx, s, c, ev, "comfyui_generate", q.PromptID, comfyui.Progress.Percent); err != nil {
		return tools.Result{}, describe(m.Service, err)
	}
	res, err := t.collect(ctx, c, root, &rec)
	if err != nil {
		return tools.Result{}, describe(m.Service, err)
	}
	return tools.JSON(res)
}

// await waits for promptID on ev, reporting percent(progress) as tool's
// progress events every cfg.ProgressEvery percent. When the event stream
// breaks it follows the prompt through /history; when the run or step ends or
// the wait times out it stops the work on the GPU, not only the wait.
func (t *toolset) await(ctx context.Context, s *tools.Session, c *comfyui.Client, ev *comfyui.Events, tool, promptID string, percent func(comfyui.Progress) int) error {
	wctx, cancel := context.WithTimeout(ctx, t.cfg.WaitTimeout)
	defer cancel()
	last := -1
	err := ev.Wait(wctx, promptID, func(p comfyui.Progress) {
		pct := percent(p)
		if pct/t.cfg.ProgressEvery == last/t.cfg.ProgressEvery && pct != 100 {
			return
		}
		last = pct
		t.progress(ctx, s, tool, promptID, pct)
	})
	var lost *comfyui.StreamError
	if errors.As(err, &lost) && wctx.Err() == nil {
		// The event stream broke (a proxy or network hiccup): the prompt still
		// runs, so follow it through /history instead.
		slog.WarnContext(ctx, "comfyui event stream lost; polling the history", "prompt_id", promptID, "err", err)
		err = t.poll(wctx, c, promptID)
	}
	if err != nil && (ctx.Err() != nil || wctx.Err() != nil) {
		t.abandon(c, promptID)
	}
	return err
}

// poll waits for promptID through GET /history (every half second).
func (t *toolset) poll(ctx context.Context, c *comfyui.Client, promptID string) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		h, done, err := c.History(ctx, promptID)
		if err != nil {
			return err
		}
		if done {
			return h.Err(promptID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// abandon interrupts (or dequeues) a prompt whose caller gave up.
func (t *toolset) abandon(c *comfyui.Client, promptID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Delete(ctx, promptID)
	_ = c.Interrupt(ctx, promptID)
}

func (t *toolset) progress(ctx context.Context, s *tools.Session, tool, promptID string, pct int) {
	if s.Coordinator == nil {
		return
	}
	_ = s.Coordinator.Emit(ctx, fmt.Sprintf("progress:%s:%s:%d", s.SessionID, promptID, pct), events.Progress,
		events.ProgressData{Percent: pct, Message: fmt.Sprintf("%s %s: %d%%", tool, promptID, pct), Tool: tool, PromptID: promptID})
}

func (t *toolset) uploadRefs(ctx context.Context, c *comfyui.Client, root *os.Root, refs []string) ([]string, error) {
	if len(refs) > workflows.MaxRefs {
		return nil, fmt.Errorf("reference_images: at most %d", workflows.MaxRefs)
	}
	var names []string
	for i, r := range refs {
		n, err := t.upload(ctx, c, root, fmt.Sprintf("reference_images[%d]", i), fmt.Sprintf("aeth-%d-", i+1), r)
		if err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, nil
}

// upload puts the workspace image p (the argument what) on ComfyUI as an
// input image named prefix+<its sanitized name>: the path is checked like the
// workspace tools' (workspace.Clean, read through the root, so nothing outside
// the workspace), and only a regular file of at most cfg.MaxRefBytes is sent
// (ComfyUI itself refuses what is not a picture).
func (t *toolset) upload(ctx context.Context, c *comfyui.Client, root *os.Root, what, prefix, p string) (string, error) {
	rel, err := workspace.Clean(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	// Read through confine: a FIFO or socket is refused instead of blocking the
	// open, no symlink leads out, nothing over MaxRefBytes is read.
	ws, err := confined(root, t.cfg.MaxRefBytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	defer ws.Close()
	data, err := ws.ReadFile(rel)
	if errors.Is(err, confine.ErrNotRegular) || errors.Is(err, confine.ErrTooLarge) {
		return "", fmt.Errorf("%s: %s is not a regular file of at most %d bytes: %w", what, rel, t.cfg.MaxRefBytes, err)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	base, _ := sanitizeName(path.Base(rel))
	n, err := c.Upload(ctx, prefix+base+strings.ToLower(path.Ext(rel)), data)
	if err != nil {
		return "", fmt.Errorf("%s: upload: %w", what, err)
	}
	return n, nil
}

// collect saves a finished prompt's pictures (once: a record that lists them
// is returned as is) and reports them.
func (t *toolset) collect(ctx context.Context, c *comfyui.Client, root *os.Root, rec *record) (Result, error) {
	res := Result{PromptID: rec.PromptID, Status: "done", Width: rec.Width, Height: rec.Height}
	if len(rec.Saved) > 0 {
		res.Paths = rec.Saved
		return res, nil
	}
	h, ok, err := c.History(ctx, rec.PromptID)
	if err != nil {
		return res, err
	}
	if !ok {
		return res, fmt.Errorf("ComfyUI has no history for prompt %s after it finished", rec.PromptID)
	}
	if err := h.Err(rec.PromptID); err != nil {
		return res, err
	}
	images := h.Images()
	if len(images) == 0 {
		return res, fmt.Errorf("prompt %s finished without output images", rec.PromptID)
	}
	if err := root.MkdirAll(rec.SaveDir, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", rec.SaveDir, err)
	}
	base := rec.Filename
	if base == "" {
		base = "comfyui-" + rec.PromptID[:min(8, len(rec.PromptID))]
	}
	var saved []string
	for i, im := range images {
		data, err := c.View(ctx, im)
		if err != nil {
			return res, fmt.Errorf("download %s: %w", im.Filename, err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return res, fmt.Errorf("output %s is not a PNG: %w", im.Filename, err)
		}
		name := base + ".png"
		if len(images) > 1 {
			name = fmt.Sprintf("%s-%d.png", base, i+1)
		}
		rel := path.Join(rec.SaveDir, name)
		if err := saveFile(root, rel, data); err != nil {
			return res, fmt.Errorf("save %s: %w", rel, err)
		}
		saved = append(saved, rel)
		res.Width, res.Height = cfg.Width, cfg.Height
	}
	rec.Saved = saved
	if err := writeRecord(root, *rec); err != nil {
		return res, err
	}
	res.Paths = saved
	return res, nil
}

func (t *toolset) status(ctx context.Context, call tools.Call, a StatusArgs) (tools.Result, error) {
	s := call.Session
	if !promptIDRE.MatchString(a.PromptID) {
		return tools.Result{}, fmt.Errorf("prompt_id %q is not one comfyui_generate returned", a.PromptID)
	}
	root, err := os.OpenRoot(s.Workspace)
	if err != nil {
		return tools.Result{}, fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	rec, err := readRecord(root, a.PromptID)
	if err != nil {
		return tools.Result{}, err
	}
	if len(rec.Saved) > 0 {
		return tools.JSON(Result{PromptID: rec.PromptID, Status: "done", Paths: rec.Saved, Width: rec.Width, Height: rec.Height})
	}
	c, err := t.client(ctx, rec.Service, rec.ClientID)
	if err != nil {
		return tools.Result{}, err
	}
	h, done, err := c.History(ctx, rec.PromptID)
	if err != nil {
		return tools.Result{}, describe(rec.Service, err)
	}
	if done {
		return t.finished(ctx, c, root, &rec, h)
	}
	qs, err := c.QueueState(ctx)
	if err != nil {
		return tools.Result{}, describe(rec.Service, err)
	}
	switch where, pos := qs.Find(rec.PromptID); where {
	case "pending":
		return tools.JSON(Result{PromptID: rec.PromptID, Status: "queued", Position: pos})
	case "running":
		res := Result{PromptID: rec.PromptID, Status: "running"}
		if pct, ok := t.peekProgress(ctx, c, rec.PromptID); ok {
			res.Percent = &pct
		}
		return tools.JSON(res)
	}
	// Between the queue and the history (or removed): ask the history once more.
	if h, done, err = c.History(ctx, rec.PromptID); err == nil && done {
		return t.finished(ctx, c, root, &rec, h)
	}
	return tools.JSON(Result{PromptID: rec.PromptID, Status: "failed", Error: "ComfyUI no longer knows the prompt (deleted from its queue, or the service restarted)"})
}

// finished reports a prompt the history lists: failed with ComfyUI's error,
// or done with its pictures saved.
func (t *toolset) finished(ctx context.Context, c *comfyui.Client, root *os.Root, rec *record, h *comfyui.History) (tools.Result, error) {
	if perr := h.Err(rec.PromptID); perr != nil {
		return tools.JSON(Result{PromptID: rec.PromptID, Status: "failed", Error: perr.Error()})
	}
	res, err := t.collect(ctx, c, root, rec)
	if err != nil {
		return tools.Result{}, describe(rec.Service, err)
	}
	return tools.JSON(res)
}

// peekProgress listens briefly on the prompt's client id for a progress event
// (ComfyUI reports progress only over the WebSocket).
func (t *toolset) peekProgress(ctx context.Context, c *comfyui.Client, promptID string) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ev, err := c.Connect(ctx)
	if err != nil {
		return 0, false
	}
	defer ev.Close()
	pct, got := 0, false
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	_ = ev.Wait(pctx, promptID, func(p comfyui.Progress) { pct, got = p.Percent(), true; stop() })
	return pct, got
}

// describe turns client errors into what the model should read.
func describe(service string, err error) error {
	var fe *comfyui.FencedError
	switch {
	case errors.As(err, &fe):
		return fmt.Errorf("the run's GPU lease on %s is no longer valid, so its fencing proxy refused the request (%s, token %d): %w", service, fe.Refusal.Reason, fe.Refusal.Token, err)
	case errors.Is(err, comfyui.ErrInterrupted):
		return fmt.Errorf("the generation on %s was interrupted (the run was cancelled or an operator stopped it): %w", service, err)
	}
	return err
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// sanitizeName makes a file base name from an agent's filename: no directory,
// only letters, digits, '.', '_' and '-', no extension (the tool adds .png).
func sanitizeName(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if strings.ContainsAny(s, "/\\") || strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("filename %q must be a name, not a path (use save_dir for the directory)", s)
	}
	s = strings.TrimSuffix(s, path.Ext(s))
	s = strings.Trim(unsafeName.ReplaceAllString(s, "_"), "._-")
	if s == "" {
		return "", errors.New("filename has no usable characters (letters, digits, . _ -)")
	}
	if len(s) > 100 {
		s = s[:100]
	}
	return s, nil
}

func writeRecord(root *os.Root, rec record) error {
	if err := root.MkdirAll(recordDir, 0o755); err != nil {
		return fmt.Errorf("comfyui bookkeeping: %w", err)
	}
	b, _ := json.Marshal(rec)
	if err := root.WriteFile(path.Join(recordDir, rec.PromptID+".json"), b, 0o644); err != nil {
		return fmt.Errorf("comfyui bookkeeping: %w", err)
	}
	return nil
}

// confined opens the workspace root is on (root.Name()) for confined reads of
// the agent's files: the os.Root stays for the engine's own writes and records.
func confined(root *os.Root, maxBytes int64) (*confine.Root, error) {
	return confine.OpenRoot(root.Name(), confine.Config{MaxBytes: maxBytes})
}

// saveFile writes data to the agent's path rel through confine: atomically
// (a temporary file renamed over rel, so a crash leaves no half file), and an
// existing rel that is a FIFO or socket is refused instead of blocking the
// open for writing; no symlink leads out.
func saveFile(root *os.Root, rel string, data []byte) error {
	ws, err := confined(root, max(confine.DefaultMaxBytes, int64(len(data))))
	if err != nil {
		return err
	}
	defer ws.Close()
	return ws.WriteFile(rel, data, confine.WriteOptions{Perm: 0o644})
}

func readRecord(root *os.Root, promptID string) (record, error) {
	var rec record
	b, err := root.ReadFile(path.Join(recordDir, promptID+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("prompt %s was not queued by comfyui_generate in this run's workspace", promptID)
	}
	if err != nil {
		return rec, fmt.Errorf("comfyui bookkeeping: %w", err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("comfyui bookkeeping of %s: %w", promptID, err)
	}
	return rec, nil
}
