package events

import (
	"fmt"
	"reflect"
	"time"

	"github.com/aetherium-engine/aetherium/store"
)

// The payload of each event type, declared once: the emit sites build these
// structs, the OpenAPI document reflects them (one schema per type, a union on
// type), and Check refuses data of another shape. The JSON field names are the
// stored ones the Studio and the CLI read: never rename one. A field that is
// only present in some events of a type is omitempty.

// RunQueuedData is the data of run.queued: a run was submitted.
type RunQueuedData struct {
	// Team is the name of the run's team.
	Team string `json:"team"`
	// Template is the template the run was submitted under ("" for an inline team).
	Template string `json:"template"`
	// Priority is the run's priority, 1 (lowest) to 5.
	Priority int `json:"priority"`
	// Position is the run's place in the line of its fairness key's waiting
	// runs (1: next), when its key's run limit made it wait.
	Position int `json:"position,omitempty"`
	// RunLimit is that key's run limit (fairness.keys.<key>.runs), when the run waits.
	RunLimit int `json:"run_limit,omitempty"`
	// Trigger says what started the run when no person did ("retry:<run id>",
	// …); absent for a person's submission.
	Trigger string `json:"trigger,omitempty"`
}

// RunAdmittedData is the data of run.admitted: a run that waited for its
// fairness key's run limit was admitted and will start.
type RunAdmittedData struct {
	// Priority is the run's priority, 1 (lowest) to 5.
	Priority int `json:"priority"`
}

// RunStartedData is the data of run.started: the supervisor's first step began.
type RunStartedData struct {
	// Team is the name of the run's team.
	Team string `json:"team"`
}

// RunEndedData is the data of a run's terminal event (run.completed,
// run.failed, run.cancelled): the run's stored outcome.
type RunEndedData struct {
	// Status is the run's final status (completed, failed, cancelled).
	Status string `json:"status"`
	// Result is the supervisor's reply ("" unless completed).
	Result string `json:"result"`
	// Error says why the run failed or was cancelled.
	Error string `json:"error"`
	// Reason is the machine-readable cause of a failure (budget_exceeded, circuit_open, …).
	Reason string `json:"reason"`
	// TokensUsed are the model tokens the run used.
	TokensUsed int64 `json:"tokens_used"`
}

// DelegationCreatedData is the data of delegation.created: an agent handed a
// task to another.
type DelegationCreatedData struct {
	DelegationID string `json:"delegation_id"`
	// To is the agent the task went to.
	To string `json:"to"`
	// Task is the task, cut to 2,000 bytes.
	Task string `json:"task"`
}

// DelegationFinishedData is the data of delegation.finished: how a delegation
// ended, once per delegation.
type DelegationFinishedData struct {
	DelegationID string `json:"delegation_id"`
	// Status is the delegation's final status (completed, failed, cancelled).
	Status string `json:"status"`
	// Result is the delegate's answer, cut to 2,000 bytes (the row keeps it whole).
	Result string `json:"result"`
	// Error says why it failed.
	Error string `json:"error"`
}

// TurnStartedData is the data of agent.turn_started: a delegated agent's turn began.
type TurnStartedData struct {
	DelegationID string `json:"delegation_id"`
}

