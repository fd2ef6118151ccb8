package schedules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
)

// Submitter starts runs: *submit.Submitter.
type Submitter interface {
	Submit(ctx context.Context, req submit.Request) (submit.Result, error)
}

// Owner errors a Deps.Principal returns: the schedule's tick fails with the
// reason owner_gone or forbidden, and no run starts.
var (
	// ErrOwnerGone: no API token of the owner's name exists any more.
	ErrOwnerGone = errors.New("the schedule's owner no longer exists")
	// ErrOwnerForbidden: the owner's roles no longer allow submitting runs.
	ErrOwnerForbidden = errors.New("the schedule's owner may no longer submit runs")
)

// Deps are the Scheduler's collaborators.
type Deps struct {
	Store  *store.Store
	Submit Submitter
	// Principal resolves a schedule's owner to its roles as they are now (the
	// API tokens' configuration), at every tick: a token whose roles shrank
	// fires with the smaller roles; ErrOwnerGone or ErrOwnerForbidden refuse.
	Principal func(ctx context.Context, owner string) (submit.Principal, error)
	// Cancel cancels a run (overlap policy cancel_previous).
	Cancel func(ctx context.Context, runID, reason string) error
	// Metrics counts fires, skips and misses (nil: none).
	Metrics *metrics.Schedules
	Log     *slog.Logger
	// Now is the clock (nil: time.Now); tests drive a simulated one.
	Now func() time.Time
	// Name names this process in the fires it claims (default host:pid).
	Name string
	// OnClaimed, when set, is told the ticks a pass claimed before any is
	// submitted: tests and drills kill a scheduler there.
	OnClaimed func(ctx context.Context, fires []store.ScheduleFire)
}

// Scheduler fires the schedules: every Config.Period it claims due ticks and
// submits their runs. Any number of Schedulers may run on one database.
type Scheduler struct {
	cfg Config
	d   Deps
}

// New returns a Scheduler.
func New(cfg Config, d Deps) *Scheduler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Name == "" {
		host, _ := os.Hostname()
		d.Name = host + ":" + strconv.Itoa(os.Getpid())
	}
	return &Scheduler{cfg: cfg.WithDefaults(), d: d}
}

// Config is the Scheduler's configuration, defaults filled in.
func (s *Scheduler) Config() Config { return s.cfg }

