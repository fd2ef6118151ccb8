package comfyui_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

// leases is a lease manager on a private Redis for services run in process
// (no Docker, no proxy: URL points at an httptest simulator).
func leases(t *testing.T, svcs ...lease.Service) *lease.Manager {
	t.Helper()
	opt, err := redis.ParseURL(testdb.Redis(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	m, err := lease.New(rdb, lease.Config{Services: svcs}, lease.Options{})
	require.NoError(t, err)
	return m
}

// The Qwen profile, in process (no Docker): a team with image_model qwen renders
// on comfyui-qwen, ratio picks Qwen-Image's size, reference images are uploaded
// and wired into the edit workflow; argument checks refuse what a team cannot use.
func TestQwenModelRatioAndReferences(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: time.Millisecond, NodeDelay: time.Millisecond}, nil))
	t.Cleanup(sim.Close)
	m := leases(t, lease.Service{Name: "comfyui-qwen", URL: sim.URL}, lease.Service{Name: "comfyui", URL: sim.URL})
	ctx := context.Background()
	g, err := m.Acquire(ctx, "comfyui-qwen", "run-q")
	require.NoError(t, err)
	gsd, err := m.Acquire(ctx, "comfyui", "run-sd")
	require.NoError(t, err)

	reg := tools.NewRegistry()
	comfyuitools.Register(reg, comfyuitools.Deps{Service: m.Service}, comfyuitools.Config{MaxSide: 2048})
	r := &rig{t: t, router: tools.NewRouter(reg)}
	ws := t.TempDir()
	var ref bytes.Buffer
	require.NoError(t, png.Encode(&ref, image.NewRGBA(image.Rect(0, 0, 32, 32))))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "refs", "cat.png"), ref.Bytes(), 0o644))
	qctx := func(model string, grants ...lease.Grant) step {
		return step{lease.WithGrants(context.Background(), grants...), &tools.Session{RunID: "run-q", SessionID: "s", Workspace: ws, ImageModel: model, Coordinator: &coord{},
			Access: tools.Access{Groups: []string{"comfyui"}, Tools: []string{"comfyui_generate", "comfyui_status"}}}}
	}

	tests := []struct {
		name    string
		model   string
		grants  []lease.Grant
		args    map[string]any
		want    [2]int
		alpha   bool // the PNG has transparent pixels
		wantErr string
	}{
		{name: "ratio at Qwen-Image's trained size", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "wide", "ratio": "16:9"}, want: [2]int{1664, 928}},
		{name: "reference images", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "like this", "reference_images": []string{"refs/cat.png"}, "width": 512, "height": 512}, want: [2]int{512, 512}},
		{name: "reference outside the workspace", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "x", "reference_images": []string{"../../etc/passwd"}}, wantErr: "climbs out"},
		{name: "transparent cuts the background out", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "a knight", "transparent": true, "width": 256, "height": 192}, want: [2]int{256, 192}, alpha: true},
		{name: "transparent with reference images", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "this cat alone", "transparent": true, "reference_images": []string{"refs/cat.png"}, "width": 128, "height": 128}, want: [2]int{128, 128}, alpha: true},
		{name: "transparent needs qwen", model: "", grants: []lease.Grant{gsd}, args: map[string]any{"prompt": "x", "transparent": true}, wantErr: "transparent and reference_images need a team with image_model: qwen (this team's is sd)"},
		{name: "ratio needs qwen", model: "", grants: []lease.Grant{gsd}, args: map[string]any{"prompt": "x", "ratio": "1:1"}, wantErr: "image_model: qwen"},
		{name: "ratio and size together", model: "qwen", grants: []lease.Grant{g}, args: map[string]any{"prompt": "x", "ratio": "1:1", "width": 512}, wantErr: "not both"},
		{name: "no lease on the model's service", model: "qwen", grants: []lease.Grant{gsd}, args: map[string]any{"prompt": "x"}, wantErr: "no lease on the GPU service comfyui-qwen"},
		{name: "size not a multiple of 8", model: "", grants: []lease.Grant{gsd}, args: map[string]any{"prompt": "x", "width": 100}, wantErr: "multiples of 8"},
		{name: "filename with a path", model: "", grants: []lease.Grant{gsd}, args: map[string]any{"prompt": "x", "filename": "a/b.png"}, wantErr: "not a path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.t = t
			res, err := r.call(qctx(tc.model, tc.grants...), "comfyui_generate", tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, res.Paths, 1)
			w, h := decodePNG(t, filepath.Join(ws, res.Paths[0]))
			require.Equal(t, tc.want, [2]int{w, h})
			require.Equal(t, tc.alpha, hasTransparency(t, filepath.Join(ws, res.Paths[0])), "transparent pixels")
		})
	}
}

// hasTransparency reports whether the PNG at p has a pixel with alpha below 255.
func hasTransparency(t *testing.T, p string) bool {
	t.Helper()
	img := readPNG(t, p)
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if _, _, _, a := img.At(x, y).RGBA(); a < 0xffff {
				return true
			}
		}
	}
	return false
}
