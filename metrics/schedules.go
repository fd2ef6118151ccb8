package metrics

import "github.com/prometheus/client_golang/prometheus"

// Schedules counts what the schedulers did with schedules' ticks (issue 43).
// Its methods are no-ops on a nil *Schedules. Labels are bounded: a kind of
// fire, or a reason from a fixed list (schedules.Reasons), never a schedule id.
type Schedules struct {
	// Fires counts runs submitted for ticks, by kind: on_time, or recovered
	// (a tick its claimer left unsubmitted, resubmitted by another scheduler).
	Fires *prometheus.CounterVec // kind
	// Skips counts ticks skipped by the overlap policy, by reason (overlap,
	// queue_full, paused).
	Skips *prometheus.CounterVec // reason
	// Misses counts ticks that started no run though they should have: missed
	// while no scheduler ran (downtime), or refused (owner_gone, forbidden,
	// invalid, not_found, busy, …).
	Misses *prometheus.CounterVec // reason
}

// NewSchedules registers the schedule counters on reg, with a zero series for
// each label value in reasons (and the fire kinds).
func NewSchedules(reg prometheus.Registerer, reasons []string) (*Schedules, error) {
	const ns = "aetherium"
	s := &Schedules{
		Fires:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "schedule_fires_total", Help: "Runs submitted for schedules' ticks, by kind (on_time, recovered: resubmitted after its scheduler left it unsubmitted)."}, []string{"kind"}),
		Skips:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "schedule_skips_total", Help: "Schedule ticks skipped by the overlap policy, by reason (overlap, queue_full, paused)."}, []string{"reason"}),
		Misses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "schedule_misses_total", Help: "Schedule ticks that started no run: missed during a downtime (downtime) or refused (owner_gone, forbidden, invalid, not_found, busy, …)."}, []string{"reason"}),
	}
	for _, c := range []**prometheus.CounterVec{&s.Fires, &s.Skips, &s.Misses} {
		if err := reg.Register(*c); err != nil {
			// A second scheduler of one process (tests) shares the counters.
			are, ok := err.(prometheus.AlreadyRegisteredError)
			if !ok {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	s.Fires.WithLabelValues("on_time")
	s.Fires.WithLabelValues("recovered")
	for _, r := range reasons {
		s.Misses.WithLabelValues(r)
	}
	for _, r := range []string{"overlap", "queue_full", "paused"} {
		s.Skips.WithLabelValues(r)
	}
	return s, nil
}

// Fired counts a submitted tick.
func (s *Schedules) Fired(recovered bool) {
	if s == nil {
		return
	}
	kind := "on_time"
	if recovered {
		kind = "recovered"
	}
	s.Fires.WithLabelValues(kind).Inc()
}

// Skipped counts a tick the overlap policy skipped.
func (s *Schedules) Skipped(reason string) {
	if s != nil {
		s.Skips.WithLabelValues(reason).Inc()
	}
}

// Missed counts a tick that started no run.
func (s *Schedules) Missed(reason string) {
	if s != nil {
		s.Misses.WithLabelValues(reason).Inc()
	}
}

// Downtime counts n ticks missed while no scheduler ran.
func (s *Schedules) Downtime(n int64) {
	if s != nil && n > 0 {
		s.Misses.WithLabelValues("downtime").Add(float64(n))
	}
}
