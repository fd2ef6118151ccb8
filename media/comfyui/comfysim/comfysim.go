// Package comfysim is a ComfyUI simulator speaking ComfyUI's real HTTP and
// WebSocket API (the subset the fleet's client uses), for development and
// tests on machines without a GPU. cmd/comfysim serves it as a static binary in
// a FROM-scratch image that the GPU controller starts exactly like a real
// ComfyUI image.
//
// It validates a workflow the way ComfyUI does (unknown class_type →
// invalid_prompt; a missing required input or a dangling link → node_errors),
// queues it, runs it in order on one simulated GPU with realistic latencies,
// streaming status, execution_start, execution_cached, executing, progress,
// executed, execution_success / execution_error / execution_interrupted and the
// final executing with node null to the prompt's client_id, and writes real PNGs
// of the latent's width and height that /view serves (RGBA with a transparent
// border when the workflow removes the background with InspyrenetRembg).
//
// Video workflows (Wan 2.2: EmptyHunyuanLatentVideo or WanImageToVideo,
// KSamplerAdvanced, ImageFromBatch, CreateVideo, SaveVideo) produce a real
// H.264 MP4 of the frames, fps and size the graph asks for. Go cannot encode
// H.264 without cgo, so the simulator runs ffmpeg (Config.EncodeVideo; the
// aetherium/comfysim-video image is the media image, which has ffmpeg, with
// this binary added); without ffmpeg a video prompt fails in SaveVideo with an
// execution_error saying so.
//
// A SaveImage fed by an image chain from a LoadImage (upload, model upscale,
// ImageScale: the upscale workflow) saves the uploaded picture at the size the
// chain gives it (upscale.go).
//
// Planted failures: a CLIPTextEncode text containing FailMarker fails the
// sampler with an execution_error, as a CUDA out-of-memory would.
//
// Every request it receives is recorded with the lease token header it carried
// (RequestsPath), so a test can show a refused request never reached it.
package comfysim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/lease"
)

// FailMarker in a prompt's text plants an execution_error in the sampler.
const FailMarker = "[[comfysim:fail]]"

// RequestsPath lists the requests the simulator received (GET) — a debug
// endpoint real ComfyUI does not have.
const RequestsPath = "/_sim/requests"

// Defaults of Config.
const (
	DefaultStepDelay = 40 * time.Millisecond
	DefaultNodeDelay = 10 * time.Millisecond
	DefaultMaxSide   = 4096
)

// Config tunes the simulator.
type Config struct {
	// StepDelay is the time of one sampler step. Default DefaultStepDelay.
	StepDelay time.Duration `yaml:"step_delay"`
	// NodeDelay is the time of every other node. Default DefaultNodeDelay.
	NodeDelay time.Duration `yaml:"node_delay"`
	// MaxSide bounds the width and height a latent may ask for. Default DefaultMaxSide.
	MaxSide int `yaml:"max_side"`
	// EncodeVideo writes a video workflow's MP4. Default FFmpeg("ffmpeg").
	EncodeVideo func(VideoSpec) ([]byte, error) `yaml:"-"`
}

// VideoSpec is the clip a video workflow asks for.
type VideoSpec struct {
	Width, Height, Frames, FPS int
	Seed                       int64
}

