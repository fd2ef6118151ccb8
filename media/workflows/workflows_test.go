package workflows_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/media/workflows"
)

// Injection sets exactly the inputs a parameter names and nothing else: the
// rest of the graph is byte-for-byte what the file says.
func TestSetHitsExactlyTheNamedInputs(t *testing.T) {
	t.Parallel()
	hostile := `a "quoted" {prompt} with \ backslash and "6": {"class_type"`
	for _, tc := range []struct {
		name    string
		params  map[string]any
		changed map[string]map[string]any // node → input → value
	}{
		{"sd", map[string]any{"prompt": hostile, "negative": "ugly", "seed": int64(42), "steps": 9, "width": 640, "height": 512, "count": 2},
			map[string]map[string]any{"6": {"text": hostile}, "7": {"text": "ugly"}, "3": {"seed": float64(42), "steps": float64(9)}, "5": {"width": float64(640), "height": float64(512), "batch_size": float64(2)}}},
		{"qwen", map[string]any{"prompt": hostile, "width": 1664, "height": 928, "seed": int64(7)},
			map[string]map[string]any{"6": {"text": hostile}, "58": {"width": float64(1664), "height": float64(928)}, "3": {"seed": float64(7)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := map[string]string{"sd": workflows.SD, "qwen": workflows.Qwen}[tc.name]
			before, err := workflows.Load(name)
			require.NoError(t, err)
			w, err := workflows.Load(name)
			require.NoError(t, err)
			for p, v := range tc.params {
				require.NoError(t, w.Set(p, v))
			}
			got, want := roundTrip(t, w.Prompt()), roundTrip(t, before.Prompt())
			for node, inputs := range tc.changed {
				for in, v := range inputs {
					require.Equal(t, v, got[node]["inputs"].(map[string]any)[in], "%s.%s", node, in)
					want[node]["inputs"].(map[string]any)[in] = v
				}
			}
			require.Equal(t, want, got, "only the named inputs changed")
		})
	}
}

func TestUnknownParameterAndFreshCopies(t *testing.T) {
	t.Parallel()
	w, err := workflows.Load(workflows.SD)
	require.NoError(t, err)
	require.ErrorContains(t, w.Set("ratio", "1:1"), `no parameter "ratio"`)
	require.NoError(t, w.Set("prompt", "changed"))
	again, err := workflows.Load(workflows.SD)
	require.NoError(t, err)
	require.Equal(t, "", again.Nodes["6"].Inputs["text"], "Load returns a fresh copy")
	_, err = workflows.Load("nope")
	require.ErrorContains(t, err, "unknown workflow")
}

func TestReferencesDropUnusedSlots(t *testing.T) {
	t.Parallel()
	w, err := workflows.Load(workflows.QwenEdit)
	require.NoError(t, err)
	require.NoError(t, w.SetReferences([]string{"cat.png"}))
	require.Equal(t, "cat.png", w.Nodes["78"].Inputs["image"])
	require.NotContains(t, w.Nodes, "79")
	require.NotContains(t, w.Nodes, "80")
	enc := w.Nodes["76"].Inputs
	require.Contains(t, enc, "image1")
	require.NotContains(t, enc, "image2")
	require.NotContains(t, enc, "image3")
	require.False(t, w.Has("reference_2"))
	require.Error(t, w.SetReferences([]string{"a", "b", "c", "d"}))
}

func TestEveryShippedWorkflowLoads(t *testing.T) {
	t.Parallel()
	names := workflows.Names()
	require.ElementsMatch(t, []string{workflows.SD, workflows.Qwen, workflows.QwenEdit, workflows.QwenUpscale, workflows.WanT2V, workflows.WanI2V}, names)
	video := map[string]bool{workflows.WanT2V: true, workflows.WanI2V: true}
	for _, n := range names {
		w, err := workflows.Load(n)
		require.NoError(t, err, n)
		want := []string{"prompt", "negative", "seed", "steps", "width", "height", "count", "prefix"}
		switch {
		case n == workflows.QwenUpscale:
			want = []string{"image", "model", "width", "height", "prefix"}
		case video[n]:
			want = []string{"prompt", "negative", "seed", "width", "height", "length", "frames", "fps", "prefix"}
		}
		for _, p := range want {
			require.True(t, w.Has(p), "%s lacks %s", n, p)
		}
	}
	i2v, err := workflows.Load(workflows.WanI2V)
	require.NoError(t, err)
	require.True(t, i2v.Has("image"), "the image-to-video workflow takes its start image")
}

// Wan renders 4n+1 frames; the workflow keeps the requested frames of them.
func TestWanLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ frames, want int }{{16, 17}, {32, 33}, {80, 81}, {8, 9}, {30, 33}, {25, 29}, {150, 153}} {
		require.Equal(t, tc.want, workflows.WanLength(tc.frames), "frames %d", tc.frames)
		require.Equal(t, 1, tc.want%4, "4n+1")
		require.Greater(t, tc.want, tc.frames)
	}
}

// RemoveBackground splices the alpha node between the decoder and SaveImage
// and leaves the rest of the graph alone.
func TestRemoveBackground(t *testing.T) {
	t.Parallel()
	for _, name := range []string{workflows.Qwen, workflows.QwenEdit} {
		w, err := workflows.Load(name)
		require.NoError(t, err)
		before := roundTrip(t, w.Prompt())
		require.NoError(t, w.RemoveBackground())
		got := roundTrip(t, w.Prompt())
		rembg := got["aeth-rembg-1"]
		require.Equal(t, workflows.RemoveBackgroundClass, rembg["class_type"])
		require.Equal(t, []any{"8", float64(0)}, rembg["inputs"].(map[string]any)["image"], "%s: takes the decoded picture", name)
		require.Equal(t, []any{"aeth-rembg-1", float64(0)}, got["60"]["inputs"].(map[string]any)["images"], "%s: SaveImage saves the cut-out", name)
		delete(got, "aeth-rembg-1")
		before["60"]["inputs"].(map[string]any)["images"] = []any{"aeth-rembg-1", float64(0)}
		require.Equal(t, before, got)
		require.ErrorContains(t, w.RemoveBackground(), "already removed")
	}
}

func roundTrip(t *testing.T, v any) map[string]map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out map[string]map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}
