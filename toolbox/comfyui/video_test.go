package comfyui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

// fakeMP4 marks the bytes the in-process simulator's encoder returns: the
// spec as JSON, which fakeProbe reads back as ffprobe would read a real clip
// (the real H.264 path, ffmpeg and ffprobe in containers, is the fleet e2e's).
const fakeMP4 = "FAKEMP4"

// encoder records the clips the simulator was asked for.
type encoder struct {
	mu    sync.Mutex
	specs []comfysim.VideoSpec
}

func (e *encoder) encode(v comfysim.VideoSpec) ([]byte, error) {
	e.mu.Lock()
	e.specs = append(e.specs, v)
	e.mu.Unlock()
	b, _ := json.Marshal(v)
	return append([]byte(fakeMP4), b...), nil
}

// fakeProbe decodes fakeMP4 bytes; skew shifts the duration it reports.
func fakeProbe(skew time.Duration) func(context.Context, string, string, []byte) (media.VideoInfo, error) {
	return func(_ context.Context, _, _ string, data []byte) (media.VideoInfo, error) {
		raw, ok := bytes.CutPrefix(data, []byte(fakeMP4))
		var v comfysim.VideoSpec
		if !ok || json.Unmarshal(raw, &v) != nil {
			return media.VideoInfo{}, errors.New("ffprobe failed (exit 1): clip.mp4: Invalid data found when processing input")
		}
		d := time.Duration(v.Frames) * time.Second / time.Duration(v.FPS)
		return media.VideoInfo{Format: "mov,mp4,m4a,3gp,3g2,mj2", Codec: "h264", Width: v.Width, Height: v.Height, Frames: v.Frames, FPS: float64(v.FPS), Duration: d + skew}, nil
	}
}

type videoRig struct {
	ws    string
	enc   *encoder
	grant lease.Grant
	m     *lease.Manager
}

// newVideoRig serves an in-process simulator (latents bounded by maxSide) as
// the comfyui-video service and holds a lease on it for run-v.
func newVideoRig(t *testing.T, maxSide int) *videoRig {
	t.Helper()
	enc := &encoder{}
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: time.Millisecond, NodeDelay: time.Millisecond, MaxSide: maxSide, EncodeVideo: enc.encode}, nil))
	t.Cleanup(sim.Close)
	m := leases(t, lease.Service{Name: comfyuitools.DefaultVideoService, URL: sim.URL})
	g, err := m.Acquire(context.Background(), comfyuitools.DefaultVideoService, "run-v")
	require.NoError(t, err)
	ws := t.TempDir()
	var pic bytes.Buffer
	require.NoError(t, png.Encode(&pic, image.NewRGBA(image.Rect(0, 0, 64, 48))))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "images"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "images", "hero.png"), pic.Bytes(), 0o644))
	return &videoRig{ws: ws, enc: enc, grant: g, m: m}
}

// call runs comfyui_video through a router with deps d (Service filled in).
func (r *videoRig) call(t *testing.T, d comfyuitools.Deps, cfg comfyuitools.Config, grants []lease.Grant, args map[string]any) (comfyuitools.VideoResult, error) {
	t.Helper()
	d.Service = r.m.Service
	reg := tools.NewRegistry()
	comfyuitools.Register(reg, d, cfg)
	ctx, caller := context.Background(), &tools.Session{RunID: r.grant.Holder, SessionID: "s-" + r.grant.Holder, Workspace: r.ws, Coordinator: &coord{},
		Access: tools.Access{Groups: []string{"video"}, Tools: []string{"comfyui_video"}}}
	ctx = lease.WithGrants(ctx, grants...)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	res, err := tools.NewRouter(reg).Dispatch(ctx, tools.Call{Session: caller, ID: "call-video", Name: "comfyui_video", Args: raw})
	var out comfyuitools.VideoResult
	if err == nil {
		require.NoError(t, json.Unmarshal([]byte(res.Content), &out), res.Content)
	}
	return out, err
}

