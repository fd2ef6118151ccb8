package worker

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
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/finishimage"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media/comfyui/comfysim"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

type postRunRig struct {
	w         *Worker
	mux       *asynq.ServeMux
	st        *store.Store
	leases    *lease.Manager
	inspector *asynq.Inspector
	simURL    string
}

// postRunSetup is a Worker with finish_image's post-run work registered (the
// post-run hook's durable handling end to end) over a rolled-back
// transaction and a private Redis whose comfyui-qwen is the simulator in
// process (no proxy).
func postRunSetup(t *testing.T) *postRunRig {
	t.Helper()
	st, q, rdb, inspector := infra(t)
	sim := httptest.NewServer(comfysim.New(comfysim.Config{StepDelay: time.Millisecond, NodeDelay: time.Millisecond}, nil))
	t.Cleanup(sim.Close)
	m, err := lease.New(rdb, lease.Config{Services: []lease.Service{{Name: "comfyui-qwen", URL: sim.URL, Capacity: 1}}}, lease.Options{})
	require.NoError(t, err)
	rec := &events.Recorder{Store: st, Redis: rdb}
	work := finishimage.New(finishimage.Deps{Store: st, Queue: q, Events: rec, Finisher: &comfyuitools.Finisher{Service: m.Service}})
	w := New(Config{Workspaces: t.TempDir(), PostRun: []hook.PostRun{work.PostRun()}}, Deps{Store: st, Queue: q, Events: rec,
		Router: tools.NewRouter(tools.NewRegistry()), Leases: m, LeaseRetry: 300 * time.Millisecond})
	return &postRunRig{w: w, mux: w.Mux(), st: st, leases: m, inspector: inspector, simURL: sim.URL}
}

// run stores a run that ended with status, its workspace holding the named
// pictures (w×h each), and finish requests for them (and for gone.png, which
// does not exist).
func (r *postRunRig) run(t *testing.T, status string, pictures ...string) (string, string) {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	require.NoError(t, r.st.CreateRun(ctx, store.Run{ID: id, Prompt: "draw", Team: json.RawMessage(`{}`)}))
	ws, err := r.w.workspaces.Open(ctx, id)
	require.NoError(t, err)
	var reqs []store.FinishImage
	for _, p := range pictures {
		var b bytes.Buffer
		require.NoError(t, png.Encode(&b, image.NewGray(image.Rect(0, 0, 48, 32))))
		require.NoError(t, os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(ws, p), b.Bytes(), 0o644))
		reqs = append(reqs, store.FinishImage{Path: p, Output: comfyuitools.FinishOutput(p)})
	}
	reqs = append(reqs, store.FinishImage{Path: "images/gone.png", Output: "images/gone-2k.png"})
	_, err = r.st.RequestFinishImages(ctx, id, reqs, 0)
	require.NoError(t, err)
	_, _, err = r.st.FinishRun(ctx, id, status, "ok", "", "")
	require.NoError(t, err)
	return id, ws
}

// handleFinishImage delivers a run:finish-image task to the worker's handler.
func (r *postRunRig) handleFinishImage(ctx context.Context, t *asynq.Task) error {
	return r.mux.ProcessTask(ctx, t)
}

// finishGaveUp hands a run:finish-image task out of retries to the worker.
func (r *postRunRig) finishGaveUp(ctx context.Context, t *asynq.Task, attempts int, cause error) {
	p, ok := r.w.postRunOf(t.Type())
	if !ok {
		panic("run:finish-image is not registered")
	}
	r.w.postRunGaveUp(ctx, p, t, attempts, cause)
}

// prompts counts the workflows the simulator was sent.
func (r *postRunRig) prompts(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(r.simURL + comfysim.RequestsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	var reqs []comfysim.Request
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&reqs))
	n := 0
	for _, q := range reqs {
		if q.Method == http.MethodPost && q.Path == "/prompt" {
			n++
		}
	}
	return n
}

type finishEvent struct {
	Status    string              `json:"status"`
	RunStatus string              `json:"run_status"`
	Holder    string              `json:"holder"`
	Done      int                 `json:"done"`
	Failed    int                 `json:"failed"`
	Skipped   int                 `json:"skipped"`
	Files     []store.FinishImage `json:"files"`
}

// finishEvents are the run's postrun.finish_image events.
func (r *postRunRig) finishEvents(t *testing.T, runID string) []finishEvent {
	t.Helper()
	evs, err := r.st.EventsAfter(context.Background(), runID, 0, 100)
	require.NoError(t, err)
	var out []finishEvent
	for _, e := range evs {
		if e.Type == events.PostRunFinishImage {
			var d finishEvent
			require.NoError(t, json.Unmarshal(e.Data, &d))
			out = append(out, d)
		}
	}
	return out
}

