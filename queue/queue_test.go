package queue_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/queue"
)

// The task types, queue names and task id formats are stored in Redis with every
// task (and the ids are the idempotency contract): these literals must never change.
func TestContractIsPinned(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{
		queue.TypeSupervise:      "run:supervise",
		queue.TypeTurn:           "agent:turn",
		queue.TypeApprovalExpire: "approval:expire",
		queue.TypeWebhookDeliver: "webhook:deliver",
		queue.TypeRunCleanup:     "run:cleanup",
		queue.TypeFinishImage:    "run:finish-image",
		queue.TypeReplay:         "run:replay",
		queue.TypePromote:        "run:promote",
		queue.TypeRequeueQueued:  "maintenance:requeue-queued",
		queue.TypeStuckRuns:      "maintenance:stuck-runs",
		queue.TypeAuditPurge:     "maintenance:audit-purge",
		queue.TypeLeaseReap:      "maintenance:lease-reap",
		queue.TypeMailboxReclaim: "maintenance:mailbox-reclaim",
		queue.TypeMailboxTrim:    "maintenance:mailbox-trim",
		queue.TypeGPUStopIdle:    "maintenance:gpu-stop-idle",
		queue.TypeSandboxOrphans: "maintenance:sandbox-orphans",
		queue.TypeWorkspaceSweep: "maintenance:workspace-sweep",
		queue.TypeRetention:      "maintenance:retention",

		queue.QueueSupervisor:  "supervisor",
		queue.QueueWorkers:     "workers",
		queue.QueueMaintenance: "maintenance",

		queue.SuperviseTaskID("r1", "start"):                                                      "supervise:r1:start",
		queue.SuperviseTaskID("r1", "after:del_1"):                                                "supervise:r1:after:del_1",
		queue.SuperviseTaskID("r1", "approval:apr_2"):                                             "supervise:r1:approval:apr_2",
		queue.TurnTaskID("del_1", "start"):                                                        "turn:del_1:start",
		queue.TurnTaskID("del_1", "after:del_3"):                                                  "turn:del_1:after:del_3",
		queue.ApprovalExpireTaskID("apr_2"):                                                       "approval-expire:apr_2",
		queue.WebhookTaskID(3, "sha256:ab12", 42):                                                 "webhook:3:42:sha256:ab12",
		queue.CleanupTaskID("r1"):                                                                 "cleanup:r1",
		queue.FinishImageTaskID("r1"):                                                             "finish-image:r1",
		queue.ReplayTaskID("r1", "sha256:0123"):                                                   "replay:r1:sha256:0123",
		queue.PromoteTaskID("staging-r1", "project-p1", "n1"):                                     "promote:staging-r1:project-p1:n1",
		queue.MaintenanceTaskID(queue.TypeLeaseReap, time.Unix(1_800_000_007, 0), 15*time.Second): "maintenance:lease-reap:1800000000",
	} {
		require.Equal(t, want, got)
	}
	require.Equal(t, []string{"supervisor", "workers", "maintenance"}, queue.Queues())
	require.Equal(t, map[string]int{"supervisor": 6, "workers": 4, "maintenance": 1}, queue.Weights())
	require.Len(t, queue.MaintenanceTasks(), 10)

	// The getters hand out copies: a caller cannot change the fleet's queues.
	queue.Weights()[queue.QueueWorkers] = 100
	queue.MaintenanceTasks()[0] = "x"
	require.Equal(t, 4, queue.Weights()[queue.QueueWorkers])
	require.Equal(t, queue.TypeRequeueQueued, queue.MaintenanceTasks()[0])
}

func TestMaintenanceTaskIDIsPerTick(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	p := 15 * time.Second
	require.Equal(t, queue.MaintenanceTaskID("x", base, p), queue.MaintenanceTaskID("x", base.Add(14*time.Second), p))
	require.NotEqual(t, queue.MaintenanceTaskID("x", base, p), queue.MaintenanceTaskID("x", base.Add(15*time.Second), p))
	require.NotEqual(t, queue.MaintenanceTaskID("x", base, p), queue.MaintenanceTaskID("y", base, p))
}

// Payloads are stored as JSON: their field names are part of the contract.
func TestPayloadsArePinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		task *asynq.Task
		typ  string
		json string
	}{
		{queue.SuperviseTask("r1"), "run:supervise", `{"run_id":"r1"}`},
		{queue.TurnTask("del_1"), "agent:turn", `{"delegation_id":"del_1"}`},
		{queue.ApprovalExpireTask("apr_2"), "approval:expire", `{"approval_id":"apr_2"}`},
		{queue.WebhookTask(3, "sha256:ab12", 42), "webhook:deliver", `{"event_id":42,"hook":3,"hook_digest":"sha256:ab12"}`},
		{queue.CleanupTask("r1"), "run:cleanup", `{"run_id":"r1"}`},
	} {
		require.Equal(t, c.typ, c.task.Type())
		require.Equal(t, c.json, string(c.task.Payload()), c.typ)
	}
	p, err := queue.Decode[queue.WebhookPayload](queue.WebhookTask(3, "sha256:ab12", 42))
	require.NoError(t, err)
	require.Equal(t, queue.WebhookPayload{EventID: 42, Hook: 3, Digest: "sha256:ab12"}, p)
	// A delivery an older build enqueued names its hook by index alone.
	p, err = queue.Decode[queue.WebhookPayload](asynq.NewTask(queue.TypeWebhookDeliver, []byte(`{"v":2,"event_id":42,"hook":3}`)))
	require.NoError(t, err)
	require.Equal(t, queue.WebhookPayload{EventID: 42, Hook: 3}, p)
}

