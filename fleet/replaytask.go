package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
)

// Replays and forks in a split deployment (docs/replay.md, "Split
// deployments"): an API process without the worker's engine hands them to a
// worker as a run:replay task under a deterministic id, the worker writes its
// answer as the task's result, and the API process collects it from the task.
// The same request finds the same task (pending or done, kept replay.keep), so
// a client that gave up waiting asks again and gets the answer.

// forkPayload is a fork as a run:replay task carries it.
type forkPayload struct {
	By      submit.Principal `json:"by"`
	Request api.ForkRequest  `json:"request"`
}

// replayOutcome is a run:replay task's result: a report, a started fork, or
// the refusal the caller answers with.
type replayOutcome struct {
	Report *replay.Report     `json:"report,omitempty"`
	Fork   *replay.ForkResult `json:"fork,omitempty"`
	Error  *remoteError       `json:"error,omitempty"`
}

// remoteError is a refusal carried from the worker to the API process: its
// kind (one of replayKinds, or "submit" with the submit refusal's kind),
// words, field and wait.
type remoteError struct {
	Kind       string        `json:"kind"`
	SubmitKind string        `json:"submit_kind,omitempty"`
	Message    string        `json:"message"`
	Field      string        `json:"field,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

// replayKinds are the refusals the API answers by kind (api/replay.go,
// api/fork.go); the names are stored in task results: never change one.
var replayKinds = []struct {
	name string
	err  error
}{
	{"not_found", store.ErrNotFound}, {"not_finished", replay.ErrNotFinished}, {"corrupt", replay.ErrCorruptRecord},
	{"too_large", replay.ErrTooLarge}, {"bad_fork_point", replay.ErrBadForkPoint}, {"fork_diverged", replay.ErrForkDiverged},
}

// submitKinds are package submit's refusal kinds, by stored name.
var submitKinds = []struct {
	name string
	err  error
}{
	{"invalid", submit.ErrInvalid}, {"forbidden", submit.ErrForbidden}, {"not_found", submit.ErrNotFound},
	{"unprocessable", submit.ErrUnprocessable}, {"busy", submit.ErrBusy}, {"disk_full", submit.ErrDiskFull},
	{"idempotency_mismatch", submit.ErrIdempotencyMismatch},
}

// remoteErrorOf is err as a task result carries it; nil for an error that is
// none of the known refusals.
func remoteErrorOf(err error) *remoteError {
	var se *submit.Error
	if errors.As(err, &se) {
		for _, k := range submitKinds {
			if errors.Is(se.Kind, k.err) {
				return &remoteError{Kind: "submit", SubmitKind: k.name, Message: se.Message, Field: se.Field, RetryAfter: se.RetryAfter}
			}
		}
		return &remoteError{Kind: "submit", SubmitKind: "invalid", Message: se.Message, Field: se.Field}
	}
	for _, k := range replayKinds {
		if errors.Is(err, k.err) {
			return &remoteError{Kind: k.name, Message: err.Error()}
		}
	}
	return nil
}

// kindError is a refusal read back from a task: its words, and the sentinel
// the API branches on.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// err is the refusal as the in-process replay or fork would have returned it.
func (e *remoteError) err() error {
	if e.Kind == "submit" {
		kind := submit.ErrInvalid
		for _, k := range submitKinds {
			if k.name == e.SubmitKind {
				kind = k.err
			}
		}
		return &submit.Error{Kind: kind, Field: e.Field, Message: e.Message, RetryAfter: e.RetryAfter}
	}
	for _, k := range replayKinds {
		if k.name == e.Kind {
			return &kindError{kind: k.err, msg: e.Message}
		}
	}
	return errors.New(e.Message)
}

// handleReplayTask runs a run:replay task on a worker: the replay or the fork
// as this process would run it for its own API, its answer (or refusal)
// written as the task's result. A replay that failed otherwise is retried (it
// writes nothing); a fork's failure is its result (it is never run twice).
func (f *Fleet) handleReplayTask(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.ReplayPayload](t)
	if err != nil {
		return err
	}
	var out replayOutcome
	fork := len(p.Fork) > 0
	if fork {
		var fp forkPayload
		if err := json.Unmarshal(p.Fork, &fp); err != nil {
			return fmt.Errorf("%w: %s: bad fork: %v", asynq.SkipRetry, t.Type(), err)
		}
		var res replay.ForkResult
		if res, err = f.Fork(ctx, p.RunID, ForkOptions{At: fp.Request.At, By: fp.By, Team: fp.Request.Team, Model: fp.Request.Model, Prompt: fp.Request.Prompt}); err == nil {
			out.Fork = &res
		}
	} else {
		var rep replay.Report
		if rep, err = f.Replay(ctx, p.RunID, ReplayOptions{}); err == nil {
			out.Report = &rep
		}
	}
	if err != nil {
		if out.Error = remoteErrorOf(err); out.Error == nil {
			if !fork {
				return err
			}
			out.Error = &remoteError{Kind: "failed", Message: err.Error()}
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("replay run %s: encode the result: %w", p.RunID, err)
	}
	if _, err := t.ResultWriter().Write(raw); err != nil {
		return fmt.Errorf("replay run %s: store the result: %w", p.RunID, err)
	}
	return nil
}

// replayRemote is Replay in a process without the engine: checked here (the
// run finished, its size under replay.max_messages), run by a worker. The
// task's key is the permissions' revision: a changed permissions file asks
// again, the same one collects the same report.
func (f *Fleet) replayRemote(ctx context.Context, runID string) (replay.Report, error) {
	if _, _, err := replay.Check(ctx, f.Store, runID, f.Cfg.Replay.MaxMessages); err != nil {
		return replay.Report{RunID: runID}, err
	}
	key := security.NoPolicyRevision
	if f.Rules != nil {
		key = f.Rules.Current().Revision()
	}
	out, err := f.awaitReplayTask(ctx, queue.ReplayPayload{RunID: runID}, key)
	if err != nil {
		return replay.Report{RunID: runID}, err
	}
	if out.Report == nil {
		return replay.Report{RunID: runID}, fmt.Errorf("replay run %s: the worker's result holds no report", runID)
	}
	return *out.Report, nil
}

// forkRemote is Fork in a process without the engine, run by a worker. The
// task's key is the request and who made it: the same fork asked again within
// replay.keep is answered with the run it started, not a second one.
func (f *Fleet) forkRemote(ctx context.Context, runID string, by submit.Principal, req api.ForkRequest) (replay.ForkResult, error) {
	res := replay.ForkResult{ForkedFrom: runID, At: req.At}
	if _, _, err := replay.Check(ctx, f.Store, runID, f.Cfg.Replay.MaxMessages); err != nil {
		return res, err
	}
	raw, err := json.Marshal(forkPayload{By: by, Request: req})
	if err != nil {
		return res, fmt.Errorf("fork run %s: encode the request: %w", runID, err)
	}
	sum := sha256.Sum256(raw)
	out, err := f.awaitReplayTask(ctx, queue.ReplayPayload{RunID: runID, Fork: raw}, "fork-"+hex.EncodeToString(sum[:8]))
	if err != nil {
		return res, err
	}
	if out.Fork == nil {
		return res, fmt.Errorf("fork run %s: the worker's result holds no fork", runID)
	}
	return *out.Fork, nil
}

// Polling bounds of awaitReplayTask: the first look comes soon (a small
// replay takes milliseconds on an idle worker), later ones back off.
const (
	replayPollFirst = 20 * time.Millisecond
	replayPollMax   = 500 * time.Millisecond
)

// awaitReplayTask enqueues the run:replay task (or finds it) and waits up to
// replay.wait for its result: its refusal as an error, ErrReplayPending when
// the wait ran out (replay.ErrPending), the worker's last error when the task was given up.
func (f *Fleet) awaitReplayTask(ctx context.Context, p queue.ReplayPayload, key string) (replayOutcome, error) {
	cfg := f.Cfg.Replay.WithDefaults()
	// The wait bounds the polling only: the enqueue is the request's.
	deadline := time.NewTimer(cfg.Wait)
	defer deadline.Stop()
	id := queue.ReplayTaskID(p.RunID, key)
	enqueue := func() error {
		if _, err := f.Queue.Replay(ctx, p, key, cfg.Keep); err != nil {
			return fmt.Errorf("replay run %s: hand it to a worker: %w", p.RunID, err)
		}
		return nil
	}
	if err := enqueue(); err != nil {
		return replayOutcome{}, err
	}
	info, err := f.awaitTask(ctx, "replay run "+p.RunID, id, deadline.C,
		// Its retention ran out between the enqueue that found it and a
		// look: ask again.
		enqueue,
		func(asynq.TaskState) error {
			return fmt.Errorf("%w: run %s, task %s (waited replay.wait, %s): ask again, the same request collects its result",
				replay.ErrPending, p.RunID, id, cfg.Wait)
		})
	if err != nil {
		return replayOutcome{}, err
	}
	var out replayOutcome
	if err := json.Unmarshal(info.Result, &out); err != nil {
		return replayOutcome{}, fmt.Errorf("replay run %s: task %s: its result: %w", p.RunID, id, err)
	}
	if out.Error != nil {
		return out, out.Error.err()
	}
	return out, nil
}

// awaitTask polls task id of the maintenance queue until it completes (its
// info, with the worker's result) or is given up (an error with the worker's
// last error), the first look soon, later ones backing off; its own errors
// begin with what. missing is called when the task is not there (nil: that is
// an error); expired once, when deadline fires, with the task's state then:
// its error ends the wait as it is, nil waits on (only ctx bounds it then).
func (f *Fleet) awaitTask(ctx context.Context, what, id string, deadline <-chan time.Time, missing func() error, expired func(asynq.TaskState) error) (*asynq.TaskInfo, error) {
	insp := asynq.NewInspectorFromRedisClient(f.Redis)
	wait := replayPollFirst
	for {
		info, err := insp.GetTaskInfo(queue.QueueMaintenance, id)
		state := asynq.TaskState(0)
		switch {
		case missing != nil && (errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)):
			if err := missing(); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("%s: task %s: %w", what, id, err)
		case info.State == asynq.TaskStateCompleted:
			return info, nil
		case info.State == asynq.TaskStateArchived:
			return nil, fmt.Errorf("%s: task %s failed on the worker: %s", what, id, info.LastErr)
		default:
			state = info.State
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: task %s: %w", what, id, ctx.Err())
		case <-deadline:
			if err := expired(state); err != nil {
				return nil, err
			}
			deadline = nil // a nil channel: the deadline has had its say
		case <-time.After(wait):
		}
		wait = min(2*wait, replayPollMax)
	}
}