// FFmpeg returns an EncodeVideo that renders ffmpeg's testsrc2 pattern
// (frame numbers and a moving gradient, so frames differ) as H.264 in an MP4
// with the binary at bin, through a temporary file (an MP4's index is written
// after its frames, so it cannot stream to a pipe without fragmenting).
func FFmpeg(bin string) func(VideoSpec) ([]byte, error) {
	return func(v VideoSpec) ([]byte, error) {
		if v.Width < 16 || v.Height < 16 || v.Width%2 != 0 || v.Height%2 != 0 || v.Frames < 1 || v.FPS < 1 {
			return nil, fmt.Errorf("comfysim: cannot encode %d frames of %dx%d at %d fps (even sides of at least 16 px)", v.Frames, v.Width, v.Height, v.FPS)
		}
		dir, err := os.MkdirTemp("", "comfysim-video-")
		if err != nil {
			return nil, fmt.Errorf("comfysim: video temp dir: %w", err)
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "out.mp4")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-nostdin", "-hide_banner", "-loglevel", "error",
			"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=%d", v.Width, v.Height, v.FPS),
			"-frames:v", strconv.Itoa(v.Frames), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
			"-movflags", "+faststart", "-metadata", fmt.Sprintf("comment=comfysim seed %d", v.Seed), out)
		if b, err := cmd.CombinedOutput(); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return nil, fmt.Errorf("comfysim: %s not found: video workflows need ffmpeg (run the aetherium/comfysim-video image)", bin)
			}
			return nil, fmt.Errorf("comfysim: ffmpeg: %v: %s", err, strings.TrimSpace(string(b)))
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return nil, fmt.Errorf("comfysim: read the encoded video: %w", err)
		}
		return b, nil
	}
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	c.StepDelay = defaults.Positive(c.StepDelay, DefaultStepDelay)
	c.NodeDelay = defaults.Positive(c.NodeDelay, DefaultNodeDelay)
	c.MaxSide = defaults.Positive(c.MaxSide, DefaultMaxSide)
	if c.EncodeVideo == nil {
		c.EncodeVideo = FFmpeg("ffmpeg")
	}
	return c
}

// Node is one API-format workflow node.
type Node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

// classes are the node types the simulator knows, with their required inputs
// and whether they are outputs.
var classes = map[string]struct {
	required []string
	output   bool
}{
	"CheckpointLoaderSimple":      {required: []string{"ckpt_name"}},
	"UNETLoader":                  {required: []string{"unet_name", "weight_dtype"}},
	"CLIPLoader":                  {required: []string{"clip_name", "type"}},
	"VAELoader":                   {required: []string{"vae_name"}},
	"ModelSamplingAuraFlow":       {required: []string{"model", "shift"}},
	"CLIPTextEncode":              {required: []string{"text", "clip"}},
	"TextEncodeQwenImageEditPlus": {required: []string{"clip", "prompt"}},
	"EmptyLatentImage":            {required: []string{"width", "height", "batch_size"}},
	"EmptySD3LatentImage":         {required: []string{"width", "height", "batch_size"}},
	"KSampler":                    {required: []string{"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative", "latent_image", "denoise"}},
	"VAEDecode":                   {required: []string{"samples", "vae"}},
	"VAEEncode":                   {required: []string{"pixels", "vae"}},
	"LoadImage":                   {required: []string{"image"}},
	"ImageScale":                  {required: []string{"image", "upscale_method", "width", "height", "crop"}},
	"ImageScaleBy":                {required: []string{"image", "upscale_method", "scale_by"}},
	"UpscaleModelLoader":          {required: []string{"model_name"}},
	"ImageUpscaleWithModel":       {required: []string{"upscale_model", "image"}},
	"SaveImage":                   {required: []string{"images", "filename_prefix"}, output: true},
	"InspyrenetRembg":             {required: []string{"image", "torchscript_jit"}},
	"ModelSamplingSD3":            {required: []string{"model", "shift"}},
	"EmptyHunyuanLatentVideo":     {required: []string{"width", "height", "length", "batch_size"}},
	"WanImageToVideo":             {required: []string{"positive", "negative", "vae", "width", "height", "length", "batch_size"}},
	"KSamplerAdvanced": {required: []string{"model", "add_noise", "noise_seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative",
		"latent_image", "start_at_step", "end_at_step", "return_with_leftover_noise"}},
	"ImageFromBatch": {required: []string{"image", "batch_index", "length"}},
	"CreateVideo":    {required: []string{"images", "fps"}},
	"SaveVideo":      {required: []string{"video", "filename_prefix", "format", "codec"}, output: true},
}

// latentClasses make a latent of the width and height they are given.
func latentClass(c string) bool { return strings.HasPrefix(c, "Empty") || c == "WanImageToVideo" }

type entry struct {
	Number   int             `json:"number"`
	ID       string          `json:"prompt_id"`
	Prompt   map[string]Node `json:"prompt"`
	ClientID string          `json:"client_id"`
}

type history struct {
	Prompt  []any                     `json:"prompt"`
	Outputs map[string]map[string]any `json:"outputs"`
	Status  struct {
		StatusStr string  `json:"status_str"`
		Completed bool    `json:"completed"`
		Messages  [][]any `json:"messages"`
	} `json:"status"`
	Meta map[string]any `json:"meta"`
}

