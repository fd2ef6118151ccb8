package comfyui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	"github.com/aetherium-engine/aetherium/store"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
)

// writePNG writes a w×h PNG (a gradient, so a scaled copy can be compared).
func writePNG(t *testing.T, p string, w, h int) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 90, 255})
		}
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
}

// writeRecord writes comfyui_generate's bookkeeping of one saved prompt.
func writeRecord(t *testing.T, ws, promptID, service, clientID string, saved ...string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"prompt_id": promptID, "service": service, "client_id": clientID, "save_dir": "images", "saved": saved})
	require.NoError(t, err)
	dir := filepath.Join(ws, ".aetherium", "comfyui")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, promptID+".json"), b, 0o644))
}

type finishRig struct {
	st     *store.Store
	router *tools.Router
	ws     string
	runID  string
}

// finishSetup is finish_image over a rolled-back transaction, a run and a
// workspace holding this run's two qwen pictures (and another run's).
func finishSetup(t *testing.T) *finishRig {
	t.Helper()
	st := store.InTx(testdb.TestTx(t))
	r := &finishRig{st: st, ws: t.TempDir(), runID: uuid.NewString()}
	require.NoError(t, st.CreateRun(context.Background(), store.Run{ID: r.runID, Prompt: "draw", Team: json.RawMessage(`{}`)}))
	reg := tools.NewRegistry()
	comfyuitools.RegisterFinish(reg, st, comfyuitools.Config{})
	r.router = tools.NewRouter(reg)
	writePNG(t, filepath.Join(r.ws, "images", "hero.png"), 64, 36)
	writePNG(t, filepath.Join(r.ws, "images", "villain.png"), 40, 40)
	writePNG(t, filepath.Join(r.ws, "images", "other-run.png"), 40, 40)
	writePNG(t, filepath.Join(r.ws, "images", "big.png"), 2048, 16)
	writePNG(t, filepath.Join(r.ws, "images", "hero-2k.png"), 64, 36)
	require.NoError(t, os.WriteFile(filepath.Join(r.ws, "notes.png"), []byte("not a picture"), 0o644))
	writeRecord(t, r.ws, "p1", "comfyui-qwen", comfyuitools.ClientPrefix(r.runID)+"a", "images/hero.png")
	writeRecord(t, r.ws, "p2", "comfyui-qwen", comfyuitools.ClientPrefix(r.runID)+"b", "images/villain.png")
	writeRecord(t, r.ws, "p3", "comfyui-qwen", comfyuitools.ClientPrefix(uuid.NewString())+"c", "images/other-run.png")
	writeRecord(t, r.ws, "p4", "comfyui", comfyuitools.ClientPrefix(r.runID)+"d", "images/big.png")
	return r
}

func (r *finishRig) call(t *testing.T, model string, args map[string]any) (comfyuitools.FinishResult, error) {
	t.Helper()
	ctx, caller := context.Background(), &tools.Session{RunID: r.runID, SessionID: "s", Workspace: r.ws, ImageModel: model,
		Access: tools.Access{Groups: []string{"comfyui"}, Tools: []string{"finish_image"}}}
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	res, err := r.router.Dispatch(ctx, tools.Call{Session: caller, ID: "c1", Name: "finish_image", Args: raw})
	var out comfyuitools.FinishResult
	if err == nil {
		require.NoError(t, json.Unmarshal([]byte(res.Content), &out), res.Content)
	}
	return out, err
}

