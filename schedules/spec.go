package schedules

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// InvalidError is a schedule the API refuses (a 400), naming the offending
// field.
type InvalidError struct {
	Field   string
	Message string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

func invalid(field, format string, a ...any) error {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// The cron parsers: standard five fields (minute hour day-of-month month
// day-of-week) or six with a leading seconds field, and the descriptors
// (@hourly, @daily, @every 90s, …) of github.com/robfig/cron/v3.
var (
	fiveFields = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	sixFields  = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// MaxCronLength bounds a cron expression.
const MaxCronLength = 200

// gapSamples is how many ticks ParseSpec looks at to find the shortest gap
// between two ticks (the minimum interval and jitter checks).
const gapSamples = 1000

// Spec is a parsed cron expression in its time zone.
type Spec struct {
	Expr string
	Loc  *time.Location
	// MinGap is the shortest gap between two of the first gapSamples ticks
	// after the time it was parsed at (0 when it fires once).
	MinGap time.Duration
	sched  cron.Schedule
}

// ParseSpec parses expr in time zone tz ("" is UTC) and checks it from the
// time from on: it must fire (an expression such as Feb 30 never does), and
// never twice within minInterval; a seconds field (six fields) needs a
// minInterval under a minute.
func ParseSpec(expr, tz string, minInterval time.Duration, from time.Time) (Spec, error) {
	s, err := parse(expr, tz, minInterval < time.Minute)
	if err != nil {
		return s, err
	}
	first := s.Next(from)
	if first.IsZero() {
		return s, invalid("cron", "%q never fires (no matching time within five years: a day that does not exist, such as Feb 30?)", s.Expr)
	}
	prev := first
	for range gapSamples {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		if gap := next.Sub(prev); s.MinGap == 0 || gap < s.MinGap {
			s.MinGap = gap
		}
		prev = next
	}
	if s.MinGap > 0 && s.MinGap < minInterval {
		return s, invalid("cron", "%q fires every %s at times, more often than this deployment allows (schedules.min_interval %s)", s.Expr, s.MinGap, minInterval)
	}
	return s, nil
}

// parse parses without the checks of ParseSpec (a stored schedule at fire
// time: it was checked when it was written).
func parse(expr, tz string, seconds bool) (Spec, error) {
	expr = strings.Join(strings.Fields(expr), " ")
	s := Spec{Expr: expr}
	switch {
	case expr == "":
		return s, invalid("cron", "cron is required (five fields: minute hour day-of-month month day-of-week, or a descriptor such as @daily)")
	case len(expr) > MaxCronLength:
		return s, invalid("cron", "cron is over %d bytes", MaxCronLength)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return s, invalid("cron", "name the time zone in time_zone, not in the expression")
	}
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" || strings.ContainsAny(tz, " \\") || len(tz) > 64 {
		return s, invalid("time_zone", "time_zone %.80q is not an IANA time zone name (such as Europe/Paris or UTC)", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return s, invalid("time_zone", "time_zone %.80q is not an IANA time zone name (such as Europe/Paris or UTC)", tz)
	}
	s.Loc = loc
	p := fiveFields
	if !strings.HasPrefix(expr, "@") && len(strings.Fields(expr)) == 6 {
		if !seconds {
			return s, invalid("cron", "%q has a seconds field; this deployment allows none (schedules.min_interval is a minute or more): use five fields", expr)
		}
		p = sixFields
	}
	if s.sched, err = p.Parse(expr); err != nil {
		return s, invalid("cron", "%q: %v", expr, err)
	}
	return s, nil
}

// Next is the first tick strictly after t, in UTC; zero when there is none
// within five years (robfig/cron's horizon).
func (s Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.Loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// NextN lists up to n ticks after t.
func (s Spec) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// CheckJitter refuses a jitter that is negative, over maxJitter, or not
// shorter than the spec's shortest gap between ticks (ticks would fire out of
// order).
func CheckJitter(jitter, maxJitter time.Duration, s Spec) error {
	switch {
	case jitter < 0:
		return invalid("jitter", "jitter must not be negative")
	case jitter > maxJitter:
		return invalid("jitter", "jitter %s is over this deployment's maximum (schedules.max_jitter %s)", jitter, maxJitter)
	case jitter > 0 && s.MinGap > 0 && jitter >= s.MinGap:
		return invalid("jitter", "jitter %s is not shorter than the shortest gap between the schedule's ticks (%s)", jitter, s.MinGap)
	}
	return nil
}

// JitterOffset is a tick's jitter: from 0 to jitter (millisecond steps), a
// hash of the schedule's id and the tick, so every scheduler process computes
// the same fire time for it.
func JitterOffset(id string, tick time.Time, jitter time.Duration) time.Duration {
	ms := jitter.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s:%d", id, tick.Unix())
	return time.Duration(h.Sum64()%uint64(ms+1)) * time.Millisecond
}

// ErrNeverFires is a stored schedule whose expression no longer parses or
// fires (recorded as its last tick's failure).
var ErrNeverFires = errors.New("schedule never fires")
