package comfyui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	dockerimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/gpu/gputest"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

var images struct {
	once sync.Once
	tags map[string]string
	err  error
	dc   *client.Client
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, tag := range images.tags {
		_, _ = images.dc.ImageRemove(context.Background(), tag, dockerimage.RemoveOptions{Force: true, PruneChildren: true})
	}
	os.Exit(code)
}

// coord records the progress events a tool emits.
type coord struct {
	mu     sync.Mutex
	events []events.ProgressData
}

func (c *coord) Delegate(context.Context, string, []tools.DelegateRequest) error { return nil }
func (c *coord) Reply(context.Context, string) error                             { return nil }
func (c *coord) Emit(_ context.Context, _, typ string, data any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := data.(events.ProgressData); ok && typ == events.Progress {
		c.events = append(c.events, p)
	}
	return nil
}

func (c *coord) percents() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, e := range c.events {
		out = append(out, e.Percent)
	}
	return out
}

type rig struct {
	t      *testing.T
	leases *lease.Manager
	ctl    *gpu.Controller
	dc     *client.Client
	router *tools.Router
	svc    lease.Service
	simURL string
}

func setup(t *testing.T) *rig {
	t.Helper()
	dc, err := gpu.NewDockerClient()
	if err != nil {
		testinfra.Unavailable(t, "the Docker engine", "docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := dc.Ping(ctx); err != nil {
		testinfra.Unavailable(t, "the Docker engine", "docker engine: %v", err)
	}
	images.once.Do(func() {
		images.dc = dc
		root, err := testinfra.RepoRoot()
		if err != nil {
			images.err = err
			return
		}
		images.tags, images.err = gputest.BuildGoImages(ctx, dc, root, fmt.Sprintf("aetherium-test/comfy-%d", time.Now().UnixNano()), "./cmd/fenceproxy", "./cmd/comfysim")
	})
	require.NoError(t, images.err)
	redisURL := testdb.Redis(t)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	up, err := testinfra.FreePort()
	require.NoError(t, err)
	px, err := testinfra.FreePort()
	require.NoError(t, err)
	name := fmt.Sprintf("aetherium-test-comfy-%d", time.Now().UnixNano())
	svc := lease.Service{
		Name: "comfyui", Capacity: 1, TTL: 30 * time.Second, Image: images.tags["comfysim"], Container: name,
		Env:       []string{"COMFYSIM_STEP_DELAY=40ms", "COMFYSIM_NODE_DELAY=5ms", "COMFYSIM_MAX_SIDE=1024"},
		Ports:     []string{fmt.Sprintf("127.0.0.1:%d:8188", up)},
		HealthURL: fmt.Sprintf("http://127.0.0.1:%d/system_stats", up),
		IdleStop:  time.Second, StartTimeout: time.Minute,
		Fence: &lease.Fence{Image: images.tags["fenceproxy"], Listen: fmt.Sprintf("127.0.0.1:%d", px),
			Upstream: fmt.Sprintf("http://127.0.0.1:%d", up), Redis: redisURL},
	}
	m, err := lease.New(rdb, lease.Config{Services: []lease.Service{svc}, WaiterTTL: 30 * time.Second}, lease.Options{})
	require.NoError(t, err)
	svc, _ = m.Service("comfyui")
	ctl, err := gpu.New(gpu.Config{HealthPoll: 50 * time.Millisecond, StopTimeout: time.Second}, gpu.Deps{Leases: m, Docker: dc})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, c := range []string{svc.Container, svc.Fence.Container} {
			_ = dc.ContainerRemove(ctx, c, containerRemove)
		}
	})
	reg := tools.NewRegistry()
	comfyuitools.Register(reg, comfyuitools.Deps{Service: m.Service}, comfyuitools.Config{})
	return &rig{t: t, leases: m, ctl: ctl, dc: dc, router: tools.NewRouter(reg), svc: svc, simURL: fmt.Sprintf("http://127.0.0.1:%d", up)}
}

// step is the context of a call (the GPU grants its run holds) and the session
// that makes it.
type step struct {
	ctx  context.Context
	sess *tools.Session
}

// session is a step of run holding grants, in workspace ws.
func session(run, ws string, c *coord, grants ...lease.Grant) step {
	return step{lease.WithGrants(context.Background(), grants...), &tools.Session{RunID: run, SessionID: "s-" + run, Agent: "artist", Role: "worker",
		Workspace: ws, Coordinator: c, Access: tools.Access{Groups: []string{"comfyui"}, Tools: []string{"comfyui_generate", "comfyui_status"}}}}
}

