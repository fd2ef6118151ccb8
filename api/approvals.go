package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

var approvalStatuses = map[string]bool{"pending": true, "approved": true, "denied": true, "timed_out": true, "cancelled": true}

func (s *Server) listApprovals(c *fiber.Ctx) error {
	status := c.Query("status")
	if status != "" && !approvalStatuses[status] {
		return badRequest("status", "status %q is not one of pending, approved, denied, timed_out, cancelled", status)
	}
	runID := c.Query("run_id")
	limit, err := queryLimit(c, 100, 1000)
	if err != nil {
		return err
	}
	// The on-call approver decides approvals of any run, so it lists them all.
	owner := ownerScope(c)
	if hasRole(c, RoleApprove) {
		owner = ""
	}
	list, err := s.d.Store.ListApprovalsOf(c.UserContext(), owner, status, runID, limit)
	if err != nil {
		return err
	}
	return c.JSON(approvalList{Approvals: list})
}

type approvalList struct {
	Approvals []store.Approval `json:"approvals"`
}

// getApproval shows one approval as the approver decides on it: the view (parsed
// commands or URL), the masked arguments and the hash the decision binds to.
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

type decisionRequest struct {
	Reason string `json:"reason"`
}

// ApprovalDecider records a human's decision on a pending approval and resumes
// the call that waits for it (security.Approvals, the gate's side). Its errors
// wrap store.ErrNotFound, ErrDecided, ErrExpired or ErrRunClosed.
type ApprovalDecider interface {
	Decide(ctx context.Context, id string, approve bool, by, reason string) (store.Approval, error)
}

func (s *Server) decide(approve bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if s.d.Approvals == nil {
			return &Error{Status: http.StatusNotImplemented, Message: "approvals are not enabled (no permission gate)"}
		}
		id, err := approvalID(c)
		if err != nil {
			return err
		}
		var req decisionRequest
		if len(c.Body()) > 0 {
			if err := decode(c.Body(), &req); err != nil {
				return err
			}
		}
		if len(req.Reason) > 2000 {
			return badRequest("reason", "reason is over 2000 bytes")
		}
		appr, err := s.d.Approvals.Decide(c.UserContext(), id, approve, principal(c), req.Reason)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("approval %s not found", id)}
		case errors.Is(err, store.ErrDecided), errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrRunClosed):
			return &Error{Status: http.StatusConflict, Field: "id", Message: err.Error()}
		case err != nil:
			return err
		}
		return c.JSON(appr)
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