// The post-run upscale of a completed run: cleanup's hook enqueues it once;
// it upscales every picture beside its original, settles the missing one as
// failed, releases its lease and records one event. A redelivery sends no
// workflow and records nothing new.
func TestFinishImageRunsOnceAfterTheRun(t *testing.T) {
	t.Parallel()
	r := postRunSetup(t)
	ctx := context.Background()
	id, ws := r.run(t, store.RunCompleted, "images/hero.png", "images/villain.png")

	require.NoError(t, r.w.AfterCleanup(ctx, id))
	require.NoError(t, r.w.AfterCleanup(ctx, id)) // a redelivered cleanup
	info, err := r.inspector.GetTaskInfo(queue.QueueMaintenance, queue.FinishImageTaskID(id))
	require.NoError(t, err)
	require.Equal(t, queue.TypeFinishImage, info.Type)

	task := queue.FinishImageTask(id)
	require.NoError(t, r.handleFinishImage(ctx, task))
	for _, p := range []string{"hero", "villain"} {
		f, err := os.Open(filepath.Join(ws, "images", p+"-2k.png"))
		require.NoError(t, err)
		c, err := png.DecodeConfig(f)
		f.Close()
		require.NoError(t, err)
		require.Equal(t, [2]int{2048, 1365}, [2]int{c.Width, c.Height}, p)
	}
	rows, err := r.st.FinishImages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{store.FinishDone, store.FinishDone, store.FinishFailed}, []string{rows[0].Status, rows[1].Status, rows[2].Status})
	require.Contains(t, rows[2].Error, "images/gone.png")
	st, err := r.leases.State(ctx, comfyuitools.FinishService())
	require.NoError(t, err)
	require.Empty(t, st.Holders, "the post-run lease is released")

	sent := r.prompts(t)
	require.Equal(t, 2, sent)
	require.NoError(t, r.handleFinishImage(ctx, task)) // redelivered
	require.NoError(t, r.w.AfterCleanup(ctx, id))
	require.Equal(t, sent, r.prompts(t), "a redelivery upscales nothing again")
	evs := r.finishEvents(t, id)
	require.Len(t, evs, 1)
	require.Equal(t, "partial", evs[0].Status)
	require.Equal(t, store.RunCompleted, evs[0].RunStatus)
	require.Equal(t, finishimage.FinishHolder(id), evs[0].Holder)
	require.Equal(t, [3]int{2, 1, 0}, [3]int{evs[0].Done, evs[0].Failed, evs[0].Skipped})
	require.Len(t, evs[0].Files, 3)
}

// A delivery that wrote an upscale and crashed before recording it: the next
// one finds the finished file and records it without queueing it again.
func TestFinishImageRecordsAnUpscaleAlreadyOnDisk(t *testing.T) {
	t.Parallel()
	r := postRunSetup(t)
	ctx := context.Background()
	id, ws := r.run(t, store.RunCompleted, "hero.png")
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, image.NewGray(image.Rect(0, 0, 2048, 1365))))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "hero-2k.png"), b.Bytes(), 0o644))
	require.NoError(t, r.handleFinishImage(ctx, queue.FinishImageTask(id)))
	require.Zero(t, r.prompts(t))
	rows, err := r.st.FinishImages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.FinishDone, rows[0].Status)
	require.Equal(t, 2048, rows[0].Width)
}

// A busy qwen service does not hold a worker: the task snoozes (no failure
// counted) and keeps its queue place; it runs once the slot frees up.
func TestFinishImageSnoozesWhileTheServiceIsBusy(t *testing.T) {
	t.Parallel()
	r := postRunSetup(t)
	ctx := context.Background()
	id, _ := r.run(t, store.RunCompleted, "hero.png")
	other, err := r.leases.Acquire(ctx, comfyuitools.FinishService(), "another-run")
	require.NoError(t, err)
	err = r.handleFinishImage(ctx, queue.FinishImageTask(id))
	require.ErrorIs(t, err, ErrLeaseWaiting)
	require.False(t, isFailure(err))
	require.Equal(t, 300*time.Millisecond, retryDelay(0, err, nil))
	rows, err := r.st.FinishImages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.FinishPending, rows[0].Status)
	_, err = r.leases.Release(ctx, other.Service, other.Holder, other.Token)
	require.NoError(t, err)
	require.NoError(t, r.handleFinishImage(ctx, queue.FinishImageTask(id)))
	require.Equal(t, "partial", r.finishEvents(t, id)[0].Status) // hero done, gone.png failed
}

// Runs that did not complete: nothing is upscaled or enqueued, the pictures
// are settled as skipped and the event says so. A task out of retries
// settles what is pending as failed.
func TestFinishImageSkippedAndGivenUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, status string
		gaveUp       bool
		want         string
	}{
		{name: "cancelled", status: store.RunCancelled, want: store.FinishSkipped},
		{name: "failed", status: store.RunFailed, want: store.FinishSkipped},
		{name: "out of retries", status: store.RunCompleted, gaveUp: true, want: store.FinishFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := postRunSetup(t)
			ctx := context.Background()
			id, _ := r.run(t, tc.status, "hero.png")
			if tc.gaveUp {
				r.finishGaveUp(ctx, queue.FinishImageTask(id), 9, errors.New("ComfyUI kept failing"))
			} else {
				require.NoError(t, r.w.AfterCleanup(ctx, id))
				_, err := r.inspector.GetTaskInfo(queue.QueueMaintenance, queue.FinishImageTaskID(id))
				require.True(t, errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound), "%v", err)
			}
			rows, err := r.st.FinishImages(ctx, id)
			require.NoError(t, err)
			for _, row := range rows {
				require.Equal(t, tc.want, row.Status)
			}
			evs := r.finishEvents(t, id)
			require.Len(t, evs, 1)
			require.Equal(t, tc.want, evs[0].Status)
			require.Equal(t, tc.status, evs[0].RunStatus)
			require.Zero(t, r.prompts(t))
		})
	}
}
