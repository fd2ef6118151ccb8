package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/tools"
)

// ReplayOptions change what a replay judges with.
type ReplayOptions struct {
	// Rules are the permissions to judge under (security.LoadRules of a
	// candidate file); nil: those in force.
	Rules *security.Rules
}

// ErrNoEngine refuses a replay in a process without the worker's engine (the
// api role alone, or a fleet opened without the gate). The api role's API
// hands its replays and forks to a worker instead (replaytask.go).
var ErrNoEngine = errors.New("replay needs the worker's engine and its permission gate in this process")

// Replay replays a finished run from its record (issue 44, docs/replay.md):
// the worker's engine judges every recorded step again through the gate's
// recorded copy (Gate.Recorded: it writes no audit row, requests no
// approval, counts no metric) in front of replay.Terminal, which serves each
// call its recorded result. Nothing runs and nothing of the run changes.
func (f *Fleet) Replay(ctx context.Context, runID string, o ReplayOptions) (replay.Report, error) {
	if f.Worker == nil || f.gate == nil {
		return replay.Report{RunID: runID}, ErrNoEngine
	}
	rec, err := replay.Load(ctx, f.Store, runID, f.Cfg.Replay.MaxMessages)
	if err != nil {
		return replay.Report{RunID: runID}, err
	}
	router := tools.NewRecordedRouter(f.Registry, replay.Terminal, f.gate.Recorded(o.Rules).Middleware)
	rep, err := f.Worker.Replay(ctx, rec, router)
	if err != nil {
		return rep, fmt.Errorf("replay run %s: %w", runID, err)
	}
	return rep, nil
}