// Request is one recorded request.
type Request struct {
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Query  string    `json:"query,omitempty"`
	Token  string    `json:"token,omitempty"`
	At     time.Time `json:"at"`
}

// Sim is the simulator's http.Handler.
type Sim struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	mu        sync.Mutex
	number    int
	pending   []*entry
	running   *entry
	interrupt bool
	history   map[string]*history
	files     map[string][]byte // "type/subfolder/filename" → bytes
	clients   map[string]map[*websocket.Conn]chan []byte
	requests  []Request
	wake      chan struct{}
}

// New returns a simulator; its executor runs until the process ends.
func New(cfg Config, log *slog.Logger) *Sim {
	if log == nil {
		log = slog.Default()
	}
	s := &Sim{cfg: cfg.WithDefaults(), log: log, history: map[string]*history{}, files: map[string][]byte{},
		clients: map[string]map[*websocket.Conn]chan []byte{}, wake: make(chan struct{}, 1)}
	m := http.NewServeMux()
	m.HandleFunc("POST /prompt", s.postPrompt)
	m.HandleFunc("GET /prompt", s.getPrompt)
	m.HandleFunc("GET /ws", s.ws)
	m.HandleFunc("GET /history", s.getHistory)
	m.HandleFunc("GET /history/{id}", s.getHistory)
	m.HandleFunc("GET /view", s.view)
	m.HandleFunc("POST /upload/image", s.upload)
	m.HandleFunc("GET /queue", s.getQueue)
	m.HandleFunc("POST /queue", s.postQueue)
	m.HandleFunc("POST /interrupt", s.postInterrupt)
	m.HandleFunc("GET /system_stats", s.systemStats)
	m.HandleFunc("GET "+RequestsPath, s.getRequests)
	s.mux = m
	go s.executor()
	return s
}

func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != RequestsPath {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Token: r.Header.Get(lease.Header), At: time.Now().UTC()})
		if len(s.requests) > 10000 {
			s.requests = s.requests[len(s.requests)-10000:]
		}
		s.mu.Unlock()
	}
	s.mux.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Sim) getRequests(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.requests)
}