// Run fires due ticks every period until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Period)
	defer t.Stop()
	for {
		if _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
			s.d.Log.Warn("schedules: pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass is what one RunOnce did.
type Pass struct {
	// Claimed counts the ticks this pass claimed to fire; Missed those it
	// recorded missed; Recovered the pending ticks (deferred, or claimed by a
	// scheduler that did not submit them) it decided.
	Claimed, Missed, Recovered int
}

// RunOnce is one pass at the clock's now: first the pending ticks (deferred
// ones whose previous run may have ended, and claimed ones left unsubmitted
// for ResubmitAfter: their scheduler died between claim and submit, and the
// same idempotency key makes a resubmission of one it did submit a replay),
// then the due ticks, claimed and submitted.
func (s *Scheduler) RunOnce(ctx context.Context) (Pass, error) {
	var p Pass
	now := s.d.Now()
	pending, err := s.d.Store.PendingFires(ctx, now.Add(-s.cfg.ResubmitAfter), s.cfg.Batch)
	if err != nil {
		return p, err
	}
	var errs []error
	for _, f := range pending {
		if err := s.fire(ctx, f, now); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				return p, errors.Join(errs...)
			}
			continue
		}
		p.Recovered++
	}
	fires, err := s.d.Store.ClaimDueSchedules(ctx, now, s.cfg.Batch, s.d.Name, func(sc store.Schedule) store.FireClaim {
		return s.plan(sc, now)
	})
	if err != nil {
		return p, errors.Join(append(errs, err)...)
	}
	var claimed []store.ScheduleFire
	for _, f := range fires {
		switch f.Status {
		case store.FireClaimed:
			claimed = append(claimed, f)
		case store.FireMissed:
			p.Missed++
		case store.FireFailed:
			s.d.Metrics.Missed(f.Reason)
		}
	}
	p.Claimed = len(claimed)
	if s.d.OnClaimed != nil {
		s.d.OnClaimed(ctx, claimed)
	}
	for _, f := range claimed {
		if err := s.fire(ctx, f, now); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return p, errors.Join(errs...)
}

// request is what a tick submits, snapshotted in its fire when it is claimed.
type request struct {
	Owner     string          `json:"owner"`
	Template  string          `json:"template,omitempty"`
	Team      json.RawMessage `json:"team,omitempty"`
	Prompt    string          `json:"prompt"`
	Project   string          `json:"project,omitempty"`
	Variables map[string]any  `json:"variables,omitempty"`
	Priority  int             `json:"priority,omitempty"`
}

// maxScan bounds the ticks one plan walks through after a long downtime; past
// it, the walk jumps to the ticks of the last LateAfter (the ones between are
// counted missed as maxScan, not one by one).
const maxScan = 100_000

// plan decides a due schedule's ticks at now (inside the claim transaction):
// ticks whose fire time is at most LateAfter ago are on time and claimed;
// older ones were missed while no scheduler ran, and the catch-up policy
// picks which of them still fire: none; the last one (unless an on-time tick
// fires anyway); or the last N. The rest are recorded missed (up to
// MaxCatchUp rows; Missed counts them all).
func (s *Scheduler) plan(sc store.Schedule, now time.Time) store.FireClaim {
	var c store.FireClaim
	if sc.NextTick == nil {
		return c
	}
	spec, err := parse(sc.Cron, sc.TimeZone, true)
	if err != nil {
		// The tzdata or the parser changed under a stored schedule: it stops,
		// saying why, rather than firing at a time nobody chose.
		c.Fires = []store.ScheduleFire{{Tick: *sc.NextTick, FireAt: *sc.NextFireAt, Status: store.FireFailed, Reason: ReasonInvalid, Detail: err.Error()}}
		return c
	}
	fireAt := func(t time.Time) time.Time { return t.Add(JitterOffset(sc.ID, t, sc.Jitter)) }
	keep := s.cfg.MaxCatchUp
	var due []time.Time // the last keep due ticks
	var total int64
	t := *sc.NextTick
	for scanned := 0; !t.IsZero() && !fireAt(t).After(now); scanned++ {
		if scanned == maxScan {
			// Far behind: jump to the ticks that may still be on time or caught up.
			t = spec.Next(now.Add(-s.cfg.LateAfter - time.Duration(keep)*max(spec.MinGap, time.Second)))
			due = due[:0]
			continue
		}
		total++
		due = append(due, t)
		if len(due) > keep {
			due = due[1:]
		}
		t = spec.Next(t)
	}
	if !t.IsZero() {
		next, at := t, fireAt(t)
		c.NextTick, c.NextFireAt = &next, &at
	}
	req, _ := json.Marshal(request{Owner: sc.Owner, Template: sc.Template, Team: sc.Team, Prompt: sc.Prompt, Project: sc.Project,
		Variables: variables(sc.Variables), Priority: sc.Priority})
	var late, onTime []time.Time
	for _, d := range due {
		if now.Sub(fireAt(d)) <= s.cfg.LateAfter {
			onTime = append(onTime, d)
		} else {
			late = append(late, d)
		}
	}
	catchUp := 0
	switch sc.CatchUp {
	case store.CatchUpLast:
		if len(onTime) == 0 {
			catchUp = 1
		}
	case store.CatchUpAll:
		catchUp = sc.CatchUpLimit
	}
	catchUp = min(catchUp, len(late))
	missed := late[:len(late)-catchUp]
	c.Missed = total - int64(len(due)) + int64(len(missed))
	for _, d := range missed {
		c.Fires = append(c.Fires, store.ScheduleFire{Tick: d, FireAt: fireAt(d), Status: store.FireMissed, Reason: ReasonDowntime,
			Detail: "no scheduler ran at this tick's time; the catch-up policy (" + sc.CatchUp + ") did not fire it"})
	}
	for _, d := range append(late[len(late)-catchUp:], onTime...) {
		c.Fires = append(c.Fires, store.ScheduleFire{Tick: d, FireAt: fireAt(d), Status: store.FireClaimed, Request: req})
	}
	s.d.Metrics.Downtime(c.Missed)
	return c
}

func variables(raw json.RawMessage) map[string]any {
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	return v
}

// Reasons a tick was skipped, missed or failed (a bounded set: metrics label
// them).
const (
	// ReasonOverlap: overlap policy skip, a previous run still running.
	ReasonOverlap = "overlap"
	// ReasonQueueFull: overlap policy queue_one, a tick already waiting.
	ReasonQueueFull = "queue_full"
	// ReasonDowntime: no scheduler ran at the tick's time and the catch-up
	// policy did not fire it.
	ReasonDowntime = "downtime"
	// ReasonPaused: the schedule was paused while the tick waited (queue_one).
	ReasonPaused = "paused"
	// ReasonOwnerGone: the owner's API token no longer exists.
	ReasonOwnerGone = "owner_gone"
	// ReasonInvalid, ReasonForbidden, ReasonNotFound, ReasonUnprocessable,
	// ReasonBusy, ReasonDiskFull, ReasonIdempotency: the submission was refused
	// (submit's error kinds).
	ReasonInvalid       = "invalid"
	ReasonForbidden     = "forbidden"
	ReasonNotFound      = "not_found"
	ReasonUnprocessable = "unprocessable"
	ReasonBusy          = "busy"
	ReasonDiskFull      = "disk_full"
	ReasonIdempotency   = "idempotency_mismatch"
	// ReasonError: submitting failed MaxAttempts times (the database, Redis).
	ReasonError = "error"
)

// Reasons lists every reason (the metrics' label values).
func Reasons() []string {
	return []string{ReasonOverlap, ReasonQueueFull, ReasonDowntime, ReasonPaused, ReasonOwnerGone, ReasonInvalid, ReasonForbidden,
		ReasonNotFound, ReasonUnprocessable, ReasonBusy, ReasonDiskFull, ReasonIdempotency, ReasonError}
}

// refusal names a submit refusal's reason.
func refusal(err error) (string, bool) {
	var se *submit.Error
	if !errors.As(err, &se) {
		return "", false
	}
	for kind, reason := range map[error]string{submit.ErrInvalid: ReasonInvalid, submit.ErrForbidden: ReasonForbidden,
		submit.ErrNotFound: ReasonNotFound, submit.ErrUnprocessable: ReasonUnprocessable, submit.ErrBusy: ReasonBusy,
		submit.ErrDiskFull: ReasonDiskFull, submit.ErrIdempotencyMismatch: ReasonIdempotency} {
		if errors.Is(se.Kind, kind) {
			return reason, true
		}
	}
	return ReasonInvalid, true
}

// IdempotencyKey is the key a tick submits with: the same for every scheduler
// and every attempt, so a tick starts one run however often it is submitted.
func IdempotencyKey(scheduleID string, tick time.Time) string {
	return fmt.Sprintf("schedule:%s:%d", scheduleID, tick.Unix())
}

// Trigger is what the run.queued event of a schedule's run names.
func Trigger(scheduleID string) string { return "schedule:" + scheduleID }

// fire decides one claimed or deferred tick under its schedule's lock: the
// overlap policy against the schedule's runs still in flight, then the submit
// with the tick's idempotency key, then the fire's outcome. An error leaves
// the tick claimed (another pass resubmits it after ResubmitAfter).
func (s *Scheduler) fire(ctx context.Context, f store.ScheduleFire, now time.Time) error {
	var outcome, reason string
	var submitErr error
	recovered := f.Status == store.FireClaimed && f.ClaimedAt.Before(now.Add(-s.cfg.ResubmitAfter).Add(time.Nanosecond))
	err := s.d.Store.LockSchedule(ctx, f.ScheduleID, func(tx *store.Store) error {
		cur, err := tx.GetFire(ctx, f.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // its schedule was deleted
		}
		if err != nil {
			return err
		}
		if cur.Status != store.FireClaimed && cur.Status != store.FireDeferred {
			return nil // another scheduler decided it
		}
		sc, err := tx.GetSchedule(ctx, cur.ScheduleID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		decide := func(status, why, detail, runID string) error {
			outcome, reason = status, why
			return tx.DecideFire(ctx, cur, status, why, detail, runID)
		}
		var req request
		if err := json.Unmarshal(cur.Request, &req); err != nil {
			return decide(store.FireFailed, ReasonInvalid, "the tick's request cannot be read: "+err.Error(), "")
		}
		if cur.Status == store.FireClaimed {
			// A scheduler that submitted this tick and died before recording
			// its run: the tick's idempotency key names the run, which is the
			// tick's whatever runs started since (no overlap policy applies).
			prior, err := tx.IdempotentRun(ctx, req.Owner, IdempotencyKey(sc.ID, cur.Tick), submit.DefaultIdempotencyTTL)
			switch {
			case err == nil:
				return decide(store.FireSubmitted, "", "", prior.RunID)
			case !errors.Is(err, store.ErrNotFound):
				return err
			}
		}
		if cur.Status == store.FireDeferred && sc.Paused {
			return decide(store.FireSkipped, ReasonPaused, "the schedule was paused while this tick waited for the previous run", "")
		}
		// allow_all never looks at the runs in flight: reading them cost each
		// fire a scan of every active run of the schedule (quadratic in a
		// schedule whose runs outlive its interval).
		var active []string
		if sc.Overlap != store.OverlapAllowAll {
			if active, err = tx.ActiveScheduleRuns(ctx, sc.ID, cur.ID); err != nil {
				return err
			}
		}
		if len(active) > 0 {
			switch sc.Overlap {
			case store.OverlapSkip:
				return decide(store.FireSkipped, ReasonOverlap, "run "+active[len(active)-1]+" of the previous tick is still in flight", "")
			case store.OverlapQueueOne:
				if cur.Status == store.FireDeferred {
					return nil // still waiting
				}
				waiting, err := tx.HasDeferredFire(ctx, sc.ID, cur.ID)
				if err != nil {
					return err
				}
				if waiting {
					return decide(store.FireSkipped, ReasonQueueFull, "a tick already waits for the previous run", "")
				}
				return decide(store.FireDeferred, "", "waits for run "+active[len(active)-1], "")
			case store.OverlapCancelPrevious:
				for _, id := range active {
					if err := s.d.Cancel(ctx, id, fmt.Sprintf("cancelled by schedule %s: its tick %s started", sc.ID, cur.Tick.Format(time.RFC3339))); err != nil {
						return fmt.Errorf("cancel previous run %s: %w", id, err)
					}
				}
			}
		}
		by, err := s.d.Principal(ctx, req.Owner)
		switch {
		case errors.Is(err, ErrOwnerGone):
			return decide(store.FireFailed, ReasonOwnerGone, err.Error(), "")
		case errors.Is(err, ErrOwnerForbidden):
			return decide(store.FireFailed, ReasonForbidden, err.Error(), "")
		case err != nil:
			return err
		}
		res, err := s.d.Submit.Submit(ctx, submit.Request{By: by, Template: req.Template, Team: req.Team, Prompt: req.Prompt,
			Project: req.Project, Variables: req.Variables, Priority: req.Priority,
			IdempotencyKey: IdempotencyKey(sc.ID, cur.Tick), Trigger: Trigger(sc.ID)})
		if why, refused := refusal(err); refused {
			return decide(store.FireFailed, why, err.Error(), "")
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if cur.Attempts+1 < s.cfg.MaxAttempts {
				// Left claimed, its attempt counted: a later pass resubmits it.
				submitErr = fmt.Errorf("submit tick %s of schedule %s: %w", cur.Tick.Format(time.RFC3339), sc.ID, err)
				return tx.DecideFire(ctx, cur, store.FireClaimed, "", err.Error(), "")
			}
			return decide(store.FireFailed, ReasonError, err.Error(), "")
		}
		return decide(store.FireSubmitted, "", "", res.RunID)
	})
	if err != nil {
		return err
	}
	if submitErr != nil {
		return submitErr
	}
	switch outcome {
	case store.FireSubmitted:
		s.d.Metrics.Fired(recovered)
	case store.FireSkipped:
		s.d.Metrics.Skipped(reason)
	case store.FireFailed:
		s.d.Metrics.Missed(reason)
	}
	if outcome != "" && outcome != store.FireSubmitted {
		s.d.Log.Info("schedule tick not fired", "schedule_id", f.ScheduleID, "tick", f.Tick, "status", outcome, "reason", reason)
	}
	return nil
}
