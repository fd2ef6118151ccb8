package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/wsquota"
)

// Promotions in a split deployment (docs/tiers.md, "Promotion"): the API
// process alone may see the workspaces read-only (compose mounts them so) and
// cannot mount an image, so it hands the copy to a worker as a run:promote
// task and waits for its outcome, inside the transaction that holds the
// project's row and writes the audit row: a refused or failed copy leaves no
// row, as in one process.

// promoteOutcome is a run:promote task's result: "" when the copy was made,
// else the refusal's kind (promoteKinds) and its words.
type promoteOutcome struct {
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`
}

// promoteKinds are the refusals the API answers by kind; the names are
// stored in task results: never change one.
var promoteKinds = []struct {
	name string
	err  error
}{
	{"no_workspace", wsquota.ErrNoWorkspace}, {"exceeded", wsquota.ErrExceeded}, {"disk_full", wsquota.ErrDiskFull},
}

// handlePromoteTask copies a promotion's workspace on a worker and stores the
// outcome as the task's result. The copy is all or nothing
// (wsquota.Manager.Promote), so a failure is an outcome, not a retry.
func (f *Fleet) handlePromoteTask(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.PromotePayload](t)
	if err != nil {
		return err
	}
	var out promoteOutcome
	if err := f.Workspaces.Promote(ctx, p.From, p.To); err != nil {
		out = promoteOutcome{Kind: "failed", Message: err.Error()}
		for _, k := range promoteKinds {
			if errors.Is(err, k.err) {
				out.Kind = k.name
			}
		}
		f.Log.Warn("promote: copy refused", "from", p.From, "to", p.To, "err", err)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("promote %s: encode the result: %w", p.From, err)
	}
	if _, err := t.ResultWriter().Write(raw); err != nil {
		return fmt.Errorf("promote %s: store the result: %w", p.From, err)
	}
	return nil
}

// promoteRemote is the promotion's copy in a process that does not manage
// the workspaces: a worker makes it. Its error wraps the refusal's sentinel
// (wsquota.ErrExceeded, …), which the API answers as in one process. No
// worker taking the task within replay.wait, it is withdrawn (so no copy
// happens after the promotion was refused) and the caller gets a 503; a copy
// a worker has begun is waited for, however long it takes (the request's
// context bounds it).
func (f *Fleet) promoteRemote(ctx context.Context, from, to string) error {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	cfg := f.Cfg.Replay.WithDefaults()
	id, err := f.Queue.Promote(ctx, queue.PromotePayload{From: from, To: to}, hex.EncodeToString(nonce), cfg.Keep)
	if err != nil {
		return fmt.Errorf("promote %s: hand the copy to a worker: %w", from, err)
	}
	pickup := time.NewTimer(cfg.Wait)
	defer pickup.Stop()
	insp := asynq.NewInspectorFromRedisClient(f.Redis)
	info, err := f.awaitTask(ctx, "promote "+from, id, pickup.C, nil, func(state asynq.TaskState) error {
		if state == asynq.TaskStatePending || state == asynq.TaskStateScheduled || state == asynq.TaskStateRetry {
			if derr := insp.DeleteTask(queue.QueueMaintenance, id); derr == nil {
				return &api.Error{Status: http.StatusServiceUnavailable, Field: "id", Message: fmt.Sprintf(
					"no worker took the copy of workspace %s within replay.wait (%s): nothing was changed; promote again once workers run", from, cfg.Wait)}
			}
		}
		return nil // a worker has it: wait for its outcome
	})
	if err != nil {
		return err
	}
	var out promoteOutcome
	if err := json.Unmarshal(info.Result, &out); err != nil {
		return fmt.Errorf("promote %s: task %s: its result: %w", from, id, err)
	}
	if out.Kind == "" {
		return nil
	}
	for _, k := range promoteKinds {
		if k.name == out.Kind {
			return &kindError{kind: k.err, msg: out.Message}
		}
	}
	return fmt.Errorf("promote %s on a worker: %s", from, out.Message)
}
