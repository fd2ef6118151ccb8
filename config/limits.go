package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aetherium-engine/aetherium/api"
)

// OperatorLimits are the configuration's operative limits beyond the API's own
// (which the api package adds), as GET /api/fleet shows them to an operator:
// the worker's concurrency and bounds, the fairness defaults and per-key
// limits, the model-rate governor's lines, the money budgets and the GPU
// services' capacities. Each has its key, its value as configured (or what
// its absence means) and why it exists.
func (c Config) OperatorLimits() []api.Limit {
	w := c.Worker.WithDefaults()
	f := c.Fairness.WithDefaults()
	orNone := func(n int, none string) string {
		if n <= 0 {
			return none
		}
		return strconv.Itoa(n)
	}
	weight, runs, turns := f.Policy("")
	out := []api.Limit{
		{Name: "worker.concurrency", Value: strconv.Itoa(w.Concurrency), Why: "tasks one worker process runs at once (asynq's concurrency): the fleet's capacity is this times the workers"},
		{Name: "worker.max_retry", Value: strconv.Itoa(w.MaxRetry), Why: "retries of a failing supervisor step or agent turn before its run fails (task_failed)"},
		{Name: "worker.circuit_breaker", Value: strconv.Itoa(w.CircuitBreaker), Why: "consecutive failed tool calls or unusable answers in one session before its run fails"},
		{Name: "worker.max_steps", Value: strconv.Itoa(w.MaxSteps), Why: "model calls per session: a backstop against loops"},
		{Name: "worker.max_delegations_per_run", Value: strconv.Itoa(w.MaxDelegationsPerRun), Why: "delegations one run may make"},
		{Name: "fairness.dispatch", Value: f.Dispatch, Why: "fair: tasks wait in their fairness key's line and are released as worker slots free; fifo: in submission order"},
		{Name: "fairness.aging", Value: f.Aging.String(), Why: "what one priority level is worth in waiting, so a low priority never starves"},
		{Name: "fairness.default.weight", Value: strconv.Itoa(weight), Why: "a fairness key's share of worker time against other keys with work waiting (keys not named in fairness.keys)"},
		{Name: "fairness.default.runs", Value: orNone(runs, "unlimited"), Why: "runs of one fairness key admitted at once; more wait in line, queued"},
		{Name: "fairness.default.turns", Value: orNone(turns, "unlimited"), Why: "tasks of one fairness key dispatched to workers at once"},
	}
	keys := make([]string, 0, len(f.Keys))
	for k := range f.Keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		weight, runs, turns := f.Policy(k)
		out = append(out, api.Limit{Name: fmt.Sprintf("fairness.keys[%q]", k),
			Value: fmt.Sprintf("weight %d, runs %s, turns %s", weight, orNone(runs, "unlimited"), orNone(turns, "unlimited")),
			Why:   "this fairness key's share and limits instead of fairness.default's"})
	}
	roles := make([]string, 0, len(f.MaxPriority))
	for r := range f.MaxPriority {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	for _, r := range roles {
		out = append(out, api.Limit{Name: fmt.Sprintf("fairness.max_priority[%q]", r), Value: strconv.Itoa(f.MaxPriority[r]),
			Why: "the highest priority a token with this role may submit with"})
	}
	g := c.LLM.GovernorConfig()
	gov := "on"
	if !g.Enabled {
		gov = "off"
	}
	out = append(out,
		api.Limit{Name: "llm.governor", Value: gov, Why: "model calls admitted against llm.limits, fleet-wide through Redis; off, a provider's 429 still parks the step"},
		api.Limit{Name: "llm.max_wait", Value: g.MaxWait.String(), Why: "how long a step may stay parked by rate limits before its run fails (rate_limited)"})
	for _, l := range c.LLM.Limits {
		model := l.Model
		if model == "" {
			model = "*"
		}
		var parts []string
		for _, p := range []struct {
			name string
			n    int
		}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"concurrency", l.Concurrency}, {"team_share %", l.TeamShare}, {"principal_share %", l.PrincipalShare}} {
			if p.n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", p.name, p.n))
			}
		}
		out = append(out, api.Limit{Name: "llm.limits[" + l.Provider + "/" + model + "]", Value: strings.Join(parts, ", "),
			Why: "the provider's rate limits, shared by every worker so the fleet stays under them"})
	}
	daily := c.LLM.Budgets.PrincipalDaily
	if daily == "" {
		daily = "none"
	} else {
		daily = "$" + daily
	}
	out = append(out, api.Limit{Name: "llm.budgets.principal_daily", Value: daily, Why: "what one principal's model calls may cost per day (UTC): its runs stop and its submits get 429 past it"})
	for _, s := range c.Streams.Leases.Services {
		out = append(out, api.Limit{Name: "streams.leases.services[" + s.Name + "].capacity", Value: strconv.Itoa(max(s.Capacity, 1)),
			Why: "runs that may hold this GPU service at once; others wait in its line"})
	}
	return out
}
