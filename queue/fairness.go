package queue

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aetherium-engine/aetherium/queue/fair"
)

// Defaults of Fairness.
const (
	// DefaultAging is what one priority level is worth in waiting.
	DefaultAging = fair.DefaultAging
	// DefaultWeight is a key's weight when fairness.keys does not name it.
	DefaultWeight = 1
	// MaxKeyBytes bounds a fairness key: a longer one (a hostile template
	// variable) is replaced by its hash (Key), so keys stay small in
	// PostgreSQL and Redis whatever a submitter sends.
	MaxKeyBytes = fair.MaxKey
)

// Priorities of a run and of its tasks (the same numbers as store's).
const (
	MinPriority     = fair.MinPriority
	MaxPriority     = fair.MaxPriority
	DefaultPriority = 3
)

// Fairness is how the fleet shares its workers between tenants (YAML
// `fairness:`, issue 39). Every run has a fairness key (its owner by default; a
// team chooses otherwise with fairness_key) and a priority. Runs of a key over
// its Runs limit are accepted and wait their turn (admission); the tasks of
// admitted runs — supervisor steps and agent turns alike — are dispatched to the
// workers by weighted fair queuing across keys (queue/fair), highest priority
// first with aging.
type Fairness struct {
	// Aging is what one priority level is worth in waiting: a run or task of
	// priority p+1 goes ahead of one of priority p submitted less than Aging
	// before it, and a lower priority gains one level per Aging it waits, so
	// none starves. Default DefaultAging.
	Aging time.Duration `yaml:"aging"`
	// Default is the policy of every key Keys does not name.
	Default KeyPolicy `yaml:"default"`
	// Keys are policies by fairness key: a principal's name (the default key),
	// "project:<slug>", "team:<name>" or "var:<name>=<value>".
	Keys map[string]KeyPolicy `yaml:"keys"`
	// MaxPriority is the highest priority each role may submit with: a
	// principal gets the highest of its roles named here, and up to 5 when
	// none of its roles is named.
	MaxPriority map[string]int `yaml:"max_priority"`
	// Dispatch is "fair" (the default: tasks wait in queue/fair's lines and
	// are released to asynq as worker slots free up) or "fifo" (tasks go to
	// asynq at once, in submission order: the fleet before issue 39; run
	// limits still hold).
	Dispatch string `yaml:"dispatch"`
}

// KeyPolicy is one fairness key's share and limits.
type KeyPolicy struct {
	// Weight is the key's share of worker time against other keys with work
	// waiting (3 against 1 gets three turns for each of the other's). At least
	// 1; unset is DefaultWeight (0 or negative is refused at load).
	Weight *int `yaml:"weight"`
	// Runs is how many runs of the key may be admitted at once, fleet-wide (0:
	// no limit). A run over it is accepted and waits in `queued` with its place
	// in line shown.
	Runs int `yaml:"runs"`
	// Turns is how many of the key's tasks (supervisor steps, agent turns) may
	// be dispatched to workers at once, fleet-wide (0: no limit).
	Turns int `yaml:"turns"`
}

// Dispatch modes.
const (
	DispatchFair = "fair"
	DispatchFIFO = "fifo"
)

// WithDefaults returns f with every unset field at its default.
func (f Fairness) WithDefaults() Fairness {
	f.Aging = cmp.Or(f.Aging, DefaultAging)
	f.Dispatch = cmp.Or(f.Dispatch, DispatchFair)
	return f
}

// Validate reports every invalid field, naming it as in the YAML.
func (f Fairness) Validate() error {
	var errs []error
	if f.Aging < 0 {
		errs = append(errs, fmt.Errorf("fairness.aging: must not be negative, got %s", f.Aging))
	}
	if f.Dispatch != "" && f.Dispatch != DispatchFair && f.Dispatch != DispatchFIFO {
		errs = append(errs, fmt.Errorf("fairness.dispatch: %q is not fair or fifo", f.Dispatch))
	}
	errs = append(errs, f.Default.validate("fairness.default"))
	keys := make([]string, 0, len(f.Keys))
	for k := range f.Keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" || len(k) > MaxKeyBytes {
			errs = append(errs, fmt.Errorf("fairness.keys: a key must be 1-%d bytes, got %d", MaxKeyBytes, len(k)))
			continue
		}
		errs = append(errs, f.Keys[k].validate(fmt.Sprintf("fairness.keys[%q]", k)))
	}
	roles := make([]string, 0, len(f.MaxPriority))
	for r := range f.MaxPriority {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, r := range roles {
		if p := f.MaxPriority[r]; p < MinPriority || p > MaxPriority {
			errs = append(errs, fmt.Errorf("fairness.max_priority[%q]: must be %d-%d, got %d", r, MinPriority, MaxPriority, p))
		}
	}
	return errors.Join(errs...)
}

func (p KeyPolicy) validate(where string) error {
	var errs []error
	if p.Weight != nil && *p.Weight <= 0 {
		errs = append(errs, fmt.Errorf("%s.weight: must be at least 1, got %d", where, *p.Weight))
	}
	if p.Runs < 0 {
		errs = append(errs, fmt.Errorf("%s.runs: must be 0 (no limit) or positive, got %d", where, p.Runs))
	}
	if p.Turns < 0 {
		errs = append(errs, fmt.Errorf("%s.turns: must be 0 (no limit) or positive, got %d", where, p.Turns))
	}
	return errors.Join(errs...)
}

// Policy is key's policy: its entry in Keys, else Default, with the weight
// resolved.
func (f Fairness) Policy(key string) (weight, runs, turns int) {
	p, ok := f.Keys[key]
	if !ok {
		p = f.Default
	}
	weight = DefaultWeight
	if p.Weight != nil {
		weight = *p.Weight
	} else if f.Default.Weight != nil {
		weight = *f.Default.Weight
	}
	return weight, p.Runs, p.Turns
}

// MaxPriorityOf is the highest priority a principal with roles may submit
// with: the highest MaxPriority of its roles that are named there; MaxPriority
// when none is (so naming `submit: 3` bounds submitters without bounding an
// admin, whose role is not named).
func (f Fairness) MaxPriorityOf(roles []string) int {
	best := 0
	for _, r := range roles {
		if p, ok := f.MaxPriority[r]; ok {
			best = max(best, p)
		}
	}
	if best == 0 {
		return MaxPriority
	}
	return best
}

// Key is the form a fairness key is kept in, in PostgreSQL as in the
// dispatcher's Redis (fair.NormalizeKey): one over MaxKeyBytes, or one that
// starts with "h:", becomes "h:" and the hex SHA-256 of it, so hostile values
// cost the same as short ones and cannot take a hashed key's name.
func Key(k string) string { return fair.NormalizeKey(k) }

// Route is where a run's tasks stand in the fair dispatcher: the run's
// fairness key and priority (store.Run.FairKey and Priority). Every task of a
// run — its supervisor steps, its agents' turns, their resumptions — goes
// with it.
type Route struct {
	Key      string
	Priority int
}

// validate refuses a route the dispatcher could not place.
func (r Route) validate() error {
	if r.Key == "" {
		return errors.New("route: empty fairness key")
	}
	if r.Priority < MinPriority || r.Priority > MaxPriority {
		return fmt.Errorf("route: priority %d is not %d-%d", r.Priority, MinPriority, MaxPriority)
	}
	return nil
}
