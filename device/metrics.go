package device

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aetherium-engine/aetherium/device/fps"
)

// Run outcomes (bounded metric labels).
const (
	OutcomeExited   = "exited"
	OutcomeCrashed  = "crashed"
	OutcomeTimedOut = "timed_out"
	// OutcomeError is a run that could not be carried out (launch failed, the
	// headset went away, the call was cancelled).
	OutcomeError = "error"
)

// Outcomes lists every run outcome.
var Outcomes = []string{OutcomeExited, OutcomeCrashed, OutcomeTimedOut, OutcomeError}

// Metrics are the headset's Prometheus collectors. A nil *Metrics records nothing.
type Metrics struct {
	// FPS is the steady-state fps of the last judged run (aetherium_headset_fps).
	FPS prometheus.Gauge
	// FrameTime observes every steady-state frame of judged runs.
	FrameTime prometheus.Histogram
	// Checks counts 72 fps checks by result (pass, fail, insufficient_data).
	Checks *prometheus.CounterVec
	// Runs counts frame_run calls by outcome (exited, crashed, timed_out, error).
	Runs *prometheus.CounterVec
}

// NewMetrics builds and registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "aetherium"
	m := &Metrics{
		FPS: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "headset_fps",
			Help: "Steady-state frames per second of the last judged headset run (bar: 72)."}),
		// Buckets straddle the 72 Hz budget (13.9 ms), one and a half budgets (20.8 ms,
		// the long-frame line of the check) and two budgets (27.8 ms).
		FrameTime: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "headset_frame_time_seconds",
			Help:    "Steady-state frame times of judged headset runs.",
			Buckets: []float64{0.0069, 0.0083, 0.0111, 0.0125, 0.0139, 0.0167, 0.0208, 0.0278, 0.0333, 0.05, 0.1}}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "headset_fps_checks_total",
			Help: "72 fps checks by result (pass, fail, insufficient_data)."}, []string{"result"}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "headset_runs_total",
			Help: "frame_run calls by how the run ended (exited, crashed, timed_out, error)."}, []string{"outcome"}),
	}
	// Every label value exists from the start, so a dashboard's rate() has a series
	// before the first failure.
	for _, r := range fps.Results {
		m.Checks.WithLabelValues(r)
	}
	for _, o := range Outcomes {
		m.Runs.WithLabelValues(o)
	}
	reg.MustRegister(m.FPS, m.FrameTime, m.Checks, m.Runs)
	return m
}

// ObserveAnalysis records one judged recording.
func (m *Metrics) ObserveAnalysis(a fps.Analysis) {
	if m == nil {
		return
	}
	m.Checks.WithLabelValues(a.Result).Inc()
	if a.Result == fps.Insufficient {
		return
	}
	m.FPS.Set(a.SteadyFPS)
	a.SteadyFrameTimes(func(d time.Duration) { m.FrameTime.Observe(d.Seconds()) })
}

// ObserveRun counts one frame_run by outcome.
func (m *Metrics) ObserveRun(outcome string) {
	if m == nil {
		return
	}
	m.Runs.WithLabelValues(outcome).Inc()
}
