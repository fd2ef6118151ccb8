// Package replay holds what a replay of a finished run is made of, below the
// engine that performs it (worker.Worker.Replay): the record it reads, the
// terminal handler that serves each call the result the record holds instead
// of running the tool, the per-step state hash, and the report.
//
// A replay re-executes the engine's decisions over a run's record — the gate's
// layers, the delegations a call makes, the reply checks (QA, required_output),
// the per-message cap, the circuit breaker and max_steps — with the model's
// answers and the tools' results taken from the sessions' saved histories. No
// tool runs and nothing is written: the report says where, if anywhere, the
// engine now decides differently from the record (docs/replay.md).
package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
)

// Sentinel errors callers branch on.
var (
	// ErrNotFinished refuses the replay of a run that has not ended: its record
	// is still being written.
	ErrNotFinished = errors.New("run not finished")
	// ErrCorruptRecord is a record the engine cannot walk: a history that does
	// not decode, a tool message that answers no call, a session or
	// delegation missing. Nothing is replayed past it.
	ErrCorruptRecord = errors.New("corrupt record")
	// ErrNotRecorded is the terminal's answer to a call the record has no result
	// for (it was refused then and would run now): the replay never runs it.
	ErrNotRecorded = errors.New("the record has no result for this call: it did not run then")
	// ErrBadForkPoint refuses a fork at a step the record cannot start a run
	// from: out of range, in a delegation's session, a limit, after a call
	// whose effects the record does not hold (docs/fork.md).
	ErrBadForkPoint = errors.New("bad fork point")
	// ErrForkDiverged refuses a fork whose shared steps the engine now decides
	// differently: they would not be the record.
	ErrForkDiverged = errors.New("the engine now decides a shared step differently")
)

// Record is what a replay reads of a finished run: never written to.
type Record struct {
	Run store.Run
	// Sessions are the run's sessions, oldest first, each with its saved
	// context (store.Store.SessionMessages).
	Sessions []store.Session
	// Delegations are the run's delegations (store.Store.RunDelegations).
	Delegations []store.Delegation
	// Audit are the run's audit rows, oldest first: the gate's recorded
	// decision of each call, by call key (session id ":" call id).
	Audit []store.AuditRow
}

// Reader is what Load reads; *store.Store implements it.
type Reader interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	RunSessions(ctx context.Context, runID string) ([]store.SessionSummary, error)
	SessionMessages(ctx context.Context, id string) ([]llm.Message, error)
	RunDelegations(ctx context.Context, runID string) ([]store.Delegation, error)
	RunAudit(ctx context.Context, runID string, limit int) ([]store.AuditRow, error)
}

var _ Reader = (*store.Store)(nil)

// MaxAuditRows bounds the audit rows a replay reads of one run.
const MaxAuditRows = 100_000

// Load reads the record of a finished run. A run that has not ended is
// refused (ErrNotFinished), one over maxMessages history messages too
// (ErrTooLarge, before any message is read; maxMessages ≤ 0:
// DefaultMaxMessages), a history that does not decode is ErrCorruptRecord;
// store.ErrNotFound passes through for a run that does not exist.
func Load(ctx context.Context, r Reader, runID string, maxMessages int) (Record, error) {
	run, sums, err := Check(ctx, r, runID, maxMessages)
	if err != nil {
		return Record{}, err
	}
	rec := Record{Run: run}
	for _, s := range sums {
		msgs, err := r.SessionMessages(ctx, s.ID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return Record{}, fmt.Errorf("%w: session %s (%s) vanished while it was read", ErrCorruptRecord, s.ID, s.Agent)
			}
			// A message that does not decode is the record's fault, not the
			// database's: the replay stops with it named.
			return Record{}, fmt.Errorf("%w: session %s (%s): %w", ErrCorruptRecord, s.ID, s.Agent, err)
		}
		rec.Sessions = append(rec.Sessions, store.Session{ID: s.ID, RunID: runID, Agent: s.Agent, Role: s.Role,
			DelegationID: s.DelegationID, Status: s.Status, Steps: s.Steps, Messages: msgs, Compactions: s.Compactions})
	}
	if rec.Delegations, err = r.RunDelegations(ctx, runID); err != nil {
		return Record{}, err
	}
	if rec.Audit, err = r.RunAudit(ctx, runID, MaxAuditRows); err != nil {
		return Record{}, err
	}
	return rec, nil
}

// Served is what the terminal serves one call: the tool message the record
// holds for it (nil: none), and whether the call made delegations (the live
// handler answered it pending; the delegations' results came later).
type Served struct {
	Message   *llm.Message
	Delegated bool
	// executions counts the calls that reached the terminal (the gate let
	// them through): each was served from the record, never run.
	reached *int
}

type servedKey struct{}

// Serve puts on ctx what the terminal answers the call dispatched with it.
func Serve(ctx context.Context, s Served) context.Context {
	return context.WithValue(ctx, servedKey{}, s)
}

// Terminal is the innermost handler of a replaying router
// (tools.NewRecordedRouter): it answers a call the gate let through with the
// result the record holds, and runs nothing. A call without a recorded result
// is answered ErrNotRecorded.
var Terminal tools.Handler = tools.HandlerFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
	s, ok := ctx.Value(servedKey{}).(Served)
	if !ok {
		// A replaying router used without a record: refusing is the only safe
		// answer (nothing may run).
		return tools.Result{}, fmt.Errorf("replay: %s dispatched without a record: %w", call.Name, ErrNotRecorded)
	}
	if s.reached != nil {
		*s.reached++
	}
	if s.Delegated {
		return tools.Result{Pending: true}, nil
	}
	m := s.Message
	if m == nil || m.Refused {
		return tools.Result{}, ErrNotRecorded
	}
	if m.IsError {
		return tools.Result{}, errors.New(trimError(m.Content))
	}
	return tools.Result{Content: m.Content}, nil
})

// Reached is Serve with a counter of the calls that reach the terminal.
func Reached(ctx context.Context, s Served, n *int) context.Context {
	s.reached = n
	return Serve(ctx, s)
}

// trimError is a recorded error's text as the tool gave it (the worker
// prefixes "error: ").
func trimError(s string) string {
	if len(s) > 7 && s[:7] == "error: " {
		return s[7:]
	}
	return s
}

// Hasher chains the state hash of a session's steps: sha256 over the previous
// hash and the canonical JSON of what the step adds (the history messages since
// the last step, then the step's decision). Two replays of the same record
// under the same engine give the same hashes; the recorded and the replayed
// side of a step hash equal exactly when everything up to it is the same.
type Hasher struct{ sum [32]byte }

// Add folds v (any JSON-marshalable value) into the chain. encoding/json
// writes map keys sorted and struct fields in order: canonical for the types
// hashed here.
func (h *Hasher) Add(v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		raw = []byte(fmt.Sprintf("unmarshalable %T: %v", v, err))
	}
	d := sha256.New()
	d.Write(h.sum[:])
	d.Write(raw)
	copy(h.sum[:], d.Sum(nil))
}

// Sum is the chain's current hash, hex.
func (h Hasher) Sum() string { return hex.EncodeToString(h.sum[:]) }
