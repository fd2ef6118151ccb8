package api

import (
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/store"
)

// dollars is an amount of picodollars (llm.Money) as a decimal string of
// dollars with six decimals, exact to the microdollar ("" for 0 in an
// omitempty budget reads as none; a cost of 0 is "0.000000").
func dollars(pico int64) string {
	return strings.TrimPrefix(llm.Money(pico).String(), "$")
}

// costReport is what a run's or a project's model calls cost, by model.
type costReport struct {
	// TotalUSD is the sum of the lines, in dollars (six decimals).
	TotalUSD string `json:"total_usd"`
	// Total is the same in picodollars (10⁻¹² USD), exact.
	Total int64 `json:"total_picousd"`
	// Unpriced counts calls of models the price table has no price for: their
	// cost is missing from the total.
	Unpriced int64      `json:"unpriced_calls"`
	Lines    []costLine `json:"lines"`
}

type costLine struct {
	store.CostLine
	CostUSD string `json:"cost_usd"`
}

func newCostReport(lines []store.CostLine) costReport {
	r := costReport{Lines: make([]costLine, 0, len(lines))}
	for _, l := range lines {
		r.Total += l.Cost
		r.Unpriced += l.Unpriced
		r.Lines = append(r.Lines, costLine{CostLine: l, CostUSD: dollars(l.Cost)})
	}
	r.TotalUSD = dollars(r.Total)
	return r
}

func (s *Server) runCosts(c *fiber.Ctx) error {
	r, err := s.loadRun(c)
	if err != nil {
		return err
	}
	lines, err := s.d.Store.Costs(c.UserContext(), store.CostScope{RunID: r.ID})
	if err != nil {
		return err
	}
	return c.JSON(newCostReport(lines))
}

func (s *Server) projectCosts(c *fiber.Ctx) error {
	p, err := s.projectFor(c, c.Params("slug"))
	if err != nil {
		return err
	}
	var since time.Time
	if v := c.Query("since"); v != "" {
		if since, err = time.Parse(time.DateOnly, v); err != nil {
			return badRequest("since", "since %q: want a date, YYYY-MM-DD", v)
		}
	}
	lines, err := s.d.Store.Costs(c.UserContext(), store.CostScope{ProjectID: p.ID, Since: since})
	if err != nil {
		return err
	}
	return c.JSON(newCostReport(lines))
}