// finish_image's arguments: only a qwen team's, only PNGs of the workspace
// below 2K that are not upscales themselves, bounded; by default the
// pictures this run's qwen generations saved (not another run's, not the sd
// service's).
func TestFinishImageArguments(t *testing.T) {
	t.Parallel()
	many := make([]string, comfyuitools.MaxFinishImages+1)
	for i := range many {
		many[i] = "images/hero.png"
	}
	tests := []struct {
		name    string
		model   string
		args    map[string]any
		want    []comfyuitools.FinishQueued
		wantErr string
	}{
		{name: "default: this run's qwen pictures", model: "qwen", want: []comfyuitools.FinishQueued{
			{Path: "images/hero.png", Output: "images/hero-2k.png"}, {Path: "images/villain.png", Output: "images/villain-2k.png"}}},
		{name: "named paths, the sandbox's /workspace view and a duplicate", model: "qwen", args: map[string]any{"paths": []string{"/workspace/images/villain.png", "images/villain.png"}},
			want: []comfyuitools.FinishQueued{{Path: "images/villain.png", Output: "images/villain-2k.png"}}},
		{name: "not a qwen team", model: "sd", wantErr: "needs a team with image_model: qwen (this team's is sd)"},
		{name: "the default image model", model: "", wantErr: "this team's is sd"},
		{name: "outside the workspace", model: "qwen", args: map[string]any{"paths": []string{"../x.png"}}, wantErr: "climbs out"},
		{name: "the engine's directory", model: "qwen", args: map[string]any{"paths": []string{".aetherium/comfyui/p1.json"}}, wantErr: "paths[0]"},
		{name: "missing", model: "qwen", args: map[string]any{"paths": []string{"images/nope.png"}}, wantErr: "does not exist"},
		{name: "not a PNG", model: "qwen", args: map[string]any{"paths": []string{"notes.png"}}, wantErr: "not a PNG"},
		{name: "a directory", model: "qwen", args: map[string]any{"paths": []string{"images"}}, wantErr: "not a regular file"},
		{name: "already an upscale", model: "qwen", args: map[string]any{"paths": []string{"images/hero-2k.png"}}, wantErr: "already an upscale"},
		{name: "already 2K", model: "qwen", args: map[string]any{"paths": []string{"images/big.png"}}, wantErr: "already at least 2048"},
		{name: "too many", model: "qwen", args: map[string]any{"paths": many}, wantErr: "at most 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := finishSetup(t)
			res, err := r.call(t, tc.model, tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				rows, err := r.st.FinishImages(context.Background(), r.runID)
				require.NoError(t, err)
				require.Empty(t, rows, "a refused call records nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Queued)
			require.Equal(t, 2048, res.LongSide)
			require.Equal(t, "postrun.finish_image", res.Event)
		})
	}
}

// The same call twice (a redelivered tool call, a model repeating itself)
// is one request per picture; the second answer says they were queued before.
func TestFinishImageIsIdempotent(t *testing.T) {
	t.Parallel()
	r := finishSetup(t)
	first, err := r.call(t, "qwen", nil)
	require.NoError(t, err)
	require.Len(t, first.Queued, 2)
	again, err := r.call(t, "qwen", map[string]any{"paths": []string{"images/hero.png"}})
	require.NoError(t, err)
	require.Equal(t, []comfyuitools.FinishQueued{{Path: "images/hero.png", Output: "images/hero-2k.png", Already: true}}, again.Queued)
	rows, err := r.st.FinishImages(context.Background(), r.runID)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, row := range rows {
		require.Equal(t, store.FinishPending, row.Status)
	}
	// The run's bound counts every call's pictures.
	added, err := r.st.RequestFinishImages(context.Background(), r.runID, []store.FinishImage{{Path: "a.png", Output: "a-2k.png"}}, 2)
	require.ErrorIs(t, err, store.ErrFinishLimit)
	require.Empty(t, added)
}

// A request after the run ended is refused, and records nothing: run:cleanup may
// already have looked for the run's pictures, so a row stored now would never be
// served (the run row's lock orders the two).
func TestFinishImageAfterTheRunEndedIsRefused(t *testing.T) {
	t.Parallel()
	r := finishSetup(t)
	_, _, err := r.st.FinishRun(context.Background(), r.runID, store.RunCompleted, "done", "", "")
	require.NoError(t, err)
	_, err = r.call(t, "qwen", nil)
	require.ErrorIs(t, err, store.ErrRunEnded)
	require.ErrorContains(t, err, "while the run is in flight")
	rows, err := r.st.FinishImages(context.Background(), r.runID)
	require.NoError(t, err)
	require.Empty(t, rows)
}

func TestFinishSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ w, h, ww, wh int }{
		{1328, 1328, 2048, 2048}, {1664, 928, 2048, 1142}, {928, 1664, 1142, 2048}, {1472, 1140, 2048, 1586}, {64, 36, 2048, 1152}, {0, 5, 2048, 2048},
	} {
		w, h := comfyuitools.FinishSize(tc.w, tc.h)
		require.Equal(t, [2]int{tc.ww, tc.wh}, [2]int{w, h}, "%dx%d", tc.w, tc.h)
	}
}

// Finisher.Upscale against the simulator in process: the original is
// uploaded, the qwen-upscale workflow runs and the upscale lands beside it
// at 2048 on the long side, the original's picture scaled (not a rendered
// latent); a refused workflow is the picture's error (ErrPicture).
func TestFinisherUpscale(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: time.Millisecond, NodeDelay: time.Millisecond}, nil))
	t.Cleanup(sim.Close)
	m := leases(t, lease.Service{Name: "comfyui-qwen", URL: sim.URL})
	ctx := context.Background()
	g, err := m.Acquire(ctx, "comfyui-qwen", "finish:r1")
	require.NoError(t, err)
	ws := t.TempDir()
	writePNG(t, filepath.Join(ws, "images", "wide.png"), 166, 92)
	root, err := os.OpenRoot(ws)
	require.NoError(t, err)
	defer root.Close()

	f := comfyuitools.Finisher{Service: m.Service}
	w, h, err := f.Upscale(ctx, g, root, "r1", "images/wide.png", "images/wide-2k.png")
	require.NoError(t, err)
	require.Equal(t, [2]int{2048, 1135}, [2]int{w, h})
	fh, err := os.Open(filepath.Join(ws, "images", "wide-2k.png"))
	require.NoError(t, err)
	defer fh.Close()
	img, err := png.Decode(fh)
	require.NoError(t, err)
	require.Equal(t, [2]int{2048, 1135}, [2]int{img.Bounds().Dx(), img.Bounds().Dy()})
	// Top-left dark red-less, bottom-right bright: the original's gradient.
	r0, _, _, _ := img.At(0, 0).RGBA()
	r1, g1, _, _ := img.At(2047, 1134).RGBA()
	require.Less(t, r0>>8, uint32(10))
	require.Greater(t, r1>>8, uint32(240))
	require.Greater(t, g1>>8, uint32(240))
	ww, wh, ok := comfyuitools.FinishedUpscale(root, "images/wide.png", "images/wide-2k.png")
	require.True(t, ok)
	require.Equal(t, [2]int{2048, 1135}, [2]int{ww, wh})
	_, err = os.Stat(filepath.Join(ws, "images", ".wide-2k.png.part"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// A picture that is no longer a PNG fails as the picture's fault.
	require.NoError(t, os.WriteFile(filepath.Join(ws, "images", "broken.png"), []byte("x"), 0o644))
	_, _, err = f.Upscale(ctx, g, root, "r1", "images/broken.png", "images/broken-2k.png")
	require.ErrorIs(t, err, comfyuitools.ErrPicture)
	// A stale grant is fenced by nobody here (no proxy), but an unknown
	// service is a configuration error, not the picture's.
	_, _, err = f.Upscale(ctx, lease.Grant{Service: "nope"}, root, "r1", "images/wide.png", "images/x-2k.png")
	require.Error(t, err)
	require.NotErrorIs(t, err, comfyuitools.ErrPicture)
}
