package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/metrics"
)

// The schedule counters: a zero series per known label value, one set shared
// by a process's schedulers, nil-safe.
func TestScheduleCounters(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	a, err := metrics.NewSchedules(m.Registry, []string{"downtime", "owner_gone"})
	require.NoError(t, err)
	b, err := metrics.NewSchedules(m.Registry, []string{"downtime", "owner_gone"})
	require.NoError(t, err, "a second scheduler of the process shares the counters")
	a.Fired(false)
	b.Fired(true)
	a.Skipped("overlap")
	b.Missed("owner_gone")
	a.Downtime(3)
	a.Downtime(0)
	var none *metrics.Schedules
	none.Fired(true)
	none.Skipped("overlap")
	none.Missed("error")
	none.Downtime(2)
	require.Equal(t, `aetherium_schedule_fires_total{kind="on_time"} 1
aetherium_schedule_fires_total{kind="recovered"} 1
aetherium_schedule_misses_total{reason="downtime"} 3
aetherium_schedule_misses_total{reason="owner_gone"} 1
aetherium_schedule_skips_total{reason="overlap"} 1
aetherium_schedule_skips_total{reason="paused"} 0
aetherium_schedule_skips_total{reason="queue_full"} 0`,
		samples(t, m, "aetherium_schedule_fires_total", "aetherium_schedule_misses_total", "aetherium_schedule_skips_total"))
}
