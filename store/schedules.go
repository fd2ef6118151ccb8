package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schedule is a run that starts itself on a cron expression (issue 43). The
// cron logic lives in package schedules; the store keeps the rows and the
// exactly-once claim of each tick (schedule_fires' UNIQUE (schedule_id, tick)).
type Schedule struct {
	ID       string
	Owner    string
	Name     string
	Cron     string
	TimeZone string
	// Template is a shipped template's name; "" when Team holds an inline team.
	Template  string
	Team      json.RawMessage
	Prompt    string
	Variables json.RawMessage
	Project   string
	Priority  int
	Jitter    time.Duration
	// Overlap is one of the Overlap* policies, CatchUp one of the CatchUp*
	// policies (CatchUpLimit is N of CatchUpAll).
	Overlap      string
	CatchUp      string
	CatchUpLimit int
	Paused       bool
	// NextTick is the nominal cron time the schedule fires next; NextFireAt is
	// NextTick plus its jitter, when it is due. Nil for a schedule that never
	// fires again.
	NextTick, NextFireAt *time.Time
	// LastTick, LastStatus, LastReason and LastRunID describe the latest tick
	// decided (a FireStatus, its reason, the run it started).
	LastTick   *time.Time
	LastStatus string
	LastReason string
	LastRunID  string
	// Missed counts the ticks missed in all (downtime past the catch-up policy),
	// recorded as fires or not.
	Missed    int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Schedule policies (the columns' CHECKs).
const (
	OverlapSkip           = "skip"
	OverlapQueueOne       = "queue_one"
	OverlapCancelPrevious = "cancel_previous"
	OverlapAllowAll       = "allow_all"

	CatchUpNone = "none"
	CatchUpLast = "last"
	CatchUpAll  = "all"
)

// Fire statuses: a claimed tick is claimed until submitted (or deferred by
// queue_one, then submitted); the others are final.
const (
	FireClaimed   = "claimed"
	FireDeferred  = "deferred"
	FireSubmitted = "submitted"
	FireSkipped   = "skipped"
	FireMissed    = "missed"
	FireFailed    = "failed"
)

// ScheduleFire is one tick of a schedule as a scheduler claimed it.
type ScheduleFire struct {
	ID         int64
	ScheduleID string
	Tick       time.Time
	FireAt     time.Time
	Status     string
	Reason     string
	Detail     string
	RunID      string
	// Request is what to submit, snapshotted at the claim, while the fire is
	// claimed or deferred (nil once decided): a resubmission after a crash sends
	// exactly what the first attempt sent, so its idempotency key replays.
	Request   json.RawMessage
	Attempts  int
	ClaimedBy string
	ClaimedAt time.Time
	UpdatedAt time.Time
}

// ErrScheduleExists refuses a second schedule of one owner's name.
var ErrScheduleExists = errors.New("schedule exists")

const scheduleCols = `id, owner, name, cron, time_zone, template, team, prompt, variables, project, priority,
	jitter_ms, overlap, catch_up, catch_up_limit, paused, next_tick, next_fire_at, last_tick, last_status, last_reason,
	COALESCE(last_run_id::text, ''), missed, created_at, updated_at`

func scanSchedule(row pgx.Row) (Schedule, error) {
	var s Schedule
	var jitterMS int64
	err := row.Scan(&s.ID, &s.Owner, &s.Name, &s.Cron, &s.TimeZone, &s.Template, &s.Team, &s.Prompt, &s.Variables, &s.Project, &s.Priority,
		&jitterMS, &s.Overlap, &s.CatchUp, &s.CatchUpLimit, &s.Paused, &s.NextTick, &s.NextFireAt, &s.LastTick, &s.LastStatus, &s.LastReason,
		&s.LastRunID, &s.Missed, &s.CreatedAt, &s.UpdatedAt)
	s.Jitter = time.Duration(jitterMS) * time.Millisecond
	return s, err
}

const fireCols = `id, schedule_id, tick, fire_at, status, reason, detail, COALESCE(run_id::text, ''), request, attempts, claimed_by, claimed_at, updated_at`

func scanFire(row pgx.Row) (ScheduleFire, error) {
	var f ScheduleFire
	err := row.Scan(&f.ID, &f.ScheduleID, &f.Tick, &f.FireAt, &f.Status, &f.Reason, &f.Detail, &f.RunID, &f.Request, &f.Attempts, &f.ClaimedBy, &f.ClaimedAt, &f.UpdatedAt)
	return f, err
}

// NewScheduleID makes a schedule id: sch_ and 16 base-36 characters.
func NewScheduleID() string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 16)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(digits))))
		if err != nil {
			panic(err) // crypto/rand never fails on Linux
		}
		b[i] = digits[n.Int64()]
	}
	return "sch_" + string(b)
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

