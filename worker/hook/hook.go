// Package hook is the contract between the worker's durable agent loop and
// the product rules the composition root (package fleet) plugs into it
// through worker.Config:
//
//   - reply checks (ReplyCheck), consulted on every final answer of a session
//     (a model message with no tool calls) before the session may end: the QA
//     rule (package qa), the required_output rule (package requiredoutput);
//   - post-run work (PostRun), scheduled by run:cleanup once a run has ended
//     and run as a durable task of its own: finish_image's 2K upscale
//     (package finishimage).
//
// The worker imports no rule, and a rule imports this package, never the
// worker (internal/archtest): each hook is given its inputs in its signature.
package hook

import (
	"context"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/tools"
)

// Reply is a final answer under check, with what a check may read: a
// session's last model message with no tool calls, or a supervisor's reply
// call (ViaReplyTool), which would end the run.
type Reply struct {
	// Node is the template node whose session answered.
	Node templates.Node
	// Access is the session's tools.
	Access tools.Access
	// Workspace is the run's workspace directory (read it confined: package
	// confine).
	Workspace string
	// History is the session's messages before the answer.
	History []llm.Message
	// Answer is the text of the final answer.
	Answer string
	// ViaReplyTool: the answer is the message of a supervisor's reply call. A
	// refusal is then the call's error (it counts toward the circuit breaker)
	// and the run goes on.
	ViaReplyTool bool
}

// ReplyCheck checks a final answer. It returns nil when the answer stands (or
// the check does not apply to it), a *SendBack when the answer goes back to
// the agent, and any other error when the check itself failed: the step
// fails and its task retries.
type ReplyCheck func(ctx context.Context, r Reply) error

// SendBack is a reply check's refusal. The agent gets Reason as a user
// message and answers again; every refusal counts toward the circuit breaker,
// whose failure names the last reason.
type SendBack struct {
	// Reason is what the agent is told: why the answer is not accepted and
	// what to do.
	Reason string
	// What names the refused things, plural, in the circuit breaker's failure
	// ("<agent>: 5 verdicts sent back, last: …").
	What string
}

func (s *SendBack) Error() string { return s.Reason }

// PostRun is one kind of post-run work: what a run asked for that starts only
// once the run has ended. Its durability is that of the two tasks it rides on:
// run:cleanup (retried) calls Schedule, which enqueues the work's own task
// under a deterministic id; the worker runs that task with Run (retried, a
// lease wait snoozed) and calls GaveUp when it ran out of retries.
type PostRun struct {
	// Name keys the work in the registry (worker.Config.PostRun) and names it
	// in logs: "finish_image".
	Name string
	// TaskType is the asynq task type of the work's task; its payload names
	// the run as {"run_id": …} (queue.FinishImagePayload). The worker's Mux
	// handles it.
	TaskType string
	// Schedule is called by run:cleanup after the run's leases are released
	// (post-run work never holds the run's own grant). It enqueues the run's
	// task, or settles work that will not be done. Idempotent: a redelivered
	// cleanup calls it again. Its error retries the cleanup.
	Schedule func(ctx context.Context, runID string) error
	// Run is one delivery of the task, of the run d.Run. Idempotent: asynq
	// delivers at least once. Its error retries the task; a snooze from
	// Delivery.Hold is returned as it is (no retry spent).
	Run func(ctx context.Context, d Delivery) error
	// GaveUp, when set, is called once the task has run out of retries, with
	// how many attempts were made and the last error. Post-run work fails
	// itself, never its run, which has ended.
	GaveUp func(ctx context.Context, runID string, attempts int, cause error)
}

// Delivery is what the worker gives one delivery of a post-run task.
type Delivery struct {
	// Run is the ended run, as stored.
	Run store.Run
	// Workspace opens the run's workspace and returns its directory. A
	// non-empty reason says the workspace cannot be had (the disk is full, it
	// cannot be mounted), with err saying why: the work cannot be done. An
	// error without a reason is retried.
	Workspace func(ctx context.Context) (dir, reason string, err error)
	// Hold takes a lease of the work's own on a GPU service, holder
	// lease.PostRunHolder(run), starting the service's container when the
	// fleet manages it, and keeps it renewed until its Release. A non-empty
	// reason says the lease can never be had (no such service, its container
	// does not start), with err saying why. A busy service returns a snooze
	// (the worker's ErrLeaseWaiting): return it as it is.
	Hold func(ctx context.Context, service string) (l Lease, reason string, err error)
}

// Lease is a post-run lease Delivery.Hold took.
type Lease struct {
	lease.Grant
	// Ctx is the delivery's context, cancelled (with the cause) when the lease
	// is lost: do the leased work under it.
	Ctx context.Context
	// Release stops the renewal and releases the lease (idempotent).
	Release func()
}
