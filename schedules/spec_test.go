package schedules_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/schedules"
)

func TestParseSpecRefusesHostileInput(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, cron, tz string
		min            time.Duration
		field, want    string
	}{
		{"never fires", "0 0 30 2 *", "UTC", time.Minute, "cron", "never fires"},
		{"never fires, seconds", "0 0 0 31 4 *", "UTC", time.Second, "cron", "never fires"},
		{"seconds field without a sub-minute minimum", "* * * * * *", "UTC", time.Minute, "cron", "seconds field"},
		{"every second under a 10s minimum", "* * * * * *", "UTC", 10 * time.Second, "cron", "more often"},
		{"every 5 minutes under a 10m minimum", "*/5 * * * *", "UTC", 10 * time.Minute, "cron", "more often"},
		{"two ticks a minute apart once a day", "0,1 3 * * *", "UTC", 5 * time.Minute, "cron", "more often"},
		{"@every under the minimum", "@every 30s", "UTC", time.Minute, "cron", "more often"},
		{"empty", "  ", "UTC", time.Minute, "cron", "required"},
		{"garbage", "every tuesday", "UTC", time.Minute, "cron", "every tuesday"},
		{"time zone in the expression", "CRON_TZ=Asia/Tokyo 0 6 * * *", "UTC", time.Minute, "cron", "time_zone"},
		{"unknown time zone", "0 6 * * *", "Mars/Olympus", time.Minute, "time_zone", "IANA"},
		{"the process's local zone", "0 6 * * *", "Local", time.Minute, "time_zone", "IANA"},
		{"path in the time zone", "0 6 * * *", "../../etc/passwd", time.Minute, "time_zone", "IANA"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := schedules.ParseSpec(c.cron, c.tz, c.min, from)
			var ie *schedules.InvalidError
			require.True(t, errors.As(err, &ie), "want an InvalidError, got %v", err)
			require.Equal(t, c.field, ie.Field)
			require.Contains(t, ie.Message, c.want)
		})
	}
}

func TestParseSpecNextTicks(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 12, 6, 12, 0, 30, 0, time.UTC)
	for _, c := range []struct {
		name, cron, tz string
		min            time.Duration
		want           []string
		gap            time.Duration
	}{
		{"every second", "* * * * * *", "UTC", time.Second, []string{"2026-12-06T12:00:31Z", "2026-12-06T12:00:32Z"}, time.Second},
		{"daily in Paris", "0 3 * * *", "Europe/Paris", time.Minute, []string{"2026-12-07T02:00:00Z", "2026-12-08T02:00:00Z"}, 23 * time.Hour}, // the spring-forward day is 23h,
		{"Feb 29 fires in leap years", "0 0 29 2 *", "UTC", time.Minute, []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}, 0},
		{"hourly descriptor", "@hourly", "UTC", time.Minute, []string{"2026-12-06T13:00:00Z", "2026-12-06T14:00:00Z"}, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := schedules.ParseSpec(c.cron, c.tz, c.min, from)
			require.NoError(t, err)
			var got []string
			for _, tk := range s.NextN(from, 2) {
				got = append(got, tk.Format(time.RFC3339))
			}
			require.Equal(t, c.want, got)
			if c.gap > 0 {
				require.Equal(t, c.gap, s.MinGap)
			}
		})
	}
}

// DST as robfig/cron documents it: a tick in the hour a spring-forward skips
// does not fire that day; a tick in the hour a fall-back repeats fires twice.
func TestParseSpecDST(t *testing.T) {
	t.Parallel()
	ny := func(s string) time.Time {
		tm, err := time.Parse("2006-01-02T15:04:05-0700", s)
		require.NoError(t, err)
		return tm
	}
	spring, err := schedules.ParseSpec("30 2 * * *", "America/New_York", time.Minute, ny("2026-03-07T00:00:00-0500"))
	require.NoError(t, err)
	require.Equal(t, []time.Time{ny("2026-03-07T02:30:00-0500").UTC(), ny("2026-03-09T02:30:00-0400").UTC()},
		spring.NextN(ny("2026-03-07T00:00:00-0500"), 2), "2:30 does not exist on 2026-03-08")
	fall, err := schedules.ParseSpec("30 1 * * *", "America/New_York", time.Minute, ny("2026-10-31T00:00:00-0400"))
	require.NoError(t, err)
	require.Equal(t, []time.Time{ny("2026-11-01T01:30:00-0400").UTC(), ny("2026-11-01T01:30:00-0500").UTC()},
		fall.NextN(ny("2026-11-01T00:00:00-0400"), 2), "1:30 happens twice on 2026-11-01")
}

func TestCheckJitter(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	minutely, err := schedules.ParseSpec("* * * * *", "UTC", time.Minute, from)
	require.NoError(t, err)
	require.NoError(t, schedules.CheckJitter(30*time.Second, time.Hour, minutely))
	for _, c := range []struct {
		name   string
		jitter time.Duration
		want   string
	}{
		{"negative", -time.Second, "negative"},
		{"over the maximum", 2 * time.Hour, "schedules.max_jitter"},
		{"not shorter than the gap", time.Minute, "shortest gap"},
		{"huge", 1 << 62, "schedules.max_jitter"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := schedules.CheckJitter(c.jitter, time.Hour, minutely)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestJitterOffsetIsDeterministicAndBounded(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range 200 {
		tk := tick.Add(time.Duration(i) * time.Minute)
		off := schedules.JitterOffset("sch_a", tk, 30*time.Second)
		require.Equal(t, off, schedules.JitterOffset("sch_a", tk, 30*time.Second), "every scheduler computes the same offset")
		require.GreaterOrEqual(t, off, time.Duration(0))
		require.LessOrEqual(t, off, 30*time.Second)
		seen[off] = true
	}
	require.Greater(t, len(seen), 100, "offsets spread over the window")
	require.Zero(t, schedules.JitterOffset("sch_a", tick, 0))
}

func TestConfig(t *testing.T) {
	t.Parallel()
	d := schedules.Config{}.WithDefaults()
	require.Equal(t, schedules.DefaultMinInterval, d.MinInterval)
	require.Equal(t, schedules.DefaultPeriod, d.Period)
	require.NoError(t, d.Validate())
	require.ErrorContains(t, schedules.Config{MinInterval: 500 * time.Millisecond}.Validate(), "schedules.min_interval")
	require.ErrorContains(t, schedules.Config{MaxCatchUp: 5000}.Validate(), "schedules.max_catch_up")
	require.ErrorContains(t, schedules.Config{Period: -1}.Validate(), "schedules.period")
}
