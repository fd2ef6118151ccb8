package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	dockerimage "github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	"github.com/aetherium-engine/aetherium/sandbox/sandboxtest"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
)

// videoFleet starts a fleet whose comfyui-video service is the simulator in an
// image built here FROM the media image (comfysim runs ffmpeg for video
// workflows, as aetherium/comfysim-video does), behind the fencing proxy, with
// the media image's executor for comfyui_video's ffprobe check (and
// tts_render's espeak-ng). With qwen, comfyui-qwen is the FROM-scratch
// simulator behind a proxy of its own. It returns the fleet, the executor and
// the video simulator's own port.
func videoFleet(t *testing.T, qwen bool) (*fleettest.Fleet, media.Runner, int) {
	t.Helper()
	dc := dockerOrFail(t)
	exec := sandboxtest.Media(t)
	ctx := context.Background()
	suffix := randomSuffix()
	root, err := testinfra.RepoRoot()
	require.NoError(t, err)
	prefix := "aetherium-test/fleet-video-" + suffix
	tags, err := gputest.BuildGoImages(ctx, dc, root, prefix, "./cmd/fenceproxy", "./cmd/comfysim")
	require.NoError(t, err)
	tags["comfysim-video"] = prefix + "-comfysim-video"
	require.NoError(t, gputest.BuildGoImageOn(ctx, dc, root, media.Image(exec), tags["comfysim-video"], "./cmd/comfysim"))
	cfg := fleettest.Config(t)
	var containers []string
	service := func(name, image string) (lease.Service, int) {
		container, up, px := "aetherium-e2e-"+name+"-"+suffix, freeTCPPort(t), freeTCPPort(t)
		containers = append(containers, container, container+"-fence")
		return lease.Service{
			Name: name, Capacity: 1, TTL: 30 * time.Second, Image: image, Container: container,
			Env:   []string{"COMFYSIM_STEP_DELAY=20ms"},
			Ports: []string{fmt.Sprintf("127.0.0.1:%d:8188", up)}, HealthURL: fmt.Sprintf("http://127.0.0.1:%d/system_stats", up),
			StartTimeout: 60 * time.Second, IdleStop: 2 * time.Second,
			Fence: &lease.Fence{Image: tags["fenceproxy"], Listen: fmt.Sprintf("127.0.0.1:%d", px),
				Upstream: fmt.Sprintf("http://127.0.0.1:%d", up), Redis: cfg.RedisURL},
		}, up
	}
	video, up := service(comfyuitools.DefaultVideoService, tags["comfysim-video"])
	cfg.Streams.Leases = lease.Config{Prefix: "aeth:lease:" + suffix, Services: []lease.Service{video}}
	if qwen {
		q, _ := service(comfyuitools.Models["qwen"].Service, tags["comfysim"])
		cfg.Streams.Leases.Services = append(cfg.Streams.Leases.Services, q)
	}
	t.Cleanup(func() {
		for _, c := range containers {
			_ = dc.ContainerRemove(context.Background(), c, container.RemoveOptions{Force: true})
		}
		for _, tag := range tags {
			_, _ = dc.ImageRemove(context.Background(), tag, dockerimage.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	f := fleettest.StartWith(t, cfg, fleettest.Options{Fleet: fleet.Options{Executor: exec}})
	return f, exec, up
}

// comfyui_video through the whole fleet on the deterministic script model: the
// run's lease starts the simulator (its image is the media image plus comfysim)
// and its fencing proxy; the director renders 2 s at 16 fps from a description
// and 1 s from a picture already in the project's workspace; both MP4s are in
// the workspace, ffprobe in a container of the media image finds H.264 at the
// configured size lasting what was asked (within 0.1 s), the tool results say
// the same, every request the simulator saw carried the run's token, and the
// cleanup releases the lease.
func TestComfyUIVideoThroughFleet(t *testing.T) {
	t.Parallel()
	f, exec, up := videoFleet(t, false)
	ctx := context.Background()

	// The start image is in the project's workspace before the run, as a
	// picture from an earlier run would be.
	slug := "film-" + randomSuffix()
	code, raw := f.Do("POST", "/api/projects", map[string]any{"slug": slug, "name": "Film"}, nil)
	require.Equal(t, http.StatusCreated, code, string(raw))
	proj, err := f.Store.GetProject(ctx, slug)
	require.NoError(t, err)
	ws, err := f.Workspaces.Open(ctx, proj.Workspace)
	require.NoError(t, err)
	still := image.NewNRGBA(image.Rect(0, 0, 96, 64))
	for i := range still.Pix {
		still.Pix[i] = uint8(i)
	}
	still.Set(0, 0, color.NRGBA{255, 0, 0, 255})
	var pic bytes.Buffer
	require.NoError(t, png.Encode(&pic, still))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "images"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "images", "still.png"), pic.Bytes(), 0o644))

	team := map[string]any{
		"name":         "film",
		"model":        map[string]any{"provider": "script"},
		"gpu_services": []string{comfyuitools.DefaultVideoService},
		"supervisor":   map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":      []map[string]any{{"name": "director", "prompt": "film it", "mcp_servers": []string{"video"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				call("delegate", map[string]any{"agent": "director", "task": "film the two shots"}),
				call("reply", map[string]any{"message": "filmed"}),
			},
			"director": []map[string]any{
				call("comfyui_video", map[string]any{"description": "a knight rides through the rain", "seconds": 2, "fps": 16, "filename": "ride"}),
				call("comfyui_video", map[string]any{"image": "images/still.png", "seconds": 1, "filename": "still"}),
				{"say": "videos/ride.mp4 and videos/still.mp4"},
			},
		}},
	}
	began := time.Now()
	id := submitIn(t, f, slug, team, "film it")
	evs := f.Follow(id, 0, 4*time.Minute)
	if last := evs[len(evs)-1]; last.Type != "run.completed" {
		t.Fatalf("the run ended with %s %s: %s", last.Type, last.Data, f.GetRun(id).Error)
	}
	t.Logf("run (service start, two clips, their checks) took %v", time.Since(began))

	var results []comfyuitools.VideoResult
	for _, e := range evs {
		var d struct{ Tool, Result, Decision, Error string }
		if e.Type != "tool.call" || json.Unmarshal(e.Data, &d) != nil || d.Tool != "comfyui_video" {
			continue
		}
		require.Equal(t, "allowed", d.Decision, d.Error)
		var r comfyuitools.VideoResult
		require.NoError(t, json.Unmarshal([]byte(d.Result), &r), d.Result)
		results = append(results, r)
	}
	require.Len(t, results, 2, "both comfyui_video calls answered")
	w, h := comfyuitools.DefaultVideoWidth, comfyuitools.DefaultVideoHeight
	for i, want := range []struct {
		path, mode string
		seconds    int
	}{{"videos/ride.mp4", "text-to-video", 2}, {"videos/still.mp4", "image-to-video", 1}} {
		r := results[i]
		require.Equal(t, want.path, r.Path)
		require.Equal(t, want.mode, r.Mode)
		require.Equal(t, [2]int{w, h}, [2]int{r.Width, r.Height}, "the tool reports the resolution")
		require.InDelta(t, float64(want.seconds), r.DurationSeconds, 0.1, "the tool reports the duration")
		require.Equal(t, want.seconds*16, r.Frames)

		data, err := os.ReadFile(filepath.Join(ws, want.path))
		require.NoError(t, err, "the MP4 is in the workspace")
		probed := time.Now()
		info, err := media.ProbeVideo(ctx, exec, "", "check.mp4", data)
		require.NoError(t, err, "ffprobe in the media image decodes %s", want.path)
		t.Logf("ffprobe container for %s: %v", want.path, time.Since(probed))
		require.Equal(t, "h264", info.Codec)
		require.Equal(t, [2]int{w, h}, [2]int{info.Width, info.Height})
		require.InDelta(t, float64(want.seconds), info.Duration.Seconds(), 0.1, "%s lasts %v", want.path, info.Duration)
		require.InDelta(t, 16, info.FPS, 0.01)
		t.Logf("%s: %d bytes, %d frames, %v, %dx%d %s", want.path, len(data), info.Frames, info.Duration, info.Width, info.Height, info.Codec)
	}

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", up, comfysim.RequestsPath))
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []comfysim.Request
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	uploads := 0
	for _, q := range reqs {
		if q.Path != "/system_stats" { // the controller's health checks go straight to the service
			require.NotEmpty(t, q.Token, "%s %s reached the service without a token", q.Method, q.Path)
		}
		if q.Path == "/upload/image" {
			uploads++
		}
	}
	require.Equal(t, 1, uploads, "the start image was uploaded once")
	require.Eventually(t, func() bool {
		st, err := f.Leases.State(ctx, comfyuitools.DefaultVideoService)
		return err == nil && len(st.Holders) == 0
	}, 30*time.Second, 100*time.Millisecond, "lease still held after the run ended")
}

