package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/cli"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	"github.com/aetherium-engine/aetherium/webhook"
)

// eventsAfter reads a finished run's events past after over the API (the
// SSE stream resumed with Last-Event-ID: it sends what is stored and ends;
// 204 when there is nothing).
func eventsAfter(t *testing.T, f *fleettest.Fleet, runID string, after int64) []fleettest.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.URL+"/api/runs/"+runID+"/events", nil)
	req.Header.Set("Last-Event-ID", fmt.Sprint(after))
	resp, err := f.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []fleettest.Event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e fleettest.Event
			require.NoError(t, json.Unmarshal([]byte(data), &e))
			out = append(out, e)
		}
	}
	return out
}

// finish_image end to end on the simulator: a qwen team's run generates a
// picture (the run's lease starts comfysim and its fencing proxy), asks for
// its 2K finish and completes. Afterwards the run's cleanup releases the
// run's lease and enqueues the post-run task, which takes a lease of its own
// (holder finish:<run>), uploads the original, runs the upscale workflow
// through the proxy and writes images/hero-2k.png (2048 on the long side)
// beside the original; the postrun.finish_image event follows the run's
// terminal event on the API and reaches the webhook.
func TestFinishImageAfterTheRunThroughFleet(t *testing.T) {
	t.Parallel()
	const secret = "a-long-webhook-secret"
	var mu sync.Mutex
	var hooked []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if webhook.Verify(secret, r.Header, body, time.Now(), 0) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e map[string]any
		_ = json.Unmarshal(body, &e)
		mu.Lock()
		hooked = append(hooked, e)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	f, up := comfyFleetOn(t, "comfyui-qwen", "5ms", func(c *config.Config) {
		c.API.Webhooks = []webhook.Hook{{URL: hook.URL, Secret: secret, Events: []string{"run.completed", "postrun.finish_image"}}}
	})
	ctx := context.Background()
	team := map[string]any{
		"name":         "qwen-studio",
		"model":        map[string]any{"provider": "script"},
		"gpu_services": []string{"comfyui-qwen"},
		"image_model":  "qwen",
		"supervisor":   map[string]any{"name": "boss", "prompt": "coordinate", "mcp_servers": []string{"orchestration"}},
		"workers":      []map[string]any{{"name": "artist", "prompt": "draw", "tools": []string{"comfyui_generate", "finish_image"}}},
		"script": map[string]any{"agents": map[string]any{
			"boss": []map[string]any{
				call("delegate", map[string]any{"agent": "artist", "task": "draw the hero, then queue its 2K finish"}),
				call("reply", map[string]any{"message": "done"}),
			},
			"artist": []map[string]any{
				call("comfyui_generate", map[string]any{"prompt": "a hero in red armour", "width": 320, "height": 192, "filename": "hero"}),
				call("finish_image", map[string]any{}),
				{"say": "drawn and queued for finishing"},
			},
		}},
	}
	began := time.Now()
	id := f.SubmitTeam(team, "draw")
	evs := f.Follow(id, 0, 180*time.Second)
	terminal := evs[len(evs)-1]
	require.Equal(t, "run.completed", terminal.Type, "%v", terminal)
	ran := time.Since(began)
	for _, e := range evs {
		if e.Type == "tool.call" {
			var d struct {
				Tool, Decision, Error string
			}
			require.NoError(t, json.Unmarshal(e.Data, &d))
			require.Empty(t, d.Error, "%s failed: %s", d.Tool, d.Error)
		}
	}

	var post []fleettest.Event
	require.Eventually(t, func() bool {
		post = eventsAfter(t, f, id, terminal.ID)
		return len(post) > 0
	}, 120*time.Second, 200*time.Millisecond, "no post-run event after the run completed")
	after := time.Since(began) - ran
	require.Len(t, post, 1)
	require.Equal(t, "postrun.finish_image", post[0].Type)
	require.Greater(t, post[0].ID, terminal.ID, "the post-run event follows the terminal one")
	var d struct {
		Status    string                                         `json:"status"`
		RunStatus string                                         `json:"run_status"`
		Holder    string                                         `json:"holder"`
		Files     []struct{ Path, Output, Status, Error string } `json:"files"`
	}
	require.NoError(t, json.Unmarshal(post[0].Data, &d))
	require.Equal(t, "done", d.Status, "%s", post[0].Data)
	require.Equal(t, "completed", d.RunStatus)
	require.Equal(t, "finish:"+id, d.Holder)
	require.Len(t, d.Files, 1)
	require.Equal(t, "images/hero.png", d.Files[0].Path)
	require.Equal(t, "images/hero-2k.png", d.Files[0].Output)

	ws, err := f.Workspaces.Open(ctx, id)
	require.NoError(t, err)
	for name, want := range map[string][2]int{"hero.png": {320, 192}, "hero-2k.png": {2048, 1229}} {
		fh, err := os.Open(filepath.Join(ws, "images", name))
		require.NoError(t, err)
		img, err := png.Decode(fh)
		fh.Close()
		require.NoError(t, err, name)
		require.Equal(t, want, [2]int{img.Bounds().Dx(), img.Bounds().Dy()}, name)
	}

	// The upscale went through the fencing proxy with a token, after the
	// run's own generation.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", up, comfysim.RequestsPath))
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []comfysim.Request
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	tokens := map[string]bool{}
	uploads := 0
	for _, q := range reqs {
		if q.Path == "/upload/image" {
			uploads++
		}
		if q.Path == "/prompt" && q.Method == http.MethodPost {
			require.NotEmpty(t, q.Token)
			tokens[q.Token] = true
		}
	}
	require.Equal(t, 1, uploads)
	require.Len(t, tokens, 2, "the generation and the upscale ran on two different grants (the run's, the post-run task's)")

	require.Eventually(t, func() bool {
		st, err := f.Leases.State(ctx, "comfyui-qwen")
		return err == nil && len(st.Holders) == 0
	}, 30*time.Second, 100*time.Millisecond, "a lease still held after the post-run task")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range hooked {
			if e["type"] == "postrun.finish_image" && e["run_id"] == id {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the webhook never got the post-run event")

	// The CLI's events view shows the post-run event after the run's end.
	var out, errb bytes.Buffer
	require.Zero(t, cli.Main([]string{"events", "--api", f.URL, id}, &out, &errb), errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Contains(t, lines[len(lines)-2], "run.completed")
	require.Contains(t, lines[len(lines)-1], "postrun.finish_image")
	require.Contains(t, lines[len(lines)-1], "done: 1 done, 0 failed, 0 skipped → images/hero-2k.png")
	t.Logf("run %v; post-run event %v after the run's end", ran.Round(time.Millisecond), after.Round(time.Millisecond))
}
