package api

import (
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/store"
)

// AuditPage is the answer of GET /api/audit: a page of rows and the cursor of the next.
type AuditPage struct {
	Audit []store.AuditRow `json:"audit"`
	// NextBefore is the before= of the next (older) page; 0 on the last one.
	NextBefore int64 `json:"next_before"`
}

var (
	auditDecisions = map[string]bool{"allowed": true, "denied": true, "error": true, "timed_out": true, "unknown": true}
	auditTiers     = map[string]bool{"standard": true, "elevated": true, "restricted": true}
)

// listAudit serves the audit across the caller's runs (every run's with
// read_all), newest first, filtered by run, agent, tool, decision and tier.
func (s *Server) listAudit(c *fiber.Ctx) error {
	f := store.AuditFilter{Owner: ownerScope(c), RunID: c.Query("run_id"), Agent: c.Query("agent"), Tool: c.Query("tool"),
		Decision: c.Query("decision"), Tier: c.Query("tier"), Limit: 200}
	if f.RunID != "" {
		if _, err := uuid.Parse(f.RunID); err != nil {
			return badRequest("run_id", "run_id %q is not a UUID", f.RunID)
		}
	}
	if f.Decision != "" && !auditDecisions[f.Decision] {
		return badRequest("decision", "decision %q is not one of allowed, denied, error, timed_out, unknown", f.Decision)
	}
	if f.Tier != "" && !auditTiers[f.Tier] {
		return badRequest("tier", "tier %q is not one of standard, elevated, restricted", f.Tier)
	}
	limit, err := queryLimit(c, f.Limit, 1000)
	if err != nil {
		return err
	}
	f.Limit = limit
	if b := c.Query("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			return badRequest("before", "before must be a positive audit row id")
		}
		f.Before = n
	}
	rows, err := s.d.Store.ListAudit(c.UserContext(), f)
	if err != nil {
		return err
	}
	out := AuditPage{Audit: rows}
	if len(rows) == f.Limit {
		out.NextBefore = rows[len(rows)-1].ID
	}
	return c.JSON(out)
}
