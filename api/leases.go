package api

import (
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/lease"
)

// LeasesHandler serves GET /api/leases: every configured GPU service with its
// holders (fencing tokens, expiries), its waiters in queue order and its last
// token; ?events=N (0..1000, default 0) adds the N latest lease events, oldest
// first. A nil manager (no GPU services configured) answers an empty list.
func LeasesHandler(m *lease.Manager) fiber.Handler {
	return func(c *fiber.Ctx) error {
		n := 0
		if q := c.Query("events"); q != "" {
			v, err := strconv.Atoi(q)
			if err != nil || v < 0 || v > 1000 {
				return badRequest("events", "events must be a number from 0 to 1000, got %q", q)
			}
			n = v
		}
		if m == nil {
			return c.JSON(fiber.Map{"services": []lease.ServiceState{}})
		}
		states, err := m.Snapshot(c.UserContext())
		if err != nil {
			return &Error{Status: http.StatusServiceUnavailable, Message: "reading leases: " + err.Error()}
		}
		body := fiber.Map{"services": states}
		if n > 0 {
			evs, err := m.RecentEvents(c.UserContext(), int64(n))
			if err != nil {
				return &Error{Status: http.StatusServiceUnavailable, Message: "reading lease events: " + err.Error()}
			}
			body["events"] = evs
		}
		return c.JSON(body)
	}
}
