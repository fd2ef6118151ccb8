package replay

// Report is a replay's answer: every step judged again, and the first one
// where the engine now decides differently from the record.
type Report struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	// Sessions and Steps count what was replayed; Steps are tool calls and
	// final answers, in session order (the supervisor first, then the
	// delegations' sessions as they were created).
	Sessions int `json:"sessions"`
	Steps    int `json:"steps"`
	// ToolExecutions is how many tools ran during the replay: always 0 (a call
	// the gate lets through is served from the record). ServedFromRecord
	// counts those calls.
	ToolExecutions   int `json:"tool_executions"`
	ServedFromRecord int `json:"served_from_record"`
	// Diverged is true when some step differs; Divergence is the first.
	Diverged   bool        `json:"diverged"`
	Divergence *Divergence `json:"divergence,omitempty"`
	// Differing counts the steps that differ (the first and those after it).
	Differing int `json:"differing"`
	// FinalHash is the state hash of the replay's last step (empty without
	// steps); equal replays of equal records end on equal hashes.
	FinalHash string `json:"final_hash,omitempty"`
	// Notes say what the replay could not judge (a compacted session's
	// summarized turns, calls the record left unanswered).
	Notes []string `json:"notes,omitempty"`
	// StepList is every step, recorded and replayed side by side (verbose).
	StepList []Step `json:"step_list,omitempty"`
}

// Step kinds.
const (
	// KindCall is one tool call judged by the gate.
	KindCall = "call"
	// KindAnswer is a final answer (no tool calls) judged by the reply checks.
	KindAnswer = "answer"
	// KindLimit is the engine's limits on the session: the circuit breaker,
	// max_steps.
	KindLimit = "limit"
)

// Step is one decision of a session, as recorded and as replayed.
type Step struct {
	// Index numbers the run's steps from 1 in replay order.
	Index   int    `json:"index"`
	Kind    string `json:"kind" jsonschema:"enum=call,enum=answer,enum=limit"`
	Session string `json:"session"`
	Agent   string `json:"agent"`
	Role    string `json:"role"`
	// Turn is the session's model answer the step belongs to, from 1.
	Turn   int    `json:"turn"`
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"call_id,omitempty"`
	// Recorded and Replayed are the two sides; Same reports them equal.
	Recorded Side `json:"recorded"`
	Replayed Side `json:"replayed"`
	Same     bool `json:"same"`
	// RecordedHash and ReplayedHash are the session's state hashes after the
	// step (history so far and decisions): equal exactly when the session is
	// the same up to and including this step.
	RecordedHash string `json:"recorded_hash"`
	ReplayedHash string `json:"replayed_hash"`
}

// Side is one side of a step: what the engine decided.
type Side struct {
	// Decision is a call's outcome (allowed, denied, error, unknown, pending: it
	// would wait for a human), an answer's (accepted, sent_back) or a limit's
	// (continued, or the reason the session ends: circuit_breaker, max_steps).
	Decision string `json:"decision"`
	// Layer is the gate layer (or "cap") that refused a denied call.
	Layer string `json:"layer,omitempty"`
	// Error is the refusal's or the tool's error, or why an answer was sent
	// back.
	Error string `json:"error,omitempty"`
	// Delegations is how many delegations the call made (delegate,
	// spawn_subagents, code_review).
	Delegations int `json:"delegations,omitempty"`
}

// Same reports two sides equal where it counts: the decision, the layer and
// the delegations (an error's wording may change without the engine deciding
// differently).
func (s Side) Same(o Side) bool {
	return s.Decision == o.Decision && s.Layer == o.Layer && s.Delegations == o.Delegations
}

// Divergence is the first step that differs, both sides shown.
type Divergence struct {
	Step
	// What says in words what differs.
	What string `json:"what"`
}
