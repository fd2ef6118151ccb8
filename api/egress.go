package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/store"
)

// runEgress lists the connections the sandbox egress proxy allowed or refused for a
// run (GET /api/runs/{id}/egress).
func (s *Server) runEgress(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	rows, err := s.d.Store.RunEgress(c.UserContext(), r.ID, 5000)
	if err != nil {
		return err
	}
	return c.JSON(egressList{Egress: rows})
}

type egressList struct {
	Egress []store.EgressConnection `json:"egress"`
}