// comfyui_video's arguments, in process: what it refuses before any GPU work,
// the frames it asks Wan for, and ComfyUI's and the decode check's failures
// as tool errors.
func TestComfyUIVideoArgs(t *testing.T) {
	t.Parallel()
	r := newVideoRig(t, 1024)
	small := newVideoRig(t, 256) // its simulator refuses the default 832-wide latent
	ok := comfyuitools.Deps{ProbeVideo: fakeProbe(0)}
	tests := []struct {
		name    string
		rig     *videoRig
		deps    comfyuitools.Deps
		noLease bool
		args    map[string]any
		want    comfysim.VideoSpec // what the simulator was asked to encode
		path    string
		mode    string
		wantErr string
	}{
		{name: "text, 2 s at the default 16 fps", args: map[string]any{"description": "a knight rides", "seconds": 2, "filename": "ride"},
			want: comfysim.VideoSpec{Width: 832, Height: 480, Frames: 32, FPS: 16}, path: "videos/ride.mp4", mode: "text-to-video"},
		{name: "image, 1 s at 24 fps into save_dir", args: map[string]any{"image": "images/hero.png", "seconds": 1, "fps": 24, "save_dir": "clips", "filename": "hero"},
			want: comfysim.VideoSpec{Width: 832, Height: 480, Frames: 24, FPS: 24}, path: "clips/hero.mp4", mode: "image-to-video"},
		{name: "5 s at 30 fps", args: map[string]any{"description": "waves", "seconds": 5, "fps": 30, "filename": "waves"},
			want: comfysim.VideoSpec{Width: 832, Height: 480, Frames: 150, FPS: 30}, path: "videos/waves.mp4", mode: "text-to-video"},
		{name: "neither description nor image", args: map[string]any{"seconds": 2}, wantErr: "give description (text-to-video) or image"},
		{name: "a blank description", args: map[string]any{"description": "   ", "seconds": 2}, wantErr: "give description (text-to-video) or image"},
		{name: "both description and image", args: map[string]any{"description": "x", "image": "images/hero.png", "seconds": 2}, wantErr: "not both"},
		{name: "no seconds", args: map[string]any{"description": "x"}, wantErr: "missing required field(s): seconds"},
		{name: "zero seconds", args: map[string]any{"description": "x", "seconds": 0}, wantErr: "seconds must be a whole number in 1..5 (got 0)"},
		{name: "six seconds", args: map[string]any{"description": "x", "seconds": 6}, wantErr: "seconds must be a whole number in 1..5 (got 6)"},
		{name: "fractional seconds", args: map[string]any{"description": "x", "seconds": 1.5}, wantErr: "seconds"},
		{name: "fps too low", args: map[string]any{"description": "x", "seconds": 1, "fps": 7}, wantErr: "fps must be in 8..30 (got 7)"},
		{name: "fps too high", args: map[string]any{"description": "x", "seconds": 1, "fps": 31}, wantErr: "fps must be in 8..30 (got 31)"},
		{name: "negative seed", args: map[string]any{"description": "x", "seconds": 1, "seed": -1}, wantErr: "seed must not be negative"},
		{name: "image outside the workspace", args: map[string]any{"image": "../../etc/passwd", "seconds": 1}, wantErr: "climbs out"},
		{name: "image that is missing", args: map[string]any{"image": "images/nope.png", "seconds": 1}, wantErr: "image: "},
		{name: "save_dir outside the workspace", args: map[string]any{"description": "x", "seconds": 1, "save_dir": "/etc"}, wantErr: "save_dir"},
		{name: "filename with a path", args: map[string]any{"description": "x", "seconds": 1, "filename": "a/b"}, wantErr: "not a path"},
		{name: "no lease on comfyui-video", noLease: true, args: map[string]any{"description": "x", "seconds": 1}, wantErr: "no lease on the GPU service comfyui-video"},
		{name: "no media runner for the check", deps: comfyuitools.Deps{}, args: map[string]any{"description": "x", "seconds": 1}, wantErr: "never on the host"},
		{name: "node_errors", rig: small, args: map[string]any{"description": "x", "seconds": 1}, wantErr: "node errors: node 59 (EmptyHunyuanLatentVideo): Value 480 out of range 16..256: height: 480; node 59 (EmptyHunyuanLatentVideo): Value 832 out of range 16..256: width"},
		{name: "execution_error", args: map[string]any{"description": "boom " + comfysim.FailMarker, "seconds": 1}, wantErr: "in node 57 (KSamplerAdvanced): torch.OutOfMemoryError"},
		{name: "a file that does not decode", deps: comfyuitools.Deps{ProbeVideo: func(context.Context, string, string, []byte) (media.VideoInfo, error) {
			return media.VideoInfo{}, errors.New("ffprobe failed (exit 1): moov atom not found")
		}}, args: map[string]any{"description": "x", "seconds": 1}, wantErr: "does not decode, so it was not saved: ffprobe failed (exit 1): moov atom not found"},
		{name: "a duration 0.2 s short", deps: comfyuitools.Deps{ProbeVideo: fakeProbe(-200 * time.Millisecond)}, args: map[string]any{"description": "x", "seconds": 2},
			wantErr: "lasts 1.800 s (32 frames), not the 2 s asked for (more than 0.1 s off)"},
		{name: "a duration 0.05 s long is within the tolerance", deps: comfyuitools.Deps{ProbeVideo: fakeProbe(50 * time.Millisecond)}, args: map[string]any{"description": "x", "seconds": 2, "filename": "long"},
			want: comfysim.VideoSpec{Width: 832, Height: 480, Frames: 32, FPS: 16}, path: "videos/long.mp4", mode: "text-to-video"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rig := tc.rig
			if rig == nil {
				rig = r
			}
			deps := tc.deps
			if deps.ProbeVideo == nil && !strings.Contains(tc.name, "no media runner") {
				deps = ok
			}
			grants := []lease.Grant{rig.grant}
			if tc.noLease {
				grants = nil
			}
			res, err := rig.call(t, deps, comfyuitools.Config{}, grants, tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.path, res.Path)
			require.Equal(t, tc.mode, res.Mode)
			require.Equal(t, tc.want.Frames, res.Frames)
			require.Equal(t, [2]int{tc.want.Width, tc.want.Height}, [2]int{res.Width, res.Height})
			require.InDelta(t, float64(tc.want.Frames)/float64(tc.want.FPS), res.DurationSeconds, 0.1)
			data, err := os.ReadFile(filepath.Join(rig.ws, res.Path))
			require.NoError(t, err)
			require.Equal(t, res.Bytes, len(data))
			var got comfysim.VideoSpec
			require.NoError(t, json.Unmarshal(bytes.TrimPrefix(data, []byte(fakeMP4)), &got))
			got.Seed = 0
			require.Equal(t, tc.want, got, "the simulator rendered the frames the tool asked Wan for")
		})
	}
}

