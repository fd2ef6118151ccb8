package mailbox

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the mailbox collectors. Labels are deliberately absent: run ids and
// agent names are unbounded. A nil *Metrics records nothing.
type Metrics struct {
	Sent         prometheus.Counter
	Delivered    prometheus.Counter
	Redelivered  prometheus.Counter
	Acked        prometheus.Counter
	DeadLettered prometheus.Counter
	// Depth is the number of unread or unacknowledged messages over all live
	// mailboxes, as last measured by Reclaim.
	Depth prometheus.Gauge
}

// NewMetrics registers the mailbox collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "aetherium", "mailbox"
	m := &Metrics{
		Sent:         prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "messages_sent_total", Help: "Messages appended to agent mailboxes (duplicates excluded)."}),
		Delivered:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "messages_delivered_total", Help: "Messages shown to an agent's turn, redeliveries included."}),
		Redelivered:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "messages_redelivered_total", Help: "Messages shown again because the turn that first showed them did not finish."}),
		Acked:        prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "messages_acked_total", Help: "Messages acknowledged after their turn was persisted."}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "messages_dead_lettered_total", Help: "Messages moved to the dead-letter stream after too many deliveries."}),
		Depth:        prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "depth", Help: "Unread or unacknowledged messages over all live mailboxes (measured by the reclaim pass)."}),
	}
	for _, c := range []prometheus.Collector{m.Sent, m.Delivered, m.Redelivered, m.Acked, m.DeadLettered, m.Depth} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) sent() {
	if m != nil {
		m.Sent.Inc()
	}
}

func (m *Metrics) delivered(n, redelivered int) {
	if m != nil {
		m.Delivered.Add(float64(n))
		m.Redelivered.Add(float64(redelivered))
	}
}

func (m *Metrics) acked(n int) {
	if m != nil {
		m.Acked.Add(float64(n))
	}
}

func (m *Metrics) deadLettered() {
	if m != nil {
		m.DeadLettered.Inc()
	}
}

func (m *Metrics) setDepth(n int64) {
	if m != nil {
		m.Depth.Set(float64(n))
	}
}