func newID() string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// validate answers like ComfyUI's validate_prompt: (error, node_errors).
func (s *Sim) validate(p map[string]Node) (map[string]any, map[string]any) {
	nodeErrors := map[string]any{}
	outputs := 0
	ids := make([]string, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := p[id]
		c, ok := classes[n.ClassType]
		if !ok {
			return map[string]any{"type": "invalid_prompt", "message": fmt.Sprintf("Cannot execute because node %s does not exist.", n.ClassType),
				"details": fmt.Sprintf("Node ID '#%s'", id), "extra_info": map[string]any{}}, map[string]any{}
		}
		if c.output {
			outputs++
		}
		var errs []map[string]any
		for _, in := range c.required {
			v, ok := n.Inputs[in]
			if !ok {
				errs = append(errs, map[string]any{"type": "required_input_missing", "message": "Required input is missing", "details": in, "extra_info": map[string]any{"input_name": in}})
				continue
			}
			if link, ok := v.([]any); ok && len(link) == 2 {
				if src, _ := link[0].(string); p[src].ClassType == "" {
					errs = append(errs, map[string]any{"type": "exception_during_inner_validation", "message": "Exception when validating inner node",
						"details": fmt.Sprintf("%s: linked node %v does not exist", in, link[0]), "extra_info": map[string]any{"input_name": in}})
				}
			}
		}
		for _, in := range []string{"width", "height"} {
			if v, ok := n.Inputs[in].(float64); ok && latentClass(n.ClassType) && (v < 16 || int(v) > s.cfg.MaxSide) {
				errs = append(errs, map[string]any{"type": "value_bigger_than_max", "message": fmt.Sprintf("Value %v out of range 16..%d", v, s.cfg.MaxSide),
					"details": fmt.Sprintf("%s: %v", in, v), "extra_info": map[string]any{"input_name": in, "received_value": v}})
			}
		}
		if n.ClassType == "LoadImage" {
			name, _ := n.Inputs["image"].(string)
			s.mu.Lock()
			_, ok := s.files["input//"+name]
			s.mu.Unlock()
			if !ok {
				errs = append(errs, map[string]any{"type": "custom_validation_failed", "message": "Custom validation failed for node",
					"details": "image - Invalid image file: " + name, "extra_info": map[string]any{"input_name": "image"}})
			}
		}
		if len(errs) > 0 {
			nodeErrors[id] = map[string]any{"errors": errs, "dependent_outputs": []string{}, "class_type": n.ClassType}
		}
	}
	if outputs == 0 {
		return map[string]any{"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "", "extra_info": map[string]any{}}, map[string]any{}
	}
	if len(nodeErrors) > 0 {
		return map[string]any{"type": "prompt_outputs_failed_validation", "message": "Prompt outputs failed validation", "details": "", "extra_info": map[string]any{}}, nodeErrors
	}
	return nil, nil
}

func (s *Sim) postPrompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt   map[string]Node `json:"prompt"`
		ClientID string          `json:"client_id"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&body); err != nil || body.Prompt == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"type": "no_prompt", "message": "No prompt provided", "details": "", "extra_info": map[string]any{}}, "node_errors": map[string]any{}})
		return
	}
	if e, ne := s.validate(body.Prompt); e != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": e, "node_errors": ne})
		return
	}
	s.mu.Lock()
	e := &entry{Number: s.number, ID: newID(), Prompt: body.Prompt, ClientID: body.ClientID}
	s.number++
	s.pending = append(s.pending, e)
	q := len(s.pending)
	if s.running != nil {
		q++
	}
	s.mu.Unlock()
	s.broadcastStatus(q)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt_id": e.ID, "number": e.Number, "node_errors": map[string]any{}})
}

func (s *Sim) getPrompt(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"exec_info": map[string]any{"queue_remaining": s.remaining()}})
}

func (s *Sim) remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	if s.running != nil {
		n++
	}
	return n
}

func (s *Sim) ws(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	sid := r.URL.Query().Get("clientId")
	if sid == "" {
		sid = newID()
	}
	out := make(chan []byte, 1024)
	s.mu.Lock()
	if s.clients[sid] == nil {
		s.clients[sid] = map[*websocket.Conn]chan []byte{}
	}
	s.clients[sid][c] = out
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients[sid], c)
		if len(s.clients[sid]) == 0 {
			delete(s.clients, sid)
		}
		s.mu.Unlock()
		_ = c.CloseNow()
	}()
	ctx := c.CloseRead(r.Context())
	first, _ := json.Marshal(map[string]any{"type": "status", "data": map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.remaining()}}, "sid": sid}})
	if c.Write(ctx, websocket.MessageText, first) != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-out:
			if c.Write(ctx, websocket.MessageText, m) != nil {
				return
			}
		}
	}
}

// send delivers a message to client's connections (all clients when empty).
func (s *Sim) send(client, typ string, data map[string]any) {
	b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sid, conns := range s.clients {
		if client != "" && sid != client {
			continue
		}
		for _, ch := range conns {
			select {
			case ch <- b:
			default: // a client that does not read loses messages, as on ComfyUI
			}
		}
	}
}

func (s *Sim) broadcastStatus(q int) {
	s.send("", "status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": q}}})
}

func (s *Sim) executor() {
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			<-s.wake
			continue
		}
		e := s.pending[0]
		s.pending = s.pending[1:]
		s.running, s.interrupt = e, false
		s.mu.Unlock()
		h := s.execute(e)
		s.mu.Lock()
		s.history[e.ID] = h
		s.running = nil
		s.mu.Unlock()
		if h.Status.Completed {
			s.send(e.ClientID, "execution_success", map[string]any{"prompt_id": e.ID})
		}
		s.send(e.ClientID, "executing", map[string]any{"node": nil, "prompt_id": e.ID})
		s.broadcastStatus(s.remaining())
	}
}

// order is the nodes in dependency order (inputs first), ids sorted for ties.
func order(p map[string]Node) []string {
	var out []string
	seen := map[string]bool{}
	var visit func(id string)
	visit = func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		n := p[id]
		keys := make([]string, 0, len(n.Inputs))
		for k := range n.Inputs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if link, ok := n.Inputs[k].([]any); ok && len(link) == 2 {
				if src, ok := link[0].(string); ok {
					if _, ok := p[src]; ok {
						visit(src)
					}
				}
			}
		}
		out = append(out, id)
	}
	ids := make([]string, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		visit(id)
	}
	return out
}

func num(v any, def int) int {
	if f, ok := v.(float64); ok {
		return int(f)
	}
	return def
}

func (s *Sim) interrupted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interrupt
}

func (s *Sim) execute(e *entry) *history {
	h := &history{Prompt: []any{e.Number, e.ID, e.Prompt, map[string]any{"client_id": e.ClientID}, []string{}}, Outputs: map[string]map[string]any{}, Meta: map[string]any{}}
	msg := func(typ string, data map[string]any) {
		data["prompt_id"] = e.ID
		s.send(e.ClientID, typ, data)
		if typ != "progress" && typ != "executing" && typ != "executed" {
			data["timestamp"] = time.Now().UnixMilli()
			h.Status.Messages = append(h.Status.Messages, []any{typ, data})
		}
	}
	msg("execution_start", map[string]any{"timestamp": time.Now().UnixMilli()})
	msg("execution_cached", map[string]any{"nodes": []string{}, "timestamp": time.Now().UnixMilli()})
	width, height, batch, seed := 512, 512, 1, int64(0)
	// A video latent's length is in frames; Wan's VAE decodes 4n+1 of them.
	frames, keep, fps := 1, -1, 16
	failText, alpha := false, false
	for _, n := range e.Prompt {
		if latentClass(n.ClassType) {
			width, height, batch = num(n.Inputs["width"], 512), num(n.Inputs["height"], 512), max(1, num(n.Inputs["batch_size"], 1))
			if l := num(n.Inputs["length"], 0); l > 0 {
				frames = (l-1)/4*4 + 1
			}
		}
		for _, k := range []string{"text", "prompt"} {
			if t, _ := n.Inputs[k].(string); strings.Contains(t, FailMarker) {
				failText = true
			}
		}
		switch n.ClassType {
		case "KSampler":
			seed = int64(num(n.Inputs["seed"], 0))
		case "KSamplerAdvanced":
			if n.Inputs["add_noise"] == "enable" {
				seed = int64(num(n.Inputs["noise_seed"], 0))
			}
		case "ImageFromBatch":
			keep = num(n.Inputs["length"], 1)
		case "CreateVideo":
			fps = max(1, num(n.Inputs["fps"], 16))
		case "InspyrenetRembg":
			alpha = true
		}
	}
	if keep >= 0 {
		frames = min(frames, max(1, keep))
	}
	var executed []string
	for _, id := range order(e.Prompt) {
		n := e.Prompt[id]
		if s.interrupted() {
			msg("execution_interrupted", map[string]any{"node_id": id, "node_type": n.ClassType, "executed": executed})
			h.Status.StatusStr = "error"
			return h
		}
		msg("executing", map[string]any{"node": id, "display_node": id})
		time.Sleep(s.cfg.NodeDelay)
		if n.ClassType == "KSampler" || n.ClassType == "KSamplerAdvanced" {
			if failText {
				msg("execution_error", map[string]any{"node_id": id, "node_type": n.ClassType, "executed": executed,
					"exception_message": "CUDA out of memory. Tried to allocate 2.00 GiB (planted by " + FailMarker + ")",
					"exception_type":    "torch.OutOfMemoryError", "traceback": []string{"  File \"execution.py\", line 323, in execute\n"},
					"current_inputs": map[string]any{}, "current_outputs": map[string]any{}})
				h.Status.StatusStr = "error"
				return h
			}
			steps := max(1, num(n.Inputs["steps"], 20))
			if n.ClassType == "KSamplerAdvanced" {
				steps = max(1, min(steps, num(n.Inputs["end_at_step"], steps))-num(n.Inputs["start_at_step"], 0))
			}
			for i := 1; i <= steps; i++ {
				if s.interrupted() {
					msg("execution_interrupted", map[string]any{"node_id": id, "node_type": n.ClassType, "executed": executed})
					h.Status.StatusStr = "error"
					return h
				}
				time.Sleep(s.cfg.StepDelay)
				msg("progress", map[string]any{"value": i, "max": steps, "node": id})
			}
		}
		if n.ClassType == "ImageUpscaleWithModel" {
			for i := 1; i <= upscaleTiles; i++ {
				time.Sleep(s.cfg.StepDelay)
				msg("progress", map[string]any{"value": i, "max": upscaleTiles, "node": id})
			}
		}
		if n.ClassType == "SaveImage" {
			pic, isPic, err := s.picture(e.Prompt, n.Inputs["images"], 0)
			var saved []byte
			if err == nil && isPic {
				saved, err = s.savePicture(pic)
			}
			if err != nil {
				msg("execution_error", map[string]any{"node_id": id, "node_type": n.ClassType, "executed": executed,
					"exception_message": err.Error(), "exception_type": "RuntimeError", "traceback": []string{},
					"current_inputs": map[string]any{}, "current_outputs": map[string]any{}})
				h.Status.StatusStr = "error"
				return h
			}
			sub, base := splitPrefix(n.Inputs["filename_prefix"])
			var images []map[string]any
			for b := 0; b < batch && (!isPic || b == 0); b++ {
				s.mu.Lock()
				s.number++
				name := fmt.Sprintf("%s_%05d_.png", base, s.number)
				s.mu.Unlock()
				data := saved // an image chain from a LoadImage: batch 1
				if !isPic {
					data = renderPNG(width, height, seed+int64(b), alpha)
				}
				s.mu.Lock()
				s.files["output/"+sub+"/"+name] = data
				s.mu.Unlock()
				images = append(images, map[string]any{"filename": name, "subfolder": sub, "type": "output"})
			}
			out := map[string]any{"images": images}
			h.Outputs[id] = out
			msg("executed", map[string]any{"node": id, "display_node": id, "output": out})
		}
		if n.ClassType == "SaveVideo" {
			data, err := s.cfg.EncodeVideo(VideoSpec{Width: width, Height: height, Frames: frames, FPS: fps, Seed: seed})
			if err != nil {
				msg("execution_error", map[string]any{"node_id": id, "node_type": n.ClassType, "executed": executed,
					"exception_message": err.Error(), "exception_type": "RuntimeError", "traceback": []string{"  File \"comfy_extras/nodes_video.py\", in save_video\n"},
					"current_inputs": map[string]any{}, "current_outputs": map[string]any{}})
				h.Status.StatusStr = "error"
				return h
			}
			sub, base := splitPrefix(n.Inputs["filename_prefix"])
			s.mu.Lock()
			s.number++
			name := fmt.Sprintf("%s_%05d_.mp4", base, s.number)
			s.files["output/"+sub+"/"+name] = data
			s.mu.Unlock()
			// What ComfyUI's SaveVideo reports: the file under "images", flagged animated.
			out := map[string]any{"images": []map[string]any{{"filename": name, "subfolder": sub, "type": "output"}}, "animated": []bool{true}}
			h.Outputs[id] = out
			msg("executed", map[string]any{"node": id, "display_node": id, "output": out})
		}
		executed = append(executed, id)
	}
	// execution_success and the final executing (node null) are sent by the
	// executor once the history is stored, so a client that reads /history on
	// either finds it (real ComfyUI stores it in task_done before the final
	// executing message).
	h.Status.Messages = append(h.Status.Messages, []any{"execution_success", map[string]any{"prompt_id": e.ID, "timestamp": time.Now().UnixMilli()}})
	h.Status.StatusStr, h.Status.Completed = "success", true
	return h
}

// splitPrefix is a save node's filename_prefix as subfolder and base name.
func splitPrefix(v any) (string, string) {
	prefix, _ := v.(string)
	prefix = strings.Trim(strings.ReplaceAll(prefix, "..", ""), "/")
	if prefix == "" {
		prefix = "ComfyUI"
	}
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		return prefix[:i], prefix[i+1:]
	}
	return "", prefix
}

// renderPNG draws a seed-dependent gradient of w×h pixels; with alpha, the
// outer eighth on every side is fully transparent (a removed background).
func renderPNG(w, h int, seed int64, alpha bool) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	c0 := color.NRGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			i := img.PixOffset(x, y)
			img.Pix[i] = c0.R + uint8(x*255/max(1, w))
			img.Pix[i+1] = c0.G + uint8(y*255/max(1, h))
			img.Pix[i+2] = c0.B
			img.Pix[i+3] = 255
			if alpha && (x < w/8 || x >= w-w/8 || y < h/8 || y >= h-h/8) {
				img.Pix[i+3] = 0
			}
		}
	}
	var buf bytes.Buffer
	_ = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
	return buf.Bytes()
}

func (s *Sim) getHistory(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := r.PathValue("id"); id != "" {
		if h, ok := s.history[id]; ok {
			writeJSON(w, http.StatusOK, map[string]any{id: h})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, s.history)
}

func (s *Sim) view(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	typ := q.Get("type")
	if typ == "" {
		typ = "output"
	}
	name, sub := q.Get("filename"), q.Get("subfolder")
	if strings.Contains(name, "/") || strings.Contains(name, "..") || strings.Contains(sub, "..") {
		http.Error(w, "invalid filename", http.StatusForbidden)
		return
	}
	s.mu.Lock()
	data, ok := s.files[typ+"/"+sub+"/"+name]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	ctype := "image/png"
	if strings.HasSuffix(name, ".mp4") {
		ctype = "video/mp4"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", `filename="`+name+`"`)
	_, _ = w.Write(data)
}

func (s *Sim) upload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f, fh, err := r.FormFile("image")
	if err != nil {
		http.Error(w, "no image", http.StatusBadRequest)
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, _, err := image.DecodeConfig(bytes.NewReader(data)); err != nil {
		http.Error(w, "not an image: "+err.Error(), http.StatusBadRequest)
		return
	}
	typ := r.FormValue("type")
	if typ == "" {
		typ = "input"
	}
	sub := strings.Trim(r.FormValue("subfolder"), "/")
	name := fh.Filename
	if strings.ContainsAny(name, "/\\") || strings.Contains(sub, "..") || name == "" {
		http.Error(w, "invalid filename", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	key := typ + "/" + sub + "/" + name
	if _, exists := s.files[key]; exists && r.FormValue("overwrite") != "true" {
		ext := name[strings.LastIndex(name, "."):]
		for i := 1; ; i++ {
			cand := fmt.Sprintf("%s (%d)%s", strings.TrimSuffix(name, ext), i, ext)
			if _, ok := s.files[typ+"/"+sub+"/"+cand]; !ok {
				name, key = cand, typ+"/"+sub+"/"+cand
				break
			}
		}
	}
	s.files[key] = data
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"name": name, "subfolder": sub, "type": typ})
}

func (s *Sim) getQueue(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	row := func(e *entry) []any {
		return []any{e.Number, e.ID, e.Prompt, map[string]any{"client_id": e.ClientID}, []string{}}
	}
	running, pending := []any{}, []any{}
	if s.running != nil {
		running = append(running, row(s.running))
	}
	for _, e := range s.pending {
		pending = append(pending, row(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue_running": running, "queue_pending": pending})
}

func (s *Sim) postQueue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Delete []string `json:"delete"`
		Clear  bool     `json:"clear"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	s.mu.Lock()
	del := map[string]bool{}
	for _, id := range body.Delete {
		del[id] = true
	}
	kept := s.pending[:0]
	for _, e := range s.pending {
		if !body.Clear && !del[e.ID] {
			kept = append(kept, e)
		}
	}
	s.pending = kept
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Sim) postInterrupt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	s.mu.Lock()
	if s.running != nil && (body.PromptID == "" || body.PromptID == s.running.ID) {
		s.interrupt = true
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Sim) systemStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"system": map[string]any{"os": "posix", "ram_total": 68719476736, "ram_free": 60129542144, "comfyui_version": "0.3.60-comfysim",
			"python_version": "3.12.3 (comfysim)", "pytorch_version": "2.8.0+cu128", "embedded_python": false, "argv": []string{"main.py", "--listen"}},
		"devices": []map[string]any{{"name": "cuda:0 Simulated RTX 4090 : cudaMallocAsync", "type": "cuda", "index": 0,
			"vram_total": 25757220864, "vram_free": 24696061952, "torch_vram_total": 0, "torch_vram_free": 0}},
	})
}

// ParseDuration reads an environment duration (empty: 0).
func ParseDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	if ms, err := strconv.Atoi(v); err == nil {
		return time.Duration(ms) * time.Millisecond, nil
	}
	return time.ParseDuration(v)
}