// ModelAnsweredData is the data of agent.message: one model answer of an agent.
type ModelAnsweredData struct {
	// Content is the answer's text, cut to 2,000 bytes.
	Content string `json:"content"`
	// ToolCalls are the names of the tools the answer calls, in order.
	ToolCalls []string `json:"tool_calls"`
	// Tokens are the call's tokens, input and output.
	Tokens   int    `json:"tokens"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// Fallback is true when the team's fallback model answered (its model was overloaded).
	Fallback bool `json:"fallback,omitempty"`
	// Cost is what the call cost in dollars, when the price table knows the model.
	Cost string `json:"cost,omitempty"`
	// CachedTokens are the input tokens the provider served from its cache.
	CachedTokens int `json:"cached_tokens,omitempty"`
	// DurationMS is how long the model took to answer, in milliseconds (the
	// Studio's step durations and waterfall).
	DurationMS int64 `json:"duration_ms"`
}

// ModelWaitingData is the data of agent.waiting: a rate limit parked an
// agent's model call, once per wait.
type ModelWaitingData struct {
	// Limit names what holds the call back ("openai/gpt-4o rpm", "HTTP 429").
	Limit string `json:"limit"`
	// RetryAfterMS is how long until the call asks again, in milliseconds.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// Cause is the provider's refusal, when there was one.
	Cause string `json:"cause,omitempty"`
}

// ToolCallData is the data of tool.call: one tool call and the gate's decision.
type ToolCallData struct {
	Tool   string `json:"tool"`
	CallID string `json:"call_id"`
	// Decision is the call's outcome (allowed, denied, failed, outcome_unknown, …).
	Decision string `json:"decision"`
	// Layer is the gate's layer that refused the call ("" when none did).
	Layer string `json:"layer"`
	// Error is the call's error or refusal ("" when it succeeded).
	Error string `json:"error"`
	// Result is the call's result, cut to 500 bytes.
	Result     string `json:"result"`
	DurationMS int64  `json:"duration_ms"`
	// MCPProfile is the MCP client profile that made the call (MCP calls only).
	MCPProfile string `json:"mcp_profile,omitempty"`
}

// ApprovalRequestedData is the data of approval.requested: a call (or an
// ask_user question) waits for a person.
type ApprovalRequestedData struct {
	ApprovalID string `json:"approval_id"`
	// Kind is call (a held tool call) or question (ask_user).
	Kind string `json:"kind"`
	Tool string `json:"tool"`
	Tier string `json:"tier"`
	// Why is the rule's or the escalation's reason for asking.
	Why       string    `json:"why"`
	ExpiresAt time.Time `json:"expires_at"`
	// Question is the question's text (questions only).
	Question string `json:"question,omitempty"`
	// Choices are the answers the question offers (questions only).
	Choices []string `json:"choices,omitempty"`
}

// ApprovalDecidedData is the data of approval.decided: who decided an
// approval, how and why.
type ApprovalDecidedData struct {
	ApprovalID string `json:"approval_id"`
	Kind       string `json:"kind"`
	Tool       string `json:"tool"`
	// Status is the decision (approved, denied, timed_out, answered, …).
	Status    string `json:"status"`
	DecidedBy string `json:"decided_by"`
	Reason    string `json:"reason"`
	// Edited is true when the call was approved with edited arguments.
	Edited bool `json:"edited"`
	// GrantID is the grant made with the decision ("" for none).
	GrantID string `json:"grant_id"`
	// Answer is a question's answer.
	Answer string `json:"answer"`
}

// ProgressData is the data of progress: a tool's or an agent's progress.
type ProgressData struct {
	Percent int    `json:"percent"`
	Message string `json:"message"`
	// Tool is the tool that reports, when a tool does (not report_progress).
	Tool string `json:"tool,omitempty"`
	// PromptID is the ComfyUI prompt the progress is of (ComfyUI tools only).
	PromptID string `json:"prompt_id,omitempty"`
}

// NotificationData is the data of notification: notify_user's message.
type NotificationData struct {
	Message string `json:"message"`
	// Level is info, warning or error.
	Level string `json:"level"`
}

// SessionCompactedData is the data of session.compacted: a session's older
// turns were summarized to fit its model's context window.
type SessionCompactedData struct {
	// N counts the session's compactions (1: its first).
	N       int    `json:"n"`
	Session string `json:"session"`
	// TokensBefore and TokensAfter are the estimated request tokens around the compaction.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	// FromSeq and ThroughSeq bound the stored messages the summary stands for.
	FromSeq    int `json:"from_seq"`
	ThroughSeq int `json:"through_seq"`
	// Messages counts the messages the summary replaced.
	Messages int `json:"messages"`
	// KeptTurns are the latest turns kept as they were.
	KeptTurns int    `json:"kept_turns"`
	Model     string `json:"model"`
}

// MemoryInjectedData is the data of memory.injected: the memory entries a
// session was given, and why.
type MemoryInjectedData struct {
	Project string `json:"project"`
	// Entries are the entries given, best first.
	Entries []MemoryEntryRef `json:"entries"`
	// Tokens are the memory block's estimated tokens.
	Tokens int `json:"tokens"`
}

// MemoryEntryRef is one memory entry a session was given and its ranking.
type MemoryEntryRef struct {
	ID int64 `json:"id"`
	// Score is relevance plus the recency bonus: the rank.
	Score float64 `json:"score"`
	// Relevance is the entry's normalized text rank against the task (0..1).
	Relevance float64 `json:"relevance"`
	RunID     string  `json:"run_id"`
	Agent     string  `json:"agent"`
	Scope     string  `json:"scope"`
}

// FlowLabelledData is the data of flow.labelled: a session read (or
// inherited) more untrusted content.
type FlowLabelledData struct {
	// Untrusted are the untrusted sources the session read.
	Untrusted []string `json:"untrusted"`
	// Private are the private sources it read, when any.
	Private []string `json:"private,omitempty"`
}

// FlowUntrustedWriteData is the data of flow.untrusted_write: a file written
// by a session that had read untrusted content, for a person to review.
type FlowUntrustedWriteData struct {
	Tool string `json:"tool"`
	// Path is the file written.
	Path string `json:"path"`
	// Untrusted are the untrusted sources the session had read.
	Untrusted []string `json:"untrusted"`
}

// MailboxDeadLetterData is the data of mailbox.dead_letter: a peer message
// that could not be delivered was dropped.
type MailboxDeadLetterData struct {
	MessageID string `json:"message_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	Reason    string `json:"reason"`
}

