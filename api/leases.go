package api

import (
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/lease"
)

// LeasesHandler serves GET /api/leases: every configured GPU service with its
// holders (fencing tokens, expiries), its waiters in queue order and its last
// token (public ordering values: a grant's secret, which authorizes it at the
// fencing proxy, is never read here); ?events=N (0..1000, default 0) adds the N latest lease events, oldest
// first. A nil manager (no GPU services configured) answers an empty list.
func LeasesHandler(m *lease.Manager) fiber.Handler { return LeasesHandlerScoped(m, nil) }

// HolderFilter returns which of holders (run ids) the caller may see; nil means all.
type HolderFilter func(c *fiber.Ctx, holders []string) (map[string]bool, error)

// HiddenHolder replaces the run id of a holder, waiter or event the caller may not
// see (and its token is zeroed): the service's load stays visible, whose run it
// is and which grant it holds do not.
const HiddenHolder = "(hidden)"

// LeasesHandlerScoped is LeasesHandler hiding the run ids visible rejects.
func LeasesHandlerScoped(m *lease.Manager, visible HolderFilter) fiber.Handler {
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
			return c.JSON(leaseSnapshot{Services: []lease.ServiceState{}})
		}
		states, err := m.Snapshot(c.UserContext())
		if err != nil {
			return &Error{Status: http.StatusServiceUnavailable, Message: "reading leases: " + err.Error()}
		}
		var evs []lease.Event
		if n > 0 {
			if evs, err = m.RecentEvents(c.UserContext(), int64(n)); err != nil {
				return &Error{Status: http.StatusServiceUnavailable, Message: "reading lease events: " + err.Error()}
			}
		}
		if visible != nil {
			if err := hideHolders(c, visible, states, evs); err != nil {
				return err
			}
		}
		return c.JSON(leaseSnapshot{Services: states, Events: evs})
	}
}

type leaseSnapshot struct {
	Services []lease.ServiceState `json:"services"`
	// Events are the latest lease events, oldest first, when ?events= asked for some.
	Events []lease.Event `json:"events,omitempty"`
}

func hideHolders(c *fiber.Ctx, visible HolderFilter, states []lease.ServiceState, evs []lease.Event) error {
	var ids []string
	for _, st := range states {
		for _, h := range st.Holders {
			ids = append(ids, h.Holder)
		}
		for _, w := range st.Waiters {
			ids = append(ids, w.Holder)
		}
	}
	for _, e := range evs {
		ids = append(ids, e.Holder)
	}
	ok, err := visible(c, ids)
	if err != nil || ok == nil {
		return err
	}
	for i := range states {
		for j := range states[i].Holders {
			if !ok[states[i].Holders[j].Holder] {
				// The grant's token goes too: it names which grant is whose
				// (the proxy never takes it alone, but nobody else needs it).
				states[i].Holders[j].Holder, states[i].Holders[j].Token = HiddenHolder, 0
			}
		}
		for j := range states[i].Waiters {
			if !ok[states[i].Waiters[j].Holder] {
				states[i].Waiters[j].Holder = HiddenHolder
			}
		}
	}
	for i := range evs {
		if evs[i].Holder != "" && !ok[evs[i].Holder] {
			evs[i].Holder, evs[i].Token = HiddenHolder, 0
		}
	}
	return nil
}

// visibleHolders lets a caller who does not read every run see only its own
// runs among the lease holders.
func (s *Server) visibleHolders(c *fiber.Ctx, holders []string) (map[string]bool, error) {
	if seesAllRuns(c) {
		return nil, nil
	}
	runs := make([]string, len(holders))
	for i, h := range holders {
		runs[i] = lease.HolderRun(h)
	}
	owners, err := s.d.Store.RunOwners(c.UserContext(), runs)
	if err != nil {
		return nil, err
	}
	me := principal(c)
	ok := make(map[string]bool, len(holders))
	for _, h := range holders {
		owner, found := owners[lease.HolderRun(h)]
		ok[h] = found && owner == me
	}
	return ok, nil
}
