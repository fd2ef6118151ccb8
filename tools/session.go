package tools

import "context"

// Session is who makes a tool call, for which run, with what rights. It rides
// the call itself (Call.Session), set once where the call is built.
type Session struct {
	RunID     string
	SessionID string
	Team      string
	Agent     string
	Role      string // supervisor | worker | subagent
	// Owner is the principal who submitted the run: a human's scoped grant
	// covers only that principal's runs.
	Owner string
	// TeamSource is how the run's team was submitted: TeamSourceTemplate (a shipped
	// template, by name) or TeamSourceInline (a team object in the request, named by
	// its submitter). Permission rules match it (match.source).
	TeamSource string
	// Workspace is the absolute path of the run's workspace directory.
	Workspace string
	// Access is the node's resolved permissions (groups and visible tools).
	Access Access
	// Peers are the names of every agent of the team (send_message_to targets).
	Peers []string
	// AllowedDomains is the team's egress allowlist.
	AllowedDomains []string
	// EgressPorts are the ports beyond 80/443 the team's sandbox may reach.
	EgressPorts []int
	// EgressDenyPrivate is a team's egress.private: deny (it can only tighten the
	// deployment's security.egress.private).
	EgressDenyPrivate bool
	// ToolDefaults are the team's per-tool argument defaults, merged under the
	// model's own arguments before validation.
	ToolDefaults map[string]map[string]any
	// Project is the id of the run's project (never its slug, which a later
	// project may reuse): its knowledge is in the session's
	// knowledge scope and write_knowledge indexes into it. Empty: no project
	// knowledge (write_knowledge still saves the file).
	Project string
	// KnowledgePacks are the team's knowledge packs (template key
	// knowledge.packs), the rest of the knowledge scope.
	KnowledgePacks []string
	// ImageModel is the team's image_model ("" or "sd", "qwen"): which GPU
	// service and workflow comfyui_generate uses.
	ImageModel string
	// Coordinator carries the run-level effects orchestration and comms tools need.
	Coordinator Coordinator
	// Todos is the agent's todo list as the live step holds it (see Todos):
	// nil outside a step (the MCP server's runner, a replay), where a tool reads
	// and writes the store itself.
	Todos *Todos
	// Label is what the session has read so far (private and untrusted sources):
	// the gate's flow rules judge a call by it. The worker keeps it current.
	Label *Label
}

// Team sources (Session.TeamSource).
const (
	TeamSourceTemplate = "template"
	TeamSourceInline   = "inline"
)

// TeamSourceOf is the source of a run's team from the template name the run was
// submitted under ("" for an inline team).
func TeamSourceOf(template string) string {
	if template == "" {
		return TeamSourceInline
	}
	return TeamSourceTemplate
}

// Coordinator is implemented by the worker for the session being stepped.
type Coordinator interface {
	// Delegate records delegations for one tool call and enqueues their turns. The
	// call's result arrives later; the session waits for it.
	Delegate(ctx context.Context, callID string, reqs []DelegateRequest) error
	// Reply finishes the run with a final answer.
	Reply(ctx context.Context, message string) error
	// Emit records a run event; key makes it idempotent under redelivery. typ
	// is a declared event type (events.Types) and data its payload struct.
	Emit(ctx context.Context, key, typ string, data any) error
}

// DelegateRequest is one task handed to one agent.
type DelegateRequest struct {
	Agent string
	Task  string
	// Tools, when set, is the subagent's allowlist (already capped by the parent's).
	Tools []string
	// Review makes the delegation code_review's reviewer: no tools, the review
	// prompt, and a final answer validated against package review's schema.
	Review bool
}
