package store

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Decision verbs: what a human does with an approval (HumanDecision.Verb).
const (
	VerbApprove = "approve"
	VerbDeny    = "deny"
	VerbEdit    = "edit"
	VerbAnswer  = "answer"
)

var (
	// ErrForbidden: the principal may not make this decision (not an approver,
	// its own run, not the run's owner).
	ErrForbidden = errors.New("not allowed to decide")
	// ErrWrongKind: a call's verb on a question, or an answer to a call.
	ErrWrongKind = errors.New("wrong decision for this kind of approval")
)

// HumanDecision is one human decision on an approval as the API, the CLI, the
// Studio and MCP send it; security.Approvals.Apply checks and records it.
type HumanDecision struct {
	// Verb is VerbApprove, VerbDeny, VerbEdit or VerbAnswer.
	Verb string
	// By is the deciding principal.
	By     string
	Reason string
	// Args are an edit's new arguments (VerbEdit).
	Args json.RawMessage
	// Answer answers a question (VerbAnswer).
	Answer string
	// Grant approves with a grant (VerbApprove).
	Grant *GrantRequest
	// MayApprove: By holds the approve role. MayGrantBroad: the grant_broad role.
	MayApprove, MayGrantBroad bool
	// InClient: By decides a call of its own MCP run in its MCP client, because
	// the profile says so (mcp approve_in_client): no approve role and no
	// allow_self_approval are needed, only By owning the run; the decision is
	// recorded as "By (mcp client)".
	InClient bool
}

// GrantRequest is what an approver asks for when approving with a grant.
type GrantRequest struct {
	// Scope is GrantScopeRun, GrantScopeProject or GrantScopeTeam.
	Scope string `json:"scope"`
	// Match is GrantExact, GrantCommand or GrantURLPrefix.
	Match string `json:"match"`
	// Pattern is the command words (a final * for any further arguments) or the
	// URL prefix; unused for exact.
	Pattern string `json:"pattern,omitempty"`
	// TTL is a Go duration ("30m"); one hour when empty.
	TTL string `json:"ttl,omitempty"`
}

// BadDecisionError is a decision the human must fix (HTTP 400): Field names
// what is wrong.
type BadDecisionError struct {
	Field, Reason string
}

func (e *BadDecisionError) Error() string { return e.Field + ": " + e.Reason }

// BadDecision builds a *BadDecisionError.
func BadDecision(field, format string, a ...any) error {
	return &BadDecisionError{Field: field, Reason: fmt.Sprintf(format, a...)}
}
