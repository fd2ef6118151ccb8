package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

var approvalStatuses = map[string]bool{"pending": true, "approved": true, "edited": true, "answered": true, "denied": true,
	"timed_out": true, "cancelled": true}

var approvalKinds = map[string]bool{store.KindCall: true, store.KindQuestion: true}

func (s *Server) listApprovals(c *fiber.Ctx) error {
	status := c.Query("status")
	if status != "" && !approvalStatuses[status] {
		return badRequest("status", "status %q is not one of pending, approved, edited, answered, denied, timed_out, cancelled", status)
	}
	kind := c.Query("kind")
	if kind != "" && !approvalKinds[kind] {
		return badRequest("kind", "kind %q is not call or question", kind)
	}
	decided := false
	switch c.Query("decided") {
	case "", "false":
	case "true":
		decided = true
	default:
		return badRequest("decided", "decided is true or false")
	}
	limit, err := queryLimit(c, 100, 1000)
	if err != nil {
		return err
	}
	owner := decisionScope(c)
	list, err := s.d.Store.ListApprovalsOf(c.UserContext(), store.ApprovalFilter{Owner: owner, Status: status, RunID: c.Query("run_id"),
		Kind: kind, Decided: decided, Limit: limit})
	if err != nil {
		return err
	}
	return c.JSON(approvalList{Approvals: list})
}

// decisionScope is the owner filter of the approvals and grants listings: the
// on-call approver decides for any run, so it lists them all.
func decisionScope(c *fiber.Ctx) string {
	if hasRole(c, RoleApprove) {
		return ""
	}
	return ownerScope(c)
}

// errNoApprovals answers the decision routes of an API without a permission gate.
var errNoApprovals = &Error{Status: http.StatusNotImplemented, Message: "approvals are not enabled (no permission gate)"}

type approvalList struct {
	Approvals []store.Approval `json:"approvals"`
}

// getApproval shows one approval as the approver decides on it: the view (parsed
// commands or URL, or the question), the masked arguments and the hash the
// decision binds to.
func (s *Server) getApproval(c *fiber.Ctx) error {
	id, err := approvalID(c)
	if err != nil {
		return err
	}
	notFound := &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("approval %s not found", id)}
	appr, err := s.d.Store.GetApproval(c.UserContext(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	// The on-call approver and read_all see every approval; anyone else only those
	// of its own runs, and another's answers exactly like a missing one.
	if !hasRole(c, RoleApprove) && !seesAllRuns(c) {
		r, err := s.d.Store.GetRun(c.UserContext(), appr.RunID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err != nil || r.Owner != principal(c) {
			return notFound
		}
	}
	return c.JSON(appr)
}

func approvalID(c *fiber.Ctx) (string, error) {
	id := c.Params("id")
	if !strings.HasPrefix(id, "apr_") || len(id) > 64 {
		return "", badRequest("id", "approval id %q is not valid", id)
	}
	return id, nil
}

// decisionRequest is the body of approve and deny: the reason (for a denial, the
// feedback the agent reads), and for approve an optional grant.
type decisionRequest struct {
	// Reason is shown to the agent with a rejection, and kept with the decision.
	Reason string `json:"reason,omitempty"`
	// Grant approves this call and, until it expires, the matching calls of the
	// scope (approve only).
	Grant *store.GrantRequest `json:"grant,omitempty"`
}

// editRequest is the body of edit.
type editRequest struct {
	// Args are the arguments the call runs with instead of the model's: a JSON
	// object, at most 256 KiB. The edited call passes the whole gate again.
	Args   json.RawMessage `json:"args"`
	Reason string          `json:"reason,omitempty"`
}

// answerRequest is the body of answer.
type answerRequest struct {
	// Answer answers an ask_user question: one of its choices unless it allows
	// others; at most 2,000 bytes.
	Answer string `json:"answer"`
}

// ApprovalDecider records a human's decision on a pending approval and resumes
// the call that waits for it (security.Approvals, the gate's side). Its errors
// wrap store.ErrNotFound, ErrDecided, ErrExpired, ErrRunClosed, ErrForbidden,
// ErrWrongKind, ErrGrantClosed or are a *store.BadDecisionError.
type ApprovalDecider interface {
	Apply(ctx context.Context, id string, d store.HumanDecision) (store.Approval, error)
	ListGrants(ctx context.Context, f store.GrantFilter) ([]store.Grant, error)
	GetGrant(ctx context.Context, id string) (store.Grant, error)
	RevokeGrant(ctx context.Context, id, by string, mayApprove bool) (store.Grant, error)
	ConfirmGrant(ctx context.Context, id, by string, mayApprove bool) (store.Grant, error)
	// PolicyRevision is the revision of the permissions in force.
	PolicyRevision() string
}

// decide handles approve, deny, edit and answer: one human decision, recorded
// once, after the decider's checks (role, self-approval, kind, arguments).
func (s *Server) decide(verb string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if s.d.Approvals == nil {
			return errNoApprovals
		}
		id, err := approvalID(c)
		if err != nil {
			return err
		}
		d := store.HumanDecision{Verb: verb, By: principal(c), MayApprove: hasRole(c, RoleApprove), MayGrantBroad: hasOwnRole(c, RoleGrantBroad)}
		switch verb {
		case store.VerbEdit:
			var req editRequest
			if err := decode(c.Body(), &req); err != nil {
				return err
			}
			d.Args, d.Reason = req.Args, req.Reason
		case store.VerbAnswer:
			var req answerRequest
			if err := decode(c.Body(), &req); err != nil {
				return err
			}
			d.Answer = req.Answer
		default:
			var req decisionRequest
			if len(c.Body()) > 0 {
				if err := decode(c.Body(), &req); err != nil {
					return err
				}
			}
			if req.Grant != nil && verb != store.VerbApprove {
				return badRequest("grant", "only an approval makes a grant")
			}
			d.Reason, d.Grant = req.Reason, req.Grant
		}
		appr, err := s.d.Approvals.Apply(c.UserContext(), id, d)
		if err != nil {
			return decisionError(id, err)
		}
		return c.JSON(appr)
	}
}

// decisionError maps the decider's errors to statuses.
func decisionError(id string, err error) error {
	var bad *store.BadDecisionError
	switch {
	case errors.As(err, &bad):
		return badRequest(bad.Field, "%s", bad.Reason)
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("%s not found", id)}
	case errors.Is(err, store.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Message: err.Error()}
	case errors.Is(err, store.ErrDecided), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrRunClosed),
		errors.Is(err, store.ErrWrongKind), errors.Is(err, store.ErrGrantClosed):
		return &Error{Status: http.StatusConflict, Field: "id", Message: err.Error()}
	}
	return err
}