// CreateSchedule inserts sc (ID made when empty); ErrScheduleExists when its
// owner has a schedule of that name.
func (s *Store) CreateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	if sc.ID == "" {
		sc.ID = NewScheduleID()
	}
	if len(sc.Variables) == 0 {
		sc.Variables = json.RawMessage(`{}`)
	}
	out, err := scanSchedule(s.db.QueryRow(ctx, `INSERT INTO schedules (id, owner, name, cron, time_zone, template, team, prompt, variables,
			project, priority, jitter_ms, overlap, catch_up, catch_up_limit, paused, next_tick, next_fire_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) RETURNING `+scheduleCols,
		sc.ID, sc.Owner, sc.Name, sc.Cron, sc.TimeZone, sc.Template, nullJSON(sc.Team), sc.Prompt, []byte(sc.Variables),
		sc.Project, sc.Priority, sc.Jitter.Milliseconds(), sc.Overlap, sc.CatchUp, sc.CatchUpLimit, sc.Paused, sc.NextTick, sc.NextFireAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return out, fmt.Errorf("%w: %s", ErrScheduleExists, sc.Name)
	}
	if err != nil {
		return out, fmt.Errorf("create schedule %s: %w", sc.Name, err)
	}
	return out, nil
}

// ScheduleIdempotencyTTL is how long a schedule's Idempotency-Key answers
// with it (as a run submission's, submit.DefaultIdempotencyTTL).
const ScheduleIdempotencyTTL = 24 * time.Hour

// CreateScheduleOnce is CreateSchedule under an Idempotency-Key: when the
// owner's key made a schedule within ScheduleIdempotencyTTL, that schedule is
// the answer (replayed) if requestHash matches, else ErrIdempotencyMismatch;
// an expired key is taken over by the new schedule.
func (s *Store) CreateScheduleOnce(ctx context.Context, sc Schedule, key, requestHash string) (out Schedule, replayed bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('schedule-key:' || $1 || ':' || $2, 0))`, sc.Owner, key); err != nil {
			return fmt.Errorf("lock idempotency key: %w", err)
		}
		var id, hash string
		var fresh bool
		err := tx.QueryRow(ctx, `SELECT id, request_hash, created_at > now() - $3::bigint * interval '1 microsecond' FROM schedules
			WHERE owner = $1 AND idempotency_key = $2`, sc.Owner, key, ScheduleIdempotencyTTL.Microseconds()).Scan(&id, &hash, &fresh)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("idempotency key: %w", err)
		case fresh && hash != requestHash:
			return ErrIdempotencyMismatch
		case fresh:
			replayed = true
			out, err = InTx(tx).GetSchedule(ctx, id)
			return err
		default:
			if _, err := tx.Exec(ctx, `UPDATE schedules SET idempotency_key = NULL WHERE id = $1`, id); err != nil {
				return fmt.Errorf("expire idempotency key: %w", err)
			}
		}
		if out, err = InTx(tx).CreateSchedule(ctx, sc); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE schedules SET idempotency_key = $2, request_hash = $3 WHERE id = $1`, out.ID, key, requestHash)
		return err
	})
	return out, replayed, err
}

// GetSchedule loads a schedule; ErrNotFound when there is none.
func (s *Store) GetSchedule(ctx context.Context, id string) (Schedule, error) {
	sc, err := scanSchedule(s.db.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return sc, ErrNotFound
	}
	return sc, lookupErr(err, "get schedule "+id)
}

// ListSchedules lists one owner's schedules ("" for everyone's), by name.
func (s *Store) ListSchedules(ctx context.Context, owner string, limit int) ([]Schedule, error) {
	return queryRows(ctx, s.db, "list schedules", []Schedule{}, rowsOf(scanSchedule), `SELECT `+scheduleCols+` FROM schedules
		WHERE $1 = '' OR owner = $1 ORDER BY owner, name LIMIT $2`, owner, limit)
}