// The shipped media-studio template, unchanged, on the simulators: the qwen
// artist's picture and transparent cut-out, the animator's two clips (one
// from the artist's picture), the narrator's script held to its
// required_output and voiced by espeak-ng in the media image.
func TestMediaStudioTemplateOnSimulators(t *testing.T) {
	t.Parallel()
	f, exec, _ := videoFleet(t, true)
	ctx := context.Background()
	began := time.Now()
	id := f.Submit("media-studio", "make the promo", map[string]any{"topic": "a lighthouse keeper"})
	run := f.WaitTerminal(id, 5*time.Minute)
	require.Equal(t, "completed", run.Status, run.Error)
	t.Logf("media-studio run took %v", time.Since(began))
	ws, err := f.Workspaces.Open(ctx, id)
	require.NoError(t, err)

	for _, p := range []string{"images/hero.png", "images/hero-cutout.png"} {
		fh, err := os.Open(filepath.Join(ws, p))
		require.NoError(t, err)
		img, err := png.Decode(fh)
		fh.Close()
		require.NoError(t, err, p)
		_, _, _, a := img.At(0, 0).RGBA()
		require.Equal(t, p == "images/hero-cutout.png", a < 0xffff, "%s: only the cut-out is transparent", p)
	}
	for p, secs := range map[string]float64{"videos/establishing.mp4": 3, "videos/hero.mp4": 2} {
		data, err := os.ReadFile(filepath.Join(ws, p))
		require.NoError(t, err)
		info, err := media.ProbeVideo(ctx, exec, "", "check.mp4", data)
		require.NoError(t, err, p)
		require.InDelta(t, secs, info.Duration.Seconds(), 0.1, p)
	}
	mp3, err := os.ReadFile(filepath.Join(ws, "audio", "narration.mp3"))
	require.NoError(t, err)
	info, err := media.Probe(ctx, exec, "", "narration.mp3", mp3)
	require.NoError(t, err)
	require.Greater(t, info.Duration.Seconds(), 10.0, "about 60 words of narration")
	requireCleanReplay(t, f, id)
}
