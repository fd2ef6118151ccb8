package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
)

// Task types. The values are stored with every enqueued task: never change one.
const (
	// TypeSupervise steps a run's supervisor (SupervisePayload).
	TypeSupervise = "run:supervise"
	// TypeTurn steps the agent turn of one delegation (TurnPayload).
	TypeTurn = "agent:turn"
	// TypeApprovalExpire times a pending approval out (ApprovalExpirePayload).
	TypeApprovalExpire = "approval:expire"
	// TypeWebhookDeliver delivers one run event to one webhook (WebhookPayload).
	TypeWebhookDeliver = "webhook:deliver"
	// TypeRunCleanup releases what a finished run held: its mailboxes, GPU leases
	// and sandbox container (CleanupPayload).
	TypeRunCleanup = "run:cleanup"
	// TypeFinishImage is a completed run's post-run 2K upscale of the pictures
	// finish_image asked for (FinishImagePayload): enqueued by run:cleanup after
	// it released the run's leases; it takes a lease of its own.
	TypeFinishImage = "run:finish-image"
	// TypeMCPCall executes one tool call of an outside MCP client through the
	// gate (MCPCallPayload): enqueued by the MCP server, and again by the
	// decision on its approval.
	TypeMCPCall = "mcp:call"
	// TypeReplay is a replay or a fork of a finished run (ReplayPayload) that
	// an API process without the worker's engine hands to a worker: the
	// worker stores its answer as the task's result, which the API process
	// collects (docs/replay.md, "Split deployments").
	TypeReplay = "run:replay"
	// TypePromote copies a completed staging run's workspace into its
	// project's (PromotePayload) for an API process that does not manage the
	// workspaces (the split deployment): the API holds the project's row and
	// writes the audit row, a worker does the copy and stores its outcome as
	// the task's result (docs/tiers.md, "Promotion").
	TypePromote = "run:promote"

	// The periodic maintenance tasks (no payload), enqueued by the scheduler.
	TypeRequeueQueued  = "maintenance:requeue-queued"
	TypeStuckRuns      = "maintenance:stuck-runs"
	TypeAuditPurge     = "maintenance:audit-purge"
	TypeLeaseReap      = "maintenance:lease-reap"
	TypeMailboxReclaim = "maintenance:mailbox-reclaim"
	TypeMailboxTrim    = "maintenance:mailbox-trim"
	TypeGPUStopIdle    = "maintenance:gpu-stop-idle"
	TypeSandboxOrphans = "maintenance:sandbox-orphans"
	TypeWorkspaceSweep = "maintenance:workspace-sweep"
	// TypeRetention deletes what outlived its retention (package retention).
	TypeRetention = "maintenance:retention"
)

// MaintenanceTasks are the periodic task types, in the order a tick enqueues them.
func MaintenanceTasks() []string {
	return []string{TypeRequeueQueued, TypeStuckRuns, TypeAuditPurge, TypeLeaseReap, TypeMailboxReclaim,
		TypeMailboxTrim, TypeGPUStopIdle, TypeSandboxOrphans, TypeWorkspaceSweep, TypeRetention}
}

// Queue names.
const (
	// QueueSupervisor holds supervisor steps and approval expiries.
	QueueSupervisor = "supervisor"
	// QueueWorkers holds agent turns.
	QueueWorkers = "workers"
	// QueueMaintenance holds maintenance ticks, run cleanups and webhook deliveries.
	QueueMaintenance = "maintenance"
)

// Queues are the fleet's queue names, in priority order.
func Queues() []string { return []string{QueueSupervisor, QueueWorkers, QueueMaintenance} }

// Weights are the asynq priority weights of the queues (asynq.Config.Queues):
// supervisor steps are short and unblock whole runs, so they go first; maintenance
// goes last. A fresh map on every call.
func Weights() map[string]int {
	return map[string]int{QueueSupervisor: 6, QueueWorkers: 4, QueueMaintenance: 1}
}

// SupervisePayload resumes (or starts) a run's supervisor.
type SupervisePayload struct {
	RunID string `json:"run_id"`
}