func (r *rig) call(s step, name string, args map[string]any) (comfyuitools.Result, error) {
	r.t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(r.t, err)
	res, err := r.router.Dispatch(s.ctx, tools.Call{Session: s.sess, ID: "call-" + name, Name: name, Args: raw})
	var out comfyuitools.Result
	if err == nil {
		require.NoError(r.t, json.Unmarshal([]byte(res.Content), &out), res.Content)
	}
	return out, err
}

func (r *rig) simRequests() []comfysim.Request {
	r.t.Helper()
	resp, err := http.Get(r.simURL + comfysim.RequestsPath)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	var reqs []comfysim.Request
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(&reqs))
	return reqs
}

func decodePNG(t *testing.T, p string) (int, int) {
	t.Helper()
	img := readPNG(t, p)
	return img.Bounds().Dx(), img.Bounds().Dy()
}

// readPNG decodes the PNG at p.
func readPNG(t *testing.T, p string) image.Image {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img
}

func tokenOf(g lease.Grant) string {
	h := http.Header{}
	g.SetHeader(h)
	return h.Get(lease.Header)
}

// One service, started on first use, serves the whole story: waiting and
// polling generations, ComfyUI's two kinds of failure, FIFO hand-over between
// two runs, a stale holder fenced off by the proxy, cancel, and the idle stop.
func TestComfyUIToolsThroughFencedService(t *testing.T) {
	r := setup(t)
	ctx := context.Background()

	st, err := r.ctl.Status(ctx, "comfyui")
	require.NoError(t, err)
	require.False(t, st.Running, "nothing runs before the first lease")
	began := time.Now()
	g1, err := r.ctl.Acquire(ctx, "comfyui", "run-1")
	require.NoError(t, err)
	t.Logf("service + fencing proxy started on first use in %v", time.Since(began))
	st, err = r.ctl.Status(ctx, "comfyui")
	require.NoError(t, err)
	require.True(t, st.Running)

	// run-2 contends for the capacity-1 service: it waits at position 1.
	_, err = r.leases.Acquire(ctx, "comfyui", "run-2")
	var we *lease.WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, 1, we.Position)

	ws1 := t.TempDir()
	c1 := &coord{}
	ctx1 := session("run-1", ws1, c1, g1)

	t.Run("generate waits and saves decodable PNGs at the requested size", func(t *testing.T) {
		began := time.Now()
		res, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "a lighthouse at dusk", "width": 640, "height": 384, "count": 2, "filename": "light house!.png", "seed": 5})
		require.NoError(t, err)
		t.Logf("generate (2 images, 25 steps at 40ms) took %v", time.Since(began))
		require.Equal(t, "done", res.Status)
		require.Equal(t, []string{"images/light_house-1.png", "images/light_house-2.png"}, res.Paths)
		for _, p := range res.Paths {
			w, h := decodePNG(t, filepath.Join(ws1, p))
			require.Equal(t, [2]int{640, 384}, [2]int{w, h})
		}
		pcts := c1.percents()
		require.NotEmpty(t, pcts)
		require.Equal(t, 100, pcts[len(pcts)-1])
	})

	t.Run("hostile save_dir is refused", func(t *testing.T) {
		for _, dir := range []string{"../out", "/etc", ".aetherium/x"} {
			_, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "x", "save_dir": dir})
			require.Error(t, err, dir)
		}
	})

	t.Run("wait false then status", func(t *testing.T) {
		res, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "a fox", "wait": false, "save_dir": "art/foxes", "width": 256, "height": 256})
		require.NoError(t, err)
		require.Equal(t, "queued", res.Status)
		require.NotEmpty(t, res.PromptID)
		var seen []string
		require.Eventually(t, func() bool {
			st, err := r.call(ctx1, "comfyui_status", map[string]any{"prompt_id": res.PromptID})
			require.NoError(t, err)
			seen = append(seen, st.Status)
			return st.Status == "done"
		}, 30*time.Second, 100*time.Millisecond)
		t.Logf("status sequence: %v", seen)
		again, err := r.call(ctx1, "comfyui_status", map[string]any{"prompt_id": res.PromptID})
		require.NoError(t, err)
		require.Len(t, again.Paths, 1)
		require.True(t, strings.HasPrefix(again.Paths[0], "art/foxes/"))
		w, h := decodePNG(t, filepath.Join(ws1, again.Paths[0]))
		require.Equal(t, [2]int{256, 256}, [2]int{w, h})
	})

	t.Run("node_errors and execution_error are clear tool errors", func(t *testing.T) {
		_, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "too big for this GPU", "width": 2048, "height": 1024})
		require.ErrorContains(t, err, "ComfyUI refused the workflow: Prompt outputs failed validation")
		require.ErrorContains(t, err, "node 5 (EmptyLatentImage)")
		_, err = r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "boom " + comfysim.FailMarker})
		require.ErrorContains(t, err, "ComfyUI failed prompt")
		require.ErrorContains(t, err, "CUDA out of memory")
		require.ErrorContains(t, err, "KSampler")
	})

	t.Run("cancel interrupts the running prompt and dequeues the pending one", func(t *testing.T) {
		queued, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "slow", "wait": false, "width": 256, "height": 256, "count": 1})
		require.NoError(t, err)
		_ = queued
		done := make(chan error, 1)
		c := &coord{}
		go func() {
			_, err := r.call(session("run-1", ws1, c, g1), "comfyui_generate", map[string]any{"prompt": "long", "width": 256, "height": 256})
			done <- err
		}()
		// The second prompt starts once the first (25 steps) finished: wait for
		// its progress, then cancel the run.
		require.Eventually(t, func() bool { return len(c.percents()) > 0 }, 20*time.Second, 20*time.Millisecond)
		third, err := r.call(ctx1, "comfyui_generate", map[string]any{"prompt": "never runs", "wait": false})
		require.NoError(t, err)
		began := time.Now()
		require.NoError(t, comfyuitools.Canceler{Leases: r.leases}.CancelRun(ctx, "run-1"))
		select {
		case err := <-done:
			require.ErrorContains(t, err, "interrupted")
			t.Logf("interrupted %v after the cancel", time.Since(began))
		case <-time.After(10 * time.Second):
			t.Fatal("the generation was not interrupted")
		}
		st, err := r.call(ctx1, "comfyui_status", map[string]any{"prompt_id": third.PromptID})
		require.NoError(t, err)
		require.Equal(t, "failed", st.Status, "the pending prompt was removed from the queue")
	})

	// run-1's lease ends; run-2, first in the queue, gets the slot.
	_, err = r.leases.Release(ctx, "comfyui", "run-1", g1.Token)
	require.NoError(t, err)
	g2, err := r.ctl.Acquire(ctx, "comfyui", "run-2")
	require.NoError(t, err)
	require.Greater(t, g2.Token, g1.Token)
	ws2 := t.TempDir()
	_, err = r.call(session("run-2", ws2, &coord{}, g2), "comfyui_generate", map[string]any{"prompt": "second run", "width": 128, "height": 128})
	require.NoError(t, err)

	t.Run("FIFO: every request of run-1 reached the service before run-2's", func(t *testing.T) {
		var order []string
		for _, q := range r.simRequests() {
			if q.Token == "" {
				continue // the controller's health checks go straight to the service
			}
			if len(order) == 0 || order[len(order)-1] != q.Token {
				order = append(order, q.Token)
			}
		}
		require.Equal(t, []string{tokenOf(g1), tokenOf(g2)}, order)
	})

	t.Run("a stale holder is refused by the proxy and never reaches the service", func(t *testing.T) {
		before := len(r.simRequests())
		_, err := r.call(session("run-1", ws1, &coord{}, g1), "comfyui_generate", map[string]any{"prompt": "late"})
		require.ErrorContains(t, err, "fencing proxy refused")
		require.ErrorContains(t, err, "no longer valid")
		after := r.simRequests()
		require.Len(t, after, before, "the simulator saw none of the stale holder's requests")
	})

	// Idle: run-2 releases; the controller stops the service and its proxy.
	_, err = r.leases.Release(ctx, "comfyui", "run-2", g2.Token)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		stopped, err := r.ctl.StopIdle(ctx)
		require.NoError(t, err)
		return len(stopped) == 1
	}, 20*time.Second, 200*time.Millisecond)
	st, err = r.ctl.Status(ctx, "comfyui")
	require.NoError(t, err)
	require.False(t, st.Running)
	fi, err := r.dc.ContainerInspect(ctx, r.svc.Fence.Container)
	require.NoError(t, err)
	require.False(t, fi.State.Running, "the fencing proxy stops with its service")
}

var containerRemove = container.RemoveOptions{Force: true}
