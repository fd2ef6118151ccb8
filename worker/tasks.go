package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Task types and queues.
const (
	TypeSupervise = "run:supervise"
	TypeTurn      = "agent:turn"

	QueueSupervisor = "supervisor"
	QueueWorkers    = "workers"
)

// Queues weights the two queues for asynq servers: supervisor steps are short and
// unblock whole runs, so they go first.
var Queues = map[string]int{QueueSupervisor: 6, QueueWorkers: 4}

// SupervisePayload resumes (or starts) a run's supervisor.
type SupervisePayload struct {
	RunID string `json:"run_id"`
}

// TurnPayload runs (or resumes) the agent turn of one delegation.
type TurnPayload struct {
	DelegationID string `json:"delegation_id"`
}

// retention keeps finished task ids in Redis so a late duplicate enqueue of the same
// deterministic TaskID is refused instead of running again.
const retention = 24 * time.Hour

// Enqueuer pushes the fleet's tasks with deterministic ids.
type Enqueuer struct {
	Client   *asynq.Client
	MaxRetry int
}

// Supervise enqueues a supervisor step for run; key distinguishes the start from
// each resume (the delegation that finished), so duplicates collapse.
func (e *Enqueuer) Supervise(ctx context.Context, runID, key string) error {
	raw, _ := json.Marshal(SupervisePayload{RunID: runID})
	return e.enqueue(ctx, asynq.NewTask(TypeSupervise, raw), QueueSupervisor, "supervise:"+runID+":"+key)
}

// Turn enqueues an agent turn for a delegation; key as in Supervise.
func (e *Enqueuer) Turn(ctx context.Context, delegationID, key string) error {
	raw, _ := json.Marshal(TurnPayload{DelegationID: delegationID})
	return e.enqueue(ctx, asynq.NewTask(TypeTurn, raw), QueueWorkers, "turn:"+delegationID+":"+key)
}

func (e *Enqueuer) enqueue(ctx context.Context, t *asynq.Task, queue, id string) error {
	_, err := e.Client.EnqueueContext(ctx, t, asynq.Queue(queue), asynq.TaskID(id),
		asynq.MaxRetry(e.MaxRetry), asynq.Retention(retention), asynq.Timeout(30*time.Minute))
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil // already enqueued (or done): at-least-once makes this normal
	}
	if err != nil {
		return fmt.Errorf("enqueue %s %s: %w", t.Type(), id, err)
	}
	return nil
}
