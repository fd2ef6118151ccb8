package comfyui_test

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	"github.com/aetherium-engine/aetherium/media/workflows"
)

func newClient(t *testing.T, step time.Duration) *comfyui.Client {
	t.Helper()
	srv := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: step, NodeDelay: time.Millisecond, MaxSide: 1024}, nil))
	t.Cleanup(srv.Close)
	c, err := comfyui.New(srv.URL, lease.Grant{Service: "comfyui", Token: 7}, "aeth-test-1", comfyui.Config{})
	require.NoError(t, err)
	return c
}

func workflow(t *testing.T, name string, params map[string]any) *workflows.Workflow {
	t.Helper()
	w, err := workflows.Load(name)
	require.NoError(t, err)
	for k, v := range params {
		require.NoError(t, w.Set(k, v))
	}
	return w
}

// The client against the simulator's wire format: queue, events, history, view;
// upload feeding LoadImage; queue listing, delete and interrupt; refusals.
func TestClientAgainstSimulator(t *testing.T) {
	t.Parallel()
	t.Run("generate", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		c := newClient(t, time.Millisecond)
		ev, err := c.Connect(ctx)
		require.NoError(t, err)
		defer ev.Close()
		q, err := c.Queue(ctx, workflow(t, workflows.SD, map[string]any{"prompt": "p", "width": 96, "height": 64, "steps": 4}))
		require.NoError(t, err)
		var got []int
		require.NoError(t, ev.Wait(ctx, q.PromptID, func(p comfyui.Progress) { got = append(got, p.Percent()) }))
		require.Equal(t, []int{25, 50, 75, 100}, got)
		h, ok, err := c.History(ctx, q.PromptID)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, h.Err(q.PromptID))
		ims := h.Images()
		require.Len(t, ims, 1)
		data, err := c.View(ctx, ims[0])
		require.NoError(t, err)
		img, err := png.Decode(bytes.NewReader(data))
		require.NoError(t, err)
		require.Equal(t, image.Pt(96, 64), img.Bounds().Size())
		st, err := c.SystemStats(ctx)
		require.NoError(t, err)
		require.Contains(t, st, "devices")
	})

	t.Run("node errors", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		c := newClient(t, time.Millisecond)
		w := workflow(t, workflows.SD, map[string]any{"prompt": "p", "width": 4096})
		delete(w.Nodes["3"].Inputs, "seed")
		_, err := c.Queue(ctx, w)
		var pe *comfyui.PromptError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "prompt_outputs_failed_validation", pe.Type)
		require.Len(t, pe.Nodes, 2)
		require.Contains(t, pe.Nodes[0], "node 3 (KSampler): Required input is missing: seed")
		require.Contains(t, pe.Nodes[1], "node 5 (EmptyLatentImage)")
		w = workflow(t, workflows.SD, nil)
		w.Nodes["9"] = workflows.Node{ClassType: "NoSuchNode", Inputs: map[string]any{}}
		_, err = c.Queue(ctx, w)
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "invalid_prompt", pe.Type)
	})

	t.Run("reference upload", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		c := newClient(t, time.Millisecond)
		var buf bytes.Buffer
		require.NoError(t, png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 8, 8))))
		name, err := c.Upload(ctx, "ref.png", buf.Bytes())
		require.NoError(t, err)
		w := workflow(t, workflows.QwenEdit, map[string]any{"prompt": "p", "width": 64, "height": 64, "steps": 1})
		require.NoError(t, w.SetReferences([]string{name}))
		_, err = c.Queue(ctx, w)
		require.NoError(t, err)
		w = workflow(t, workflows.QwenEdit, map[string]any{"prompt": "p"})
		require.NoError(t, w.SetReferences([]string{"never-uploaded.png"}))
		_, err = c.Queue(ctx, w)
		require.ErrorContains(t, err, "Invalid image file: never-uploaded.png")
	})

	t.Run("queue delete and interrupt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		c := newClient(t, 50*time.Millisecond)
		ev, err := c.Connect(ctx)
		require.NoError(t, err)
		defer ev.Close()
		first, err := c.Queue(ctx, workflow(t, workflows.SD, map[string]any{"prompt": "a", "steps": 100, "width": 64, "height": 64}))
		require.NoError(t, err)
		second, err := c.Queue(ctx, workflow(t, workflows.SD, map[string]any{"prompt": "b", "width": 64, "height": 64}))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			qs, err := c.QueueState(ctx)
			require.NoError(t, err)
			where, _ := qs.Find(first.PromptID)
			w2, pos := qs.Find(second.PromptID)
			return where == "running" && w2 == "pending" && pos == 1 && qs.Pending[0].ClientID == "aeth-test-1"
		}, 5*time.Second, 10*time.Millisecond)
		require.NoError(t, c.Delete(ctx, second.PromptID))
		require.NoError(t, c.Interrupt(ctx, first.PromptID))
		require.ErrorIs(t, ev.Wait(ctx, first.PromptID, nil), comfyui.ErrInterrupted)
		qs, err := c.QueueState(ctx)
		require.NoError(t, err)
		require.Empty(t, qs.Pending)
		h, ok, err := c.History(ctx, first.PromptID)
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, errors.Is(h.Err(first.PromptID), comfyui.ErrInterrupted))
	})

	t.Run("execution error", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		c := newClient(t, time.Millisecond)
		ev, err := c.Connect(ctx)
		require.NoError(t, err)
		defer ev.Close()
		q, err := c.Queue(ctx, workflow(t, workflows.SD, map[string]any{"prompt": "x " + comfysim.FailMarker, "width": 64, "height": 64}))
		require.NoError(t, err)
		var ee *comfyui.ExecutionError
		require.ErrorAs(t, ev.Wait(ctx, q.PromptID, nil), &ee)
		require.Equal(t, "KSampler", ee.NodeType)
		require.Contains(t, ee.Message, "CUDA out of memory")
	})
}
