package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue"
)

// A payload's contract version is its "v" field, 1 without one; a worker
// reads v1 and v2, refuses a newer one so that the task is retried (not
// SkipRetry), and a malformed one as a bad payload (SkipRetry).
func TestContractVersionsAreReadAndRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload string
		v       int
		future  bool // refused with ErrFutureContract, retried
		bad     bool // refused with SkipRetry
	}{
		{payload: `{"run_id":"r1"}`, v: 1},
		{payload: ``, v: 1},
		{payload: `{"enqueued_at":5,"v":2,"route":{"k":"a","p":3},"run_id":"r1"}`, v: 2},
		{payload: `{"run_id":"has \"v\": inside"}`, v: 1},
		{payload: `{"v":3,"run_id":"r1"}`, v: 3, future: true},
		{payload: `{"v":0,"run_id":"r1"}`, bad: true},
		{payload: `{"v":"2","run_id":"r1"}`, bad: true},
		{payload: `{"v":2.5,"run_id":"r1"}`, bad: true},
		{payload: `{"v":2,`, bad: true},
	} {
		task := asynq.NewTask(queue.TypeSupervise, []byte(c.payload))
		v, err := queue.ContractOf(task)
		if c.bad {
			require.Error(t, err, c.payload)
		} else {
			require.NoError(t, err, c.payload)
			require.Equal(t, c.v, v, c.payload)
		}
		err = queue.CheckContract(task)
		_, derr := queue.Decode[queue.SupervisePayload](task)
		mwErr := queue.ContractMiddleware(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).ProcessTask(context.Background(), task)
		switch {
		case c.future:
			for _, e := range []error{err, derr, mwErr} {
				require.ErrorIs(t, e, queue.ErrFutureContract, c.payload)
				require.False(t, errors.Is(e, asynq.SkipRetry), "%s: a newer task is retried, then archived, never dropped", c.payload)
				require.ErrorContains(t, e, "run:supervise payload is contract v3, this worker reads v1 to v2")
			}
		case c.bad:
			require.ErrorIs(t, err, asynq.SkipRetry, c.payload)
			require.ErrorIs(t, mwErr, asynq.SkipRetry, c.payload)
		default:
			require.NoError(t, err, c.payload)
			require.NoError(t, mwErr, c.payload)
		}
	}
	p, err := queue.Decode[queue.SupervisePayload](asynq.NewTask(queue.TypeSupervise, []byte(`{"v":2,"run_id":"r1"}`)))
	require.NoError(t, err)
	require.Equal(t, "r1", p.RunID)
}

// The Enqueuer writes the version the fleet agrees on (Config.Contract),
// clamped to what this build knows: v1 (no field) while a process of the
// previous build lives, v2 once every process reads it.
func TestEnqueuerWritesTheFleetsContract(t *testing.T) {
	t.Parallel()
	client, inspector := testdb.Asynq(t, testdb.Redis(t))
	for _, c := range []struct {
		fleet   func() int
		run     string
		payload string
	}{
		{nil, "r-nil", `{"v":2,"run_id":"r-nil"}`},
		{func() int { return 1 }, "r-1", `{"run_id":"r-1"}`},
		{func() int { return 2 }, "r-2", `{"v":2,"run_id":"r-2"}`},
		{func() int { return 7 }, "r-7", `{"v":2,"run_id":"r-7"}`},
		{func() int { return 0 }, "r-0", `{"run_id":"r-0"}`},
	} {
		q, err := queue.NewEnqueuer(client, queue.Config{Contract: c.fleet})
		require.NoError(t, err)
		require.NoError(t, q.CleanupRun(context.Background(), c.run))
		info, err := inspector.GetTaskInfo(queue.QueueMaintenance, queue.CleanupTaskID(c.run))
		require.NoError(t, err)
		require.Equal(t, c.payload, stampRE.ReplaceAllString(string(info.Payload), "{"), c.run)
	}
}