func TestDecodeRefusesBadPayloadWithoutRetry(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", "{", `{"run_id":7}`, "[]"} {
		_, err := queue.Decode[queue.SupervisePayload](asynq.NewTask(queue.TypeSupervise, []byte(raw)))
		require.ErrorIs(t, err, asynq.SkipRetry, "%q", raw)
		require.ErrorContains(t, err, "run:supervise: bad payload", "%q", raw)
	}
}

func TestNewEnqueuerChecksItsInputs(t *testing.T) {
	t.Parallel()
	_, err := queue.NewEnqueuer(nil, queue.Config{})
	require.ErrorContains(t, err, "nil asynq client")
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	_, err = queue.NewEnqueuer(client, queue.Config{MaxRetry: -1})
	require.ErrorContains(t, err, "MaxRetry -1 is negative")
	_, err = queue.NewEnqueuer(client, queue.Config{Retention: -time.Second})
	require.ErrorContains(t, err, "Retention -1s is negative")
	require.Equal(t, queue.Config{MaxRetry: 3, Retention: queue.DefaultRetention}, queue.Config{MaxRetry: 3}.WithDefaults())
	require.Equal(t, time.Hour, queue.Config{Retention: time.Hour}.WithDefaults().Retention)
}

// A failed enqueue says which task failed and keeps the cause.
func TestEnqueueErrorNamesTheTask(t *testing.T) {
	t.Parallel()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1", DialTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	q, err := queue.NewEnqueuer(client, queue.Config{})
	require.NoError(t, err)
	err = q.Supervise(context.Background(), rt, "r1", "start")
	require.ErrorContains(t, err, "enqueue run:supervise supervise:r1:start: ")
	_, err = q.Maintenance(context.Background(), queue.TypeAuditPurge, time.Unix(30, 0), 15*time.Second)
	require.ErrorContains(t, err, "enqueue maintenance:audit-purge maintenance:audit-purge:30: ")
}