// TurnPayload runs (or resumes) the agent turn of one delegation.
type TurnPayload struct {
	DelegationID string `json:"delegation_id"`
}

// ApprovalExpirePayload names the approval to expire.
type ApprovalExpirePayload struct {
	ApprovalID string `json:"approval_id"`
}

// WebhookPayload names the event to deliver and the webhook to deliver it to:
// its index in the configured list when the delivery was enqueued, and a
// digest of its URL, so a list changed meanwhile (a rolling restart with a new
// configuration) cannot send the event to whichever receiver took the index.
// The digest is absent in the payloads of builds before it (v2 readers ignore
// it): those name the hook by index alone.
type WebhookPayload struct {
	EventID int64  `json:"event_id"`
	Hook    int    `json:"hook"`
	Digest  string `json:"hook_digest,omitempty"`
}

// CleanupPayload names the finished run whose resources are released.
type CleanupPayload struct {
	RunID string `json:"run_id"`
}

// FinishImagePayload names the completed run whose pictures are upscaled.
type FinishImagePayload struct {
	RunID string `json:"run_id"`
}

// MCPCallPayload names the MCP call (its mcp_calls row) to execute.
type MCPCallPayload struct {
	CallID string `json:"call_id"`
}

// ReplayPayload names the run a worker replays, or forks when Fork is set
// (the fork's request and who asked for it, as the fleet encodes them).
type ReplayPayload struct {
	RunID string          `json:"run_id"`
	Fork  json.RawMessage `json:"fork,omitempty"`
}

// PromotePayload is a promotion's copy: workspace From's files replace
// workspace To's.
type PromotePayload struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// MCPCallTask is the execution of an MCP client's tool call.
func MCPCallTask(callID string) *asynq.Task {
	return newTask(TypeMCPCall, MCPCallPayload{CallID: callID})
}

// SuperviseTask is the supervisor step of run.
func SuperviseTask(runID string) *asynq.Task {
	return newTask(TypeSupervise, SupervisePayload{RunID: runID})
}

// TurnTask is the agent turn of a delegation.
func TurnTask(delegationID string) *asynq.Task {
	return newTask(TypeTurn, TurnPayload{DelegationID: delegationID})
}

// ApprovalExpireTask is the expiry of an approval.
func ApprovalExpireTask(approvalID string) *asynq.Task {
	return newTask(TypeApprovalExpire, ApprovalExpirePayload{ApprovalID: approvalID})
}

// WebhookTask is the delivery of event eventID to webhook hook, whose URL has
// the given digest.
func WebhookTask(hook int, digest string, eventID int64) *asynq.Task {
	return newTask(TypeWebhookDeliver, WebhookPayload{EventID: eventID, Hook: hook, Digest: digest})
}

// CleanupTask is the cleanup of a finished run.
func CleanupTask(runID string) *asynq.Task {
	return newTask(TypeRunCleanup, CleanupPayload{RunID: runID})
}

// FinishImageTask is the post-run upscale of a run's pictures.
func FinishImageTask(runID string) *asynq.Task {
	return newTask(TypeFinishImage, FinishImagePayload{RunID: runID})
}

func newTask[P any](typ string, p P) *asynq.Task {
	raw, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("queue: %s payload: %v", typ, err)) // plain structs of strings and ints
	}
	return asynq.NewTask(typ, raw)
}

// Decode reads a task's payload. A payload that does not decode can never be
// handled, so the error wraps asynq.SkipRetry: the task is archived, not retried.
// A payload of a contract this build does not read is refused first
// (CheckContract: one of a newer contract is retried, not archived at once).
func Decode[P any](t *asynq.Task) (P, error) {
	var p P
	if err := CheckContract(t); err != nil {
		return p, err
	}
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return p, fmt.Errorf("%w: %s: bad payload: %v", asynq.SkipRetry, t.Type(), err)
	}
	return p, nil
}

// Task ids. Each is deterministic per cause, so a duplicate enqueue collapses; the
// formats are the idempotency contract with tasks already in Redis: a changed one
// no longer collapses with the tasks of the old form, so change one only where
// running such a task once more is harmless (WebhookTaskID).

