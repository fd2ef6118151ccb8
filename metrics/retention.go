package metrics

import "github.com/prometheus/client_golang/prometheus"

// RetentionClasses are the data classes the retention sweep deletes (the
// label values of Retention's collectors).
var RetentionClasses = []string{"runs", "egress", "dead_letters", "project_knowledge"}

// Retention counts what the retention sweep deleted (issue 46, docs/retention.md).
// Its methods are no-ops on a nil *Retention. The label is a class from
// RetentionClasses, never a run id.
type Retention struct {
	// Deleted counts what was deleted, by class: runs (each with all its rows),
	// egress rows, dead letters, project knowledge documents.
	Deleted *prometheus.CounterVec // class
	// Exported counts runs written to retention.export_dir before their delete.
	Exported prometheus.Counter
	// Batch is how long one delete transaction held the rows it deleted locked
	// (from its first DELETE to its commit), by class.
	Batch *prometheus.HistogramVec // class
}

// NewRetention registers the retention collectors on reg, with a zero series
// for every class. A second call on one registry (two sweepers of one process,
// in tests) shares the first's collectors.
func NewRetention(reg prometheus.Registerer) (*Retention, error) {
	const ns = "aetherium"
	r := &Retention{
		Deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "retention_deleted_total",
			Help: "Rows the retention sweep deleted, by class (runs: runs, each with all its rows; egress: connection rows; dead_letters; project_knowledge: documents)."}, []string{"class"}),
		Exported: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "retention_exported_runs_total",
			Help: "Runs written to retention.export_dir before they were deleted."}),
		Batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "retention_batch_seconds",
			Help:    "How long one retention delete transaction held the rows it deleted locked (first DELETE to commit), by class.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"class"}),
	}
	if err := register(reg, &r.Deleted); err != nil {
		return nil, err
	}
	if err := register(reg, &r.Exported); err != nil {
		return nil, err
	}
	if err := register(reg, &r.Batch); err != nil {
		return nil, err
	}
	for _, c := range RetentionClasses {
		r.Deleted.WithLabelValues(c)
	}
	return r, nil
}

// register registers *c on reg, or points *c at the collector already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		return err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return err
	}
	*c = existing
	return nil
}

// Deletes counts n rows deleted of class.
func (r *Retention) Deletes(class string, n int64) {
	if r != nil && n > 0 {
		r.Deleted.WithLabelValues(class).Add(float64(n))
	}
}

// BatchHeld observes one batch's transaction time of class, in seconds.
func (r *Retention) BatchHeld(class string, seconds float64) {
	if r != nil {
		r.Batch.WithLabelValues(class).Observe(seconds)
	}
}

// Export counts n runs exported.
func (r *Retention) Export(n int64) {
	if r != nil && n > 0 {
		r.Exported.Add(float64(n))
	}
}
