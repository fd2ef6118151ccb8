package finishimage

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// runs is a Store of one run and its finish_images rows that counts reads.
type runs struct {
	Store
	run   store.Run
	imgs  []store.FinishImage
	reads int
}

func (r *runs) GetRun(context.Context, string) (store.Run, error) { r.reads++; return r.run, nil }
func (r *runs) FinishImages(context.Context, string) ([]store.FinishImage, error) {
	return r.imgs, nil
}

// The registry entry keeps the task type and name tasks already in Redis
// and the worker's logs know; Schedule reads no run that asked for no
// picture, and refuses to schedule a run that has not ended. (The work
// itself runs through the worker: worker/postrun_test.go.)
func TestScheduleAndEntry(t *testing.T) {
	t.Parallel()
	w := New(Deps{Store: &runs{}})
	p := w.PostRun()
	require.Equal(t, "finish_image", p.Name)
	require.Equal(t, queue.TypeFinishImage, p.TaskType)
	require.NotNil(t, p.Schedule)
	require.NotNil(t, p.Run)
	require.NotNil(t, p.GaveUp)

	none := &runs{}
	require.NoError(t, New(Deps{Store: none}).Schedule(context.Background(), "r1"))
	require.Zero(t, none.reads)

	running := &runs{run: store.Run{ID: "r1", Status: store.RunRunning}, imgs: []store.FinishImage{{Path: "a.png", Status: store.FinishPending}}}
	err := New(Deps{Store: running}).Schedule(context.Background(), "r1")
	require.ErrorContains(t, err, "not finished")
}
