package lease

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lease collectors, labelled by service (a bounded, configured
// set). The gauges are what the last operation on a service saw, fleet-wide: every
// script reports the service's counts, and the periodic Reap refreshes them all.
// A nil *Metrics records nothing.
type Metrics struct {
	Held     *prometheus.GaugeVec     // service
	Waiting  *prometheus.GaugeVec     // service
	Wait     *prometheus.HistogramVec // service: queue time of each grant
	Granted  *prometheus.CounterVec   // service
	Renewed  *prometheus.CounterVec   // service
	Released *prometheus.CounterVec   // service
	Expired  *prometheus.CounterVec   // service: grants reclaimed for want of renewal
	Dropped  *prometheus.CounterVec   // service: waiters that stopped asking
}

// NewMetrics registers the lease collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "aetherium", "lease"
	l := []string{"service"}
	m := &Metrics{
		Held:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "held", Help: "Leases currently held, by GPU service."}, l),
		Waiting:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "waiting", Help: "Runs queued for a lease, by GPU service."}, l),
		Wait:     prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "wait_seconds", Help: "Time from joining the queue to being granted, by GPU service.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 12)}, l),
		Granted:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "granted_total", Help: "Leases granted, by GPU service."}, l),
		Renewed:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "renewed_total", Help: "Lease renewals (heartbeats), by GPU service."}, l),
		Released: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "released_total", Help: "Leases released by their holder, by GPU service."}, l),
		Expired:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "expired_total", Help: "Leases reclaimed because their holder stopped renewing, by GPU service."}, l),
		Dropped:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "waiters_dropped_total", Help: "Queued runs dropped because they stopped asking, by GPU service."}, l),
	}
	for _, c := range []prometheus.Collector{m.Held, m.Waiting, m.Wait, m.Granted, m.Renewed, m.Released, m.Expired, m.Dropped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(service string, r reply) {
	if m == nil {
		return
	}
	m.Held.WithLabelValues(service).Set(float64(r.held))
	m.Waiting.WithLabelValues(service).Set(float64(r.waiting))
	if r.expired > 0 {
		m.Expired.WithLabelValues(service).Add(float64(r.expired))
	}
	if r.dropped > 0 {
		m.Dropped.WithLabelValues(service).Add(float64(r.dropped))
	}
}

func (m *Metrics) granted(service string, waited time.Duration) {
	if m == nil {
		return
	}
	m.Granted.WithLabelValues(service).Inc()
	m.Wait.WithLabelValues(service).Observe(waited.Seconds())
}

func (m *Metrics) renewed(service string) {
	if m != nil {
		m.Renewed.WithLabelValues(service).Inc()
	}
}

func (m *Metrics) released(service string) {
	if m != nil {
		m.Released.WithLabelValues(service).Inc()
	}
}
