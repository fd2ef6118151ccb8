package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/store"
)

// Intents makes non-idempotent tool calls crash-safe. Before such a call runs, its
// intent (call key, tool, argument hash) is recorded; after, its outcome. A
// redelivered step then replays a finished call's stored result instead of running
// it again, and reports a started-but-unfinished one as "outcome unknown" — it is
// not silently repeated. Idempotent tools skip the bookkeeping: re-running them is
// the recovery.
type Intents struct {
	Store IntentStore
	Reg   *Registry
}

// IntentStore records intents (store.Store implements it).
type IntentStore interface {
	BeginIntent(ctx context.Context, key, runID, tool, argsHash string) (store.Intent, error)
	FinishIntent(ctx context.Context, key, result string, isErr bool) error
}

// Middleware wraps execution; put it inside the gate (after the approval check) so
// only calls that will really run record an intent.
func (in *Intents) Middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call Call) (Result, error) {
		spec, ok := in.Reg.Spec(call.Name)
		s := call.Session
		if !ok || spec.Idempotent || s == nil {
			return next.Handle(ctx, call)
		}
		sum := sha256.Sum256(call.Args)
		hash := hex.EncodeToString(sum[:])
		key := s.SessionID + ":" + call.ID
		intent, err := in.Store.BeginIntent(ctx, key, s.RunID, call.Name, hash)
		if err != nil {
			return Result{}, err
		}
		switch intent.State {
		case store.IntentFinished:
			if intent.IsError {
				return Result{}, fmt.Errorf("%s (recorded outcome of an earlier attempt): %s", call.Name, intent.Result)
			}
			return Result{Content: intent.Result}, nil
		case store.IntentStarted:
			return Result{}, fmt.Errorf("%w: %s started before a worker stopped and never reported back; it was not run again because it is not idempotent — check its effects before retrying", ErrOutcomeUnknown, call.Name)
		}
		res, err := next.Handle(ctx, call)
		if res.Pending || ctx.Err() != nil || errors.Is(err, ErrInfrastructure) {
			// Interrupted (shutdown): whether it took effect is unknown, so the
			// intent stays open and the redelivery reports exactly that.
			return res, err
		}
		out, isErr := res.Content, false
		if err != nil {
			out, isErr = err.Error(), true
		}
		if ferr := in.Store.FinishIntent(context.WithoutCancel(ctx), key, out, isErr); ferr != nil {
			return res, fmt.Errorf("%s ran, but its outcome could not be recorded: %w", call.Name, ferr)
		}
		return res, err
	})
}