// Every task lands on Redis with its pinned id, type, queue, payload and options;
// enqueueing it again is no error and keeps the one task.
func TestEnqueuerOnRedis(t *testing.T) {
	t.Parallel()
	client, inspector := testdb.Asynq(t, testdb.Redis(t))
	q, err := queue.NewEnqueuer(client, queue.Config{MaxRetry: 5})
	require.NoError(t, err)
	ctx := context.Background()
	expiry := time.Now().Add(time.Hour).Truncate(time.Second)
	tick := time.Unix(1_800_000_007, 0)

	for _, c := range []struct {
		enqueue   func() error
		queue, id string
		typ       string
		payload   string
		maxRetry  int
		retention time.Duration
		timeout   time.Duration
		state     asynq.TaskState
	}{
		{func() error { return q.Supervise(ctx, rt, "r1", "start") }, "supervisor", "supervise:r1:start", "run:supervise", `{"v":2,"route":{"k":"alice","p":3},"run_id":"r1"}`, 5, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error { return q.Turn(ctx, rt, "del_1", "start") }, "workers", "turn:del_1:start", "agent:turn", `{"v":2,"route":{"k":"alice","p":3},"delegation_id":"del_1"}`, 5, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error { return q.Resume(ctx, rt, queue.SupervisorSession("r1"), "approval:apr_2") }, "supervisor", "supervise:r1:approval:apr_2", "run:supervise", `{"v":2,"route":{"k":"alice","p":3},"run_id":"r1"}`, 5, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error { return q.Resume(ctx, rt, queue.DelegationSession("del_1"), "after:del_3") }, "workers", "turn:del_1:after:del_3", "agent:turn", `{"v":2,"route":{"k":"alice","p":3},"delegation_id":"del_1"}`, 5, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error { return q.ExpireApproval(ctx, "apr_2", expiry) }, "supervisor", "approval-expire:apr_2", "approval:expire", `{"v":2,"approval_id":"apr_2"}`, 10, 24 * time.Hour, 30 * time.Minute, asynq.TaskStateScheduled},
		{func() error { return q.DeliverWebhook(ctx, 3, "sha256:ab12", 42) }, "maintenance", "webhook:3:42:sha256:ab12", "webhook:deliver", `{"v":2,"event_id":42,"hook":3,"hook_digest":"sha256:ab12"}`, 12, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error { return q.CleanupRun(ctx, "r1") }, "maintenance", "cleanup:r1", "run:cleanup", `{"v":2,"run_id":"r1"}`, 10, 24 * time.Hour, 30 * time.Minute, asynq.TaskStatePending},
		{func() error {
			_, err := q.Maintenance(ctx, queue.TypeLeaseReap, tick, 15*time.Second)
			return err
		}, "maintenance", "maintenance:lease-reap:1800000000", "maintenance:lease-reap", "", 1, time.Minute, time.Minute, asynq.TaskStatePending},
	} {
		require.NoError(t, c.enqueue(), c.id)
		require.NoError(t, c.enqueue(), "%s: a duplicate enqueue is no error", c.id)
		info, err := inspector.GetTaskInfo(c.queue, c.id)
		require.NoError(t, err, c.id)
		require.Equal(t, c.typ, info.Type, c.id)
		payload := string(info.Payload)
		if c.state == asynq.TaskStatePending && c.payload != "" {
			// A task due now carries its enqueue time at the head of its payload.
			at, ok := queue.EnqueuedAt(asynq.NewTask(info.Type, info.Payload))
			require.True(t, ok, "%s: stamped: %s", c.id, payload)
			require.WithinDuration(t, time.Now(), at, time.Minute, c.id)
			payload = stampRE.ReplaceAllString(payload, "{")
		} else {
			_, ok := queue.EnqueuedAt(asynq.NewTask(info.Type, info.Payload))
			require.False(t, ok, "%s: a scheduled task or a tick is not stamped", c.id)
		}
		require.Equal(t, c.payload, payload, c.id)
		require.Equal(t, c.maxRetry, info.MaxRetry, c.id)
		require.Equal(t, c.retention, info.Retention, c.id)
		require.Equal(t, c.timeout, info.Timeout, c.id)
		require.Equal(t, c.state, info.State, c.id)
		if c.state == asynq.TaskStateScheduled {
			require.WithinDuration(t, expiry, info.NextProcessAt, time.Second, c.id)
		}
	}
	for queueName, want := range map[string]int{"supervisor": 3, "workers": 2, "maintenance": 3} {
		info, err := inspector.GetQueueInfo(queueName)
		require.NoError(t, err)
		require.Equal(t, want, info.Size, "%s: duplicates collapsed", queueName)
	}

	// Only the first replica to enqueue a tick enqueues it.
	first, err := q.Maintenance(ctx, queue.TypeAuditPurge, tick, 15*time.Second)
	require.NoError(t, err)
	require.True(t, first)
	again, err := q.Maintenance(ctx, queue.TypeAuditPurge, tick.Add(time.Second), 15*time.Second)
	require.NoError(t, err)
	require.False(t, again, "same tick")

	// A session id that is not one enqueues nothing.
	err = q.Resume(ctx, rt, queue.SessionID{Run: "r1", Delegation: "del_1"}, "k")
	require.ErrorIs(t, err, queue.ErrInvalidSessionID)
	err = q.Resume(ctx, rt, queue.SessionID{Run: "a:b"}, "k")
	require.True(t, errors.Is(err, queue.ErrInvalidSessionID), "%v", err)
	info, err := inspector.GetQueueInfo("supervisor")
	require.NoError(t, err)
	require.Equal(t, 3, info.Size)
}

var stampRE = regexp.MustCompile(`^\{"enqueued_at":[0-9]+,`)

// EnqueuedAt reads only what the Enqueuer wrote: a task built directly, a
// payload whose stamp is not a positive number, or one that is not JSON has
// none; Decode of a stamped payload still gives the task's own fields.
func TestEnqueuedAt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		payload string
		ok      bool
	}{
		{`{"enqueued_at":1800000000000000,"run_id":"r1"}`, true},
		{`{"run_id":"r1"}`, false},
		{`{"enqueued_at":-5,"run_id":"r1"}`, false},
		{`{"enqueued_at":"soon"}`, false},
		{`not json "enqueued_at":`, false},
		{``, false},
	} {
		at, ok := queue.EnqueuedAt(asynq.NewTask(queue.TypeSupervise, []byte(c.payload)))
		require.Equal(t, c.ok, ok, c.payload)
		if ok {
			require.Equal(t, time.UnixMicro(1800000000000000), at)
		}
	}
	_, ok := queue.EnqueuedAt(queue.SuperviseTask("r1"))
	require.False(t, ok, "a task built directly carries no stamp")
	p, err := queue.Decode[queue.SupervisePayload](asynq.NewTask(queue.TypeSupervise, []byte(`{"enqueued_at":1800000000000000,"run_id":"r1"}`)))
	require.NoError(t, err)
	require.Equal(t, "r1", p.RunID)
}

// rt is the route of the tests' runs.
var rt = queue.Route{Key: "alice", Priority: queue.DefaultPriority}
