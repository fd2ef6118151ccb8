package comfyui_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/confine/confinetest"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

// hostile runs check once per hostile file an agent can leave in the
// workspace, planted at rel in ws(t) (a fresh workspace per kind); check runs
// under confinetest.Prompt, so a reader that blocks on a FIFO fails the test
// instead of hanging it, and its output must not hold the secret an outside
// symlink leads to.
func hostile(t *testing.T, ws func(t *testing.T) string, rel string, check func(t *testing.T, ws string, k confinetest.Kind) string) {
	t.Helper()
	for _, k := range confinetest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			dir := ws(t)
			confinetest.Plant(t, dir, rel, k)
			out := confinetest.Prompt(t, func() string { return check(t, dir, k) })
			require.NotContains(t, out, confinetest.Secret, "read outside the workspace")
		})
	}
}

func tempWS(t *testing.T) string { return t.TempDir() }

// finish_image's picture check, the post-run upscale's read of the picture and
// its check of an existing upscale refuse every hostile file promptly.
func TestFinishRefusesHostileFiles(t *testing.T) {
	t.Parallel()
	t.Run("finish_image", func(t *testing.T) {
		t.Parallel()
		var rigs sync.Map // workspace → *finishRig
		hostile(t, func(t *testing.T) string {
			r := finishSetup(t)
			rigs.Store(r.ws, r)
			return r.ws
		}, "images/bad.png", func(t *testing.T, ws string, _ confinetest.Kind) string {
			r, ok := rigs.Load(ws)
			require.True(t, ok)
			res, err := r.(*finishRig).call(t, "qwen", map[string]any{"paths": []string{"images/bad.png"}})
			require.Error(t, err)
			return fmt.Sprint(res, err)
		})
	})
	t.Run("Upscale", func(t *testing.T) {
		t.Parallel()
		hostile(t, tempWS, "images/bad.png", func(t *testing.T, ws string, _ confinetest.Kind) string {
			root, err := os.OpenRoot(ws)
			require.NoError(t, err)
			defer root.Close()
			_, _, err = comfyuitools.Finisher{}.Upscale(context.Background(), lease.Grant{}, root, "r1", "images/bad.png", "images/bad-2k.png")
			require.ErrorIs(t, err, comfyuitools.ErrPicture)
			return err.Error()
		})
	})
	t.Run("FinishedUpscale", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"images/bad.png", "images/bad-2k.png"} {
			t.Run(filepath.Base(name), func(t *testing.T) {
				t.Parallel()
				hostile(t, func(t *testing.T) string {
					ws := t.TempDir()
					writePNG(t, filepath.Join(ws, "images", "bad.png"), 40, 20)
					writePNG(t, filepath.Join(ws, "images", "bad-2k.png"), 2048, 1024)
					require.NoError(t, os.Remove(filepath.Join(ws, filepath.FromSlash(name))))
					return ws
				}, name, func(t *testing.T, ws string, _ confinetest.Kind) string {
					root, err := os.OpenRoot(ws)
					require.NoError(t, err)
					defer root.Close()
					_, _, ok := comfyuitools.FinishedUpscale(root, "images/bad.png", "images/bad-2k.png")
					require.False(t, ok)
					return ""
				})
			})
		}
	})
}

// comfyui_generate's reference images are read on the host and uploaded: a
// hostile reference is refused promptly and nothing outside is uploaded.
func TestReferenceImagesRefuseHostileFiles(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: time.Millisecond, NodeDelay: time.Millisecond}, nil))
	t.Cleanup(sim.Close)
	m := leases(t, lease.Service{Name: "comfyui-qwen", URL: sim.URL})
	reg := tools.NewRegistry()
	comfyuitools.Register(reg, comfyuitools.Deps{Service: m.Service}, comfyuitools.Config{MaxSide: 2048})
	router := tools.NewRouter(reg)
	g, err := m.Acquire(context.Background(), "comfyui-qwen", "run-h")
	require.NoError(t, err)
	hostile(t, tempWS, "refs/bad.png", func(t *testing.T, ws string, _ confinetest.Kind) string {
		ctx, caller := context.Background(), &tools.Session{RunID: "run-h", SessionID: "s", Workspace: ws, ImageModel: "qwen", Coordinator: &coord{},
			Access: tools.Access{Groups: []string{"comfyui"}, Tools: []string{"comfyui_generate"}}}
		r := &rig{t: t, router: router}
		res, err := r.call(step{lease.WithGrants(ctx, g), caller}, "comfyui_generate", map[string]any{"prompt": "x", "reference_images": []string{"refs/bad.png"}, "width": 64, "height": 64})
		require.ErrorContains(t, err, "reference_images[0]")
		return fmt.Sprint(res, err)
	})
}