// UpdateSchedule writes sc's definition, pause flag and next tick (its owner,
// its id and its history stay); ErrNotFound when it is gone, ErrScheduleExists
// when the new name is taken.
func (s *Store) UpdateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	out, err := scanSchedule(s.db.QueryRow(ctx, `UPDATE schedules SET name = $2, cron = $3, time_zone = $4, template = $5, team = $6,
			prompt = $7, variables = $8, project = $9, priority = $10, jitter_ms = $11, overlap = $12, catch_up = $13,
			catch_up_limit = $14, paused = $15, next_tick = $16, next_fire_at = $17, updated_at = now()
		WHERE id = $1 RETURNING `+scheduleCols,
		sc.ID, sc.Name, sc.Cron, sc.TimeZone, sc.Template, nullJSON(sc.Team), sc.Prompt, []byte(sc.Variables), sc.Project, sc.Priority,
		sc.Jitter.Milliseconds(), sc.Overlap, sc.CatchUp, sc.CatchUpLimit, sc.Paused, sc.NextTick, sc.NextFireAt))
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return out, ErrNotFound
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return out, fmt.Errorf("%w: %s", ErrScheduleExists, sc.Name)
	case err != nil:
		return out, fmt.Errorf("update schedule %s: %w", sc.ID, err)
	}
	return out, nil
}

// DeleteSchedule removes a schedule and its fires; ErrNotFound when it is gone.
// Runs it started are kept.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ListScheduleFires lists a schedule's fires, latest tick first; before (when
// non-zero) pages: only ticks before it.
func (s *Store) ListScheduleFires(ctx context.Context, id string, before time.Time, limit int) ([]ScheduleFire, error) {
	return queryRows(ctx, s.db, "list schedule fires", []ScheduleFire{}, rowsOf(scanFire), `SELECT `+fireCols+` FROM schedule_fires
		WHERE schedule_id = $1 AND ($2::timestamptz IS NULL OR tick < $2) ORDER BY tick DESC LIMIT $3`, id, nullTime(before), limit)
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// FireClaim is what a scheduler decided for one due schedule: the fires to
// insert (claimed, or missed) and where the schedule goes next.
type FireClaim struct {
	Fires []ScheduleFire
	// NextTick and NextFireAt replace the schedule's (nil: it never fires again).
	NextTick, NextFireAt *time.Time
	// Missed is how many ticks were missed in all (more than Fires may record).
	Missed int64
}

// ClaimDueSchedules claims the ticks of up to limit schedules due at now, in
// one transaction: it locks the due schedules (SELECT … FOR UPDATE SKIP LOCKED,
// so schedulers running at once take different schedules), asks plan what to do
// with each, inserts the fires with ON CONFLICT (schedule_id, tick) DO NOTHING —
// a tick is claimed once, whoever asks — and advances each schedule's next
// tick. It returns the fires this call inserted, claimed and missed alike.
func (s *Store) ClaimDueSchedules(ctx context.Context, now time.Time, limit int, by string, plan func(Schedule) FireClaim) ([]ScheduleFire, error) {
	var out []ScheduleFire
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		due, err := queryRows(ctx, tx, "due schedules", nil, rowsOf(scanSchedule), `SELECT `+scheduleCols+` FROM schedules
			WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
		if err != nil {
			return err
		}
		for _, sc := range due {
			c := plan(sc)
			var last *ScheduleFire
			for _, f := range c.Fires {
				ins, err := scanFire(tx.QueryRow(ctx, `INSERT INTO schedule_fires (schedule_id, tick, fire_at, status, reason, detail, request, claimed_by, claimed_at, updated_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) ON CONFLICT (schedule_id, tick) DO NOTHING RETURNING `+fireCols,
					sc.ID, f.Tick, f.FireAt, f.Status, f.Reason, f.Detail, nullJSON(f.Request), by, now))
				if errors.Is(err, pgx.ErrNoRows) {
					continue // claimed before
				}
				if err != nil {
					return fmt.Errorf("claim tick %s of schedule %s: %w", f.Tick.Format(time.RFC3339), sc.ID, err)
				}
				out = append(out, ins)
				last = &ins
			}
			q := `UPDATE schedules SET next_tick = $2, next_fire_at = $3, missed = missed + $4 WHERE id = $1`
			args := []any{sc.ID, c.NextTick, c.NextFireAt, c.Missed}
			if last != nil && last.Status != FireClaimed {
				q = `UPDATE schedules SET next_tick = $2, next_fire_at = $3, missed = missed + $4, last_tick = $5, last_status = $6, last_reason = $7 WHERE id = $1`
				args = append(args, last.Tick, last.Status, last.Reason)
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return fmt.Errorf("advance schedule %s: %w", sc.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PendingFires lists fires still to decide: deferred ones, and claimed ones
// claimed at or before claimedBefore (a scheduler that claimed them died, or
// its submit failed). Oldest tick first.
func (s *Store) PendingFires(ctx context.Context, claimedBefore time.Time, limit int) ([]ScheduleFire, error) {
	return queryRows(ctx, s.db, "pending schedule fires", nil, rowsOf(scanFire), `SELECT `+fireCols+` FROM schedule_fires
		WHERE status = 'deferred' OR (status = 'claimed' AND claimed_at <= $1) ORDER BY tick LIMIT $2`, claimedBefore, limit)
}

// LockSchedule runs fn in a transaction holding the schedule's advisory lock,
// with a Store on that transaction: the decisions about one schedule's fires
// (overlap, submit, record) never interleave across schedulers.
func (s *Store) LockSchedule(ctx context.Context, id string, fn func(tx *Store) error) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('schedule:' || $1, 0))`, id); err != nil {
			return fmt.Errorf("lock schedule %s: %w", id, err)
		}
		return fn(InTx(tx))
	})
}

