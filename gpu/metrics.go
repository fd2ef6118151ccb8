package gpu

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's collectors, labelled by service (a configured,
// bounded set). A nil *Metrics records nothing.
type Metrics struct {
	Starts        *prometheus.CounterVec   // service, outcome (ok, failed)
	StartDuration *prometheus.HistogramVec // service
	Stops         *prometheus.CounterVec   // service
}

// NewMetrics registers the controller's collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "aetherium", "gpu_service"
	m := &Metrics{
		Starts:        prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "starts_total", Help: "GPU service container starts, by service and outcome (ok, failed)."}, []string{"service", "outcome"}),
		StartDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "start_seconds", Help: "Time from starting a GPU service container to its health URL answering.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)}, []string{"service"}),
		Stops:         prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "stops_total", Help: "GPU service containers stopped after their idle delay, by service."}, []string{"service"}),
	}
	for _, c := range []prometheus.Collector{m.Starts, m.StartDuration, m.Stops} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) start(service, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.Starts.WithLabelValues(service, outcome).Inc()
	if outcome == "ok" {
		m.StartDuration.WithLabelValues(service).Observe(took.Seconds())
	}
}

func (m *Metrics) stop(service string) {
	if m != nil {
		m.Stops.WithLabelValues(service).Inc()
	}
}