// FinishImageData is the data of postrun.finish_image: the outcome of a
// run's post-run finish_image upscale.
type FinishImageData struct {
	// Status is done, partial, failed or skipped (of all the pictures).
	Status string `json:"status"`
	// RunStatus is the run's final status.
	RunStatus string `json:"run_status"`
	// Service is the GPU service that upscaled, Holder its lease holder.
	Service  string `json:"service"`
	Holder   string `json:"holder"`
	LongSide int    `json:"long_side"`
	// Done, Failed and Skipped count the pictures by outcome.
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Skipped int `json:"skipped"`
	// Files are the pictures, each with its outcome.
	Files []store.FinishImage `json:"files"`
}

// Declared is one event type and its payload type.
type Declared struct {
	Type string
	// Payload is a zero value of the type's data.
	Payload any
}

// declared is every event type, in the order of a run's life.
var declared = []Declared{
	{RunQueued, RunQueuedData{}},
	{RunAdmitted, RunAdmittedData{}},
	{RunStarted, RunStartedData{}},
	{Delegated, DelegationCreatedData{}},
	{TurnStarted, TurnStartedData{}},
	{ModelAnswered, ModelAnsweredData{}},
	{ModelWaiting, ModelWaitingData{}},
	{ToolCall, ToolCallData{}},
	{ApprovalRequested, ApprovalRequestedData{}},
	{ApprovalDecided, ApprovalDecidedData{}},
	{Progress, ProgressData{}},
	{Notification, NotificationData{}},
	{SessionCompacted, SessionCompactedData{}},
	{MemoryInjected, MemoryInjectedData{}},
	{FlowLabelled, FlowLabelledData{}},
	{FlowUntrustedWrite, FlowUntrustedWriteData{}},
	{MailboxDeadLetter, MailboxDeadLetterData{}},
	{DelegationFinished, DelegationFinishedData{}},
	{RunCompleted, RunEndedData{}},
	{RunFailed, RunEndedData{}},
	{RunCancelled, RunEndedData{}},
	{PostRunFinishImage, FinishImageData{}},
}

var payloadTypes = func() map[string]reflect.Type {
	m := make(map[string]reflect.Type, len(declared))
	for _, d := range declared {
		m[d.Type] = reflect.TypeOf(d.Payload)
	}
	return m
}()

// Types returns every event type with its payload type, in the order of a
// run's life (a copy).
func Types() []Declared { return append([]Declared(nil), declared...) }

// CheckType refuses an event type that is not declared (Types): a stream
// client could not decode it.
func CheckType(typ string) error {
	if _, ok := payloadTypes[typ]; !ok {
		return fmt.Errorf("event type %q is not declared (events.Types)", typ)
	}
	return nil
}

// Check refuses an event whose type is not declared or whose data is not the
// type's payload struct (nor a pointer to one).
func Check(typ string, data any) error {
	if err := CheckType(typ); err != nil {
		return err
	}
	want := payloadTypes[typ]
	got := reflect.TypeOf(data)
	if got != nil && got.Kind() == reflect.Pointer {
		got = got.Elem()
	}
	if got != want {
		return fmt.Errorf("event %s: data is %v, not %v", typ, got, want)
	}
	return nil
}