// GetFire loads one fire; ErrNotFound when it is gone (its schedule deleted).
func (s *Store) GetFire(ctx context.Context, id int64) (ScheduleFire, error) {
	f, err := scanFire(s.db.QueryRow(ctx, `SELECT `+fireCols+` FROM schedule_fires WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return f, ErrNotFound
	}
	return f, lookupErr(err, fmt.Sprintf("get schedule fire %d", id))
}

// ActiveScheduleRuns lists the runs a schedule started that are not terminal,
// oldest tick first, leaving out the fire except.
func (s *Store) ActiveScheduleRuns(ctx context.Context, scheduleID string, except int64) ([]string, error) {
	return queryRows(ctx, s.db, "active schedule runs", []string{}, pgx.RowTo[string], `SELECT f.run_id::text FROM schedule_fires f
		JOIN runs r ON r.id = f.run_id
		WHERE f.schedule_id = $1 AND f.id <> $2 AND r.status IN ('queued','running','waiting') ORDER BY f.tick`, scheduleID, except)
}

// HasDeferredFire reports whether the schedule has a deferred fire other than except.
func (s *Store) HasDeferredFire(ctx context.Context, scheduleID string, except int64) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schedule_fires WHERE schedule_id = $1 AND id <> $2 AND status = 'deferred')`,
		scheduleID, except).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("deferred fires of schedule %s: %w", scheduleID, err)
	}
	return ok, nil
}

// DecideFire records a fire's outcome: status (FireSubmitted with runID, or a
// final status with its reason and detail, or FireDeferred) and the schedule's
// last tick. The snapshot request is dropped once the fire is final.
func (s *Store) DecideFire(ctx context.Context, f ScheduleFire, status, reason, detail, runID string) error {
	var run any
	if runID != "" {
		run = runID
	}
	keep := status == FireDeferred || status == FireClaimed
	tag, err := s.db.Exec(ctx, `UPDATE schedule_fires SET status = $2, reason = $3, detail = left($4, 500), run_id = $5,
			request = CASE WHEN $6 THEN request END, attempts = attempts + 1, updated_at = now()
		WHERE id = $1 AND status IN ('claimed','deferred')`, f.ID, status, reason, detail, run, keep)
	if err != nil {
		return fmt.Errorf("decide schedule fire %d: %w", f.ID, err)
	}
	if tag.RowsAffected() == 0 || keep && status == FireClaimed {
		return nil
	}
	if _, err := s.db.Exec(ctx, `UPDATE schedules SET last_tick = $2, last_status = $3, last_reason = $4,
			last_run_id = COALESCE($5::uuid, last_run_id) WHERE id = $1 AND (last_tick IS NULL OR last_tick <= $2)`,
		f.ScheduleID, f.Tick, status, reason, run); err != nil {
		return fmt.Errorf("schedule %s: last tick: %w", f.ScheduleID, err)
	}
	return nil
}