// A bad comfyui.video_* setting is named by its key.
func TestComfyUIVideoConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  comfyuitools.Config
		want string
	}{
		{name: "defaults", cfg: comfyuitools.Config{}},
		{name: "a width off Wan's 16-pixel grid", cfg: comfyuitools.Config{VideoWidth: 840}, want: "comfyui.video_width 840: want a multiple of 16"},
		{name: "a height over max_side", cfg: comfyuitools.Config{MaxSide: 1024, VideoHeight: 1280}, want: "comfyui.video_height 1280"},
		{name: "a service name with spaces", cfg: comfyuitools.Config{VideoService: "comfy video"}, want: "comfyui.video_service"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.cfg.WithDefaults()
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, comfyuitools.DefaultVideoService, c.VideoService)
				require.Equal(t, [2]int{comfyuitools.DefaultVideoWidth, comfyuitools.DefaultVideoHeight}, [2]int{c.VideoWidth, c.VideoHeight})
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// The run's cleanup interrupts a clip rendering on comfyui-video, and the
// waiting comfyui_video reports the interruption.
func TestComfyUIVideoCancelRun(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: 200 * time.Millisecond, NodeDelay: time.Millisecond, EncodeVideo: (&encoder{}).encode}, nil))
	t.Cleanup(sim.Close)
	m := leases(t, lease.Service{Name: comfyuitools.DefaultVideoService, URL: sim.URL})
	g, err := m.Acquire(context.Background(), comfyuitools.DefaultVideoService, "run-c")
	require.NoError(t, err)
	r := &videoRig{ws: t.TempDir(), enc: &encoder{}, grant: g, m: m}
	done := make(chan error, 1)
	go func() {
		_, err := r.call(t, comfyuitools.Deps{ProbeVideo: fakeProbe(0)}, comfyuitools.Config{}, []lease.Grant{g}, map[string]any{"description": "slow", "seconds": 5})
		done <- err
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(sim.URL + "/queue")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var q struct {
			Running []json.RawMessage `json:"queue_running"`
		}
		return json.NewDecoder(resp.Body).Decode(&q) == nil && len(q.Running) == 1
	}, 10*time.Second, 20*time.Millisecond, "the clip never started")
	require.NoError(t, comfyuitools.Canceler{Leases: m}.CancelRun(context.Background(), "run-c"))
	select {
	case err := <-done:
		require.ErrorContains(t, err, "interrupted")
	case <-time.After(3 * time.Second):
		t.Fatal("comfyui_video still waits after the run's cleanup (20 steps take 4 s)")
	}
}