// SuperviseTaskID is the id of run's supervisor step for key: "start", or the cause
// of a resume ("after:<delegation>", "approval:<approval>").
func SuperviseTaskID(runID, key string) string { return "supervise:" + runID + ":" + key }

// TurnTaskID is the id of a delegation's agent turn for key (as SuperviseTaskID).
func TurnTaskID(delegationID, key string) string { return "turn:" + delegationID + ":" + key }

// MCPCallTaskID is the id of an MCP call's task for key (as SuperviseTaskID).
func MCPCallTaskID(callID, key string) string { return "mcp-call:" + callID + ":" + key }

// ReplayTaskID is the id of a replay (or a fork) of run for key: what the
// answer depends on besides the record (the permissions' revision; a fork's
// request), so the same request finds the same task and its result.
func ReplayTaskID(runID, key string) string { return "replay:" + runID + ":" + key }

// PromoteTaskID is the id of one promotion request's copy: from, to and the
// request's own nonce (a promotion asked again copies again: the staging
// files may be another run's by then).
func PromoteTaskID(from, to, nonce string) string { return "promote:" + from + ":" + to + ":" + nonce }

// ApprovalExpireTaskID is the id of an approval's expiry.
func ApprovalExpireTaskID(approvalID string) string { return "approval-expire:" + approvalID }

// WebhookTaskID is the id of one event's delivery to one webhook: its index
// and its URL's digest, so two configurations that put different receivers at
// one index (processes of a rolling restart) do not collapse their deliveries
// into one. The builds before the digest wrote webhook:<hook>:<event>; a
// delivery they enqueued and this build enqueues again (the sweep, at the
// upgrade) goes out twice under one webhook-id, which receivers deduplicate.
func WebhookTaskID(hook int, digest string, eventID int64) string {
	return fmt.Sprintf("webhook:%d:%d:%s", hook, eventID, digest)
}

// CleanupTaskID is the id of a run's cleanup.
func CleanupTaskID(runID string) string { return "cleanup:" + runID }

// FinishImageTaskID is the id of a run's post-run upscale (one per run: the
// task upscales every pending picture of the run).
func FinishImageTaskID(runID string) string { return "finish-image:" + runID }

// MaintenanceTaskID is the id of maintenance task typ for the tick of period that
// contains t: every scheduler replica computes the same id for a tick.
func MaintenanceTaskID(typ string, t time.Time, period time.Duration) string {
	return fmt.Sprintf("%s:%d", typ, t.Truncate(period).Unix())
}

// stampKey is the payload field the Enqueuer adds to every task due now: the
// enqueue time in Unix microseconds. Handlers ignore it (Decode's structs have
// no such field), and a worker of an older version ignores it too.
const stampKey = `"enqueued_at":`

// stamp returns t with the enqueue time at the head of its JSON object payload;
// a payload that is not an object (a maintenance tick's empty one) is left as it
// is. The task id, not the payload, makes a duplicate enqueue collapse, so the
// stamp never makes two enqueues of one cause distinct.
func stamp(t *asynq.Task, at time.Time) *asynq.Task {
	p := t.Payload()
	if len(p) < 2 || p[0] != '{' {
		return t
	}
	out := make([]byte, 0, len(p)+len(stampKey)+20)
	out = append(out, '{')
	out = append(out, stampKey...)
	out = strconv.AppendInt(out, at.UnixMicro(), 10)
	if rest := bytes.TrimSpace(p[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	out = append(out, p[1:]...)
	return asynq.NewTask(t.Type(), out)
}

// EnqueuedAt is when the Enqueuer enqueued t (false for a task it did not
// stamp: scheduled ones, maintenance ticks, tasks built directly). The clock is
// the enqueuing process's: across hosts the wait it gives is as good as their
// clock sync.
func EnqueuedAt(t *asynq.Task) (time.Time, bool) {
	if !bytes.Contains(t.Payload(), []byte(stampKey)) {
		return time.Time{}, false
	}
	var s struct {
		At int64 `json:"enqueued_at"`
	}
	if json.Unmarshal(t.Payload(), &s) != nil || s.At <= 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(s.At), true
}