var grantStatuses = map[string]bool{store.GrantActive: true, store.GrantExpired: true, store.GrantRevoked: true, store.GrantSuspended: true}

type grantList struct {
	Grants []store.Grant `json:"grants"`
	// PolicyRevision is the revision of the permissions in force: a grant made
	// under another is suspended until confirmed.
	PolicyRevision string `json:"policy_revision"`
}

// listGrants lists grants, newest first: an approver every grant, anyone else
// those that cover its own runs.
func (s *Server) listGrants(c *fiber.Ctx) error {
	if s.d.Approvals == nil {
		return errNoApprovals
	}
	status := c.Query("status")
	if status != "" && !grantStatuses[status] {
		return badRequest("status", "status %q is not one of active, expired, revoked, suspended", status)
	}
	limit, err := queryLimit(c, 100, 1000)
	if err != nil {
		return err
	}
	owner := decisionScope(c)
	gs, err := s.d.Approvals.ListGrants(c.UserContext(), store.GrantFilter{Owner: owner, Status: status, Limit: limit})
	if err != nil {
		return err
	}
	return c.JSON(grantList{Grants: gs, PolicyRevision: s.d.Approvals.PolicyRevision()})
}

func grantID(c *fiber.Ctx) (string, error) {
	id := c.Params("id")
	if !strings.HasPrefix(id, "grt_") || len(id) > 64 {
		return "", badRequest("id", "grant id %q is not valid", id)
	}
	return id, nil
}

// changeGrant handles revoke and confirm.
func (s *Server) changeGrant(confirm bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if s.d.Approvals == nil {
			return errNoApprovals
		}
		id, err := grantID(c)
		if err != nil {
			return err
		}
		change := s.d.Approvals.RevokeGrant
		if confirm {
			change = s.d.Approvals.ConfirmGrant
		}
		g, err := change(c.UserContext(), id, principal(c), hasRole(c, RoleApprove))
		if err != nil {
			return decisionError(id, err)
		}
		return c.JSON(g)
	}
}

func (s *Server) runAudit(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	rows, err := s.d.Store.RunAudit(c.UserContext(), r.ID, 5000)
	if err != nil {
		return err
	}
	return c.JSON(auditList{Audit: rows})
}

type auditList struct {
	Audit []store.AuditRow `json:"audit"`
}
