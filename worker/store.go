package worker

import (
	"context"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// Store is what the agent loop needs of the database: runs, sessions under a
// lease, delegations and audit rows. *store.Store implements it, over the pool or
// over one transaction (store.InTx), which is how the loop's own tests roll back.
type Store interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	StartRun(ctx context.Context, id string) (bool, error)
	FinishRun(ctx context.Context, id, status, result, errMsg, reason string) (bool, []store.Run, error)

	AcquireStep(ctx context.Context, a store.Acquire) (store.Acquired, error)
	// SessionMessages reads a session's saved history (the flow rules' labels).
	SessionMessages(ctx context.Context, id string) ([]llm.Message, error)
	SaveStep(ctx context.Context, sess *store.Session, token string, lease time.Duration, w store.StepWrite) (store.StepSaved, error)
	ReleaseSession(ctx context.Context, id, token string) error
	// A step parked by a rate limit, and a principal's money spent today.
	MarkWaiting(ctx context.Context, sessionID, token string) (since, now time.Time, err error)
	SpentToday(ctx context.Context, owner string) (int64, error)

	RecordDelegations(ctx context.Context, session, token string, ds []store.Delegation, lim store.DelegationLimits) error
	GetDelegation(ctx context.Context, id string) (store.Delegation, error)
	GetTurn(ctx context.Context, id string) (store.Delegation, store.Run, error)
	FinishDelegation(ctx context.Context, id, status, result, errMsg string) (bool, error)

	InsertAudit(ctx context.Context, rows []store.AuditRow) error

	// An outside MCP client's calls (mcp.go).
	ClaimMCPCall(ctx context.Context, id, token string, stale time.Duration) (store.MCPCall, bool, error)
	RenewMCPCall(ctx context.Context, id, token string) (bool, error)
	ReleaseMCPCall(ctx context.Context, id, token, status, approvalID string) (bool, error)
	FinishMCPCall(ctx context.Context, id, token string, out store.MCPCall, audit *store.AuditRow) (bool, error)

	RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error)
}

var _ Store = (*store.Store)(nil)

// MemoryRecaller reads a recall's candidates (store.Store.RecallMemory's
// contract): the store itself, or a store.MemoryIndex in front of it.
type MemoryRecaller interface {
	RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]store.MemoryEntry, error)
}

// MemoryRecallerAt is a MemoryRecaller that also recalls as of what a new
// session's acquire read (store.MemoryIndex): the step asks for that in its
// acquire's batch, and the recall then makes no round trip of its own when the
// recaller's copy is current.
type MemoryRecallerAt interface {
	MemoryRecaller
	RecallMemoryAt(ctx context.Context, at store.MemoryAt, agent string, limit int) ([]store.MemoryEntry, error)
}

var _ MemoryRecallerAt = (*store.MemoryIndex)(nil)
