package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
)

// comfyFleet starts a fleet whose comfyui service is the simulator (step delay
// step) behind the fencing proxy, both images built here; it returns the fleet
// and the simulator's own port (for its request log and history).
func comfyFleet(t *testing.T, step string) (*fleettest.Fleet, int) {
	t.Helper()
	return comfyFleetOn(t, "comfyui", step, nil)
}

// comfyFleetOn is comfyFleet with the simulator as GPU service service, and
// configure (when set) applied to the fleet's config last.
func comfyFleetOn(t *testing.T, service, step string, configure func(*config.Config)) (*fleettest.Fleet, int) {
	t.Helper()
	dc := dockerOrFail(t)
	ctx := context.Background()
	suffix := randomSuffix()
	root, err := testinfra.RepoRoot()
	require.NoError(t, err)
	tags, err := gputest.BuildGoImages(ctx, dc, root, "aetherium-test/fleet-comfy-"+suffix, "./cmd/fenceproxy", "./cmd/comfysim")
	require.NoError(t, err)
	name := "aetherium-e2e-comfy-" + suffix
	t.Cleanup(func() {
		for _, c := range []string{name, name + "-fence"} {
			_ = dc.ContainerRemove(context.Background(), c, container.RemoveOptions{Force: true})
		}
		for _, tag := range tags {
			_, _ = dc.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
	up, px := freeTCPPort(t), freeTCPPort(t)
	f := fleettest.Start(t, fleettest.Options{Configure: func(c *config.Config) {
		c.Streams.Leases = lease.Config{Prefix: "aeth:lease:" + suffix, Services: []lease.Service{{
			Name: service, Capacity: 1, TTL: 20 * time.Second, Image: tags["comfysim"], Container: name,
			Env:   []string{"COMFYSIM_STEP_DELAY=" + step},
			Ports: []string{fmt.Sprintf("127.0.0.1:%d:8188", up)}, HealthURL: fmt.Sprintf("http://127.0.0.1:%d/system_stats", up),
			StartTimeout: 30 * time.Second, IdleStop: 2 * time.Second,
			Fence: &lease.Fence{Image: tags["fenceproxy"], Listen: fmt.Sprintf("127.0.0.1:%d", px),
				Upstream: fmt.Sprintf("http://127.0.0.1:%d", up), Redis: c.RedisURL},
		}}}
		if configure != nil {
			configure(c)
		}
	}})
	return f, up
}

// artistTeam is a team whose artist makes one comfyui_generate call.
func artistTeam(args map[string]any) map[string]any {
	return map[string]any{
		"name":         "studio",
		"model":        map[string]any{"provider": "script"},
		"gpu_services": []string{"comfyui"},
		"image_model":  "sd",
		"supervisor":   map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":      []map[string]any{{"name": "artist", "prompt": "draw", "tools": []string{"comfyui_generate", "comfyui_status"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				call("delegate", map[string]any{"agent": "artist", "task": "draw the hero"}),
				call("reply", map[string]any{"message": "done"}),
			},
			"artist": []map[string]any{call("comfyui_generate", args), {"say": "drawn"}},
		}},
	}
}

// A team with the comfyui service, through the whole fleet on the deterministic
// script model: the run's lease starts the simulator and its fencing proxy (both
// images built here), the artist's comfyui_generate saves a decodable PNG into
// the run's workspace with progress events on the run's stream, every request
// the simulator saw carried the run's token, and the cleanup releases the lease.
func TestComfyUIGenerateThroughFleet(t *testing.T) {
	t.Parallel()
	f, up := comfyFleet(t, "20ms")
	ctx := context.Background()
	id := f.SubmitTeam(artistTeam(map[string]any{"prompt": "a hero in red armour", "width": 320, "height": 192, "filename": "hero"}), "draw")
	evs := f.Follow(id, 0, 120*time.Second)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type, "%v", evs[len(evs)-1])

	var progress []int
	for _, e := range evs {
		if e.Type == "progress" {
			var d struct {
				Percent int `json:"percent"`
			}
			require.NoError(t, json.Unmarshal(e.Data, &d))
			progress = append(progress, d.Percent)
		}
	}
	require.NotEmpty(t, progress, "comfyui_generate reported progress on the run's stream")
	require.Equal(t, 100, progress[len(progress)-1])

	ws, err := f.Workspaces.Open(ctx, id)
	require.NoError(t, err)
	fh, err := os.Open(filepath.Join(ws, "images", "hero.png"))
	require.NoError(t, err)
	defer fh.Close()
	img, err := png.Decode(fh)
	require.NoError(t, err)
	require.Equal(t, [2]int{320, 192}, [2]int{img.Bounds().Dx(), img.Bounds().Dy()})

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", up, comfysim.RequestsPath))
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []comfysim.Request
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	require.NotEmpty(t, reqs)
	for _, q := range reqs {
		if q.Path != "/system_stats" { // the controller's health checks go straight to the service
			require.NotEmpty(t, q.Token, "%s %s reached the service without a token", q.Method, q.Path)
		}
	}
	require.Eventually(t, func() bool {
		st, err := f.Leases.State(ctx, "comfyui")
		return err == nil && len(st.Holders) == 0
	}, 30*time.Second, 100*time.Millisecond, "lease still held after the run ended")
}

// Cancelling a run mid-generation: the run's cleanup interrupts its prompt on
// ComfyUI (through the proxy, with the run's still-live grant) before it
// releases the lease.
func TestComfyUICancelInterruptsThroughFleet(t *testing.T) {
	t.Parallel()
	f, up := comfyFleet(t, "300ms")
	sim := fmt.Sprintf("http://127.0.0.1:%d", up)
	id := f.SubmitTeam(artistTeam(map[string]any{"prompt": "a slow cathedral", "width": 128, "height": 128}), "draw")
	var promptID string
	require.Eventually(t, func() bool {
		var q struct {
			Running [][]json.RawMessage `json:"queue_running"`
		}
		resp, err := http.Get(sim + "/queue")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&q) != nil || len(q.Running) == 0 {
			return false
		}
		return json.Unmarshal(q.Running[0][1], &promptID) == nil
	}, 90*time.Second, 50*time.Millisecond, "the generation never started")
	began := time.Now()
	code, raw := f.Do("POST", "/api/runs/"+id+"/cancel", nil, nil)
	require.Less(t, code, 300, string(raw))
	require.Eventually(t, func() bool {
		resp, err := http.Get(sim + "/history/" + promptID)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h map[string]struct {
			Status struct {
				Messages [][]json.RawMessage `json:"messages"`
			} `json:"status"`
		}
		if json.NewDecoder(resp.Body).Decode(&h) != nil {
			return false
		}
		for _, m := range h[promptID].Status.Messages {
			var typ string
			if json.Unmarshal(m[0], &typ) == nil && typ == "execution_interrupted" {
				return true
			}
		}
		return false
	}, 6*time.Second, 50*time.Millisecond, "the cancelled run's prompt ran on (25 steps take 7.5 s)")
	t.Logf("prompt interrupted %v after the cancel", time.Since(began))
}
