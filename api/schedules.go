package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
)

// Bounds of a schedule's fields.
const (
	MaxScheduleName = 100
	// DefaultNextFires and MaxNextFires bound GET /api/schedules/:id?next=.
	DefaultNextFires = 5
	MaxNextFires     = 50
)

// scheduleRequest is the body of POST /api/schedules.
type scheduleRequest struct {
	// Name is unique among its owner's schedules (1-100 characters).
	Name string `json:"name"`
	// Cron is five fields (minute hour day-of-month month day-of-week), a
	// descriptor (@hourly, @daily, @every 90m), or six fields with seconds first
	// when schedules.min_interval is under a minute.
	Cron string `json:"cron"`
	// TimeZone is the IANA time zone the expression is read in (default UTC).
	TimeZone string `json:"time_zone,omitempty"`
	// Template is a shipped template's name; give it or team, not both.
	Template string `json:"template,omitempty"`
	// Team is an inline team (a template object).
	Team      json.RawMessage `json:"team,omitempty"`
	Prompt    string          `json:"prompt"`
	Variables map[string]any  `json:"variables,omitempty"`
	// Project is one of the owner's project slugs ("" for a scratch workspace per run).
	Project string `json:"project,omitempty"`
	// Priority is the runs' priority, 1 (lowest) to 5 (0: the default), at most
	// what the owner's roles allow when a tick fires.
	Priority int `json:"priority,omitempty" jsonschema:"minimum=0,maximum=5"`
	// Jitter delays each tick by up to this duration (Go syntax: 30s, 5m), the
	// same delay for a tick in every scheduler; shorter than the gap between
	// ticks and at most schedules.max_jitter.
	Jitter string `json:"jitter,omitempty"`
	// Overlap is what a tick does while the schedule's previous run is in
	// flight: skip (default), queue_one, cancel_previous or allow_all.
	Overlap string `json:"overlap,omitempty" jsonschema:"enum=skip,enum=queue_one,enum=cancel_previous,enum=allow_all"`
	// CatchUp is which ticks missed while no scheduler ran still fire: none
	// (default), last, or all (the last catch_up_limit).
	CatchUp string `json:"catch_up,omitempty" jsonschema:"enum=none,enum=last,enum=all"`
	// CatchUpLimit is N of catch_up all (1 to schedules.max_catch_up).
	CatchUpLimit int `json:"catch_up_limit,omitempty" jsonschema:"minimum=0"`
	// Paused creates the schedule paused.
	Paused bool `json:"paused,omitempty"`
}

// JSONSchemaProperty documents team as the template it is parsed into.
func (scheduleRequest) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return templates.Template{}
	}
	return nil
}

// schedulePatch is the body of PATCH /api/schedules/:id: the fields to change.
type schedulePatch struct {
	Name     *string `json:"name,omitempty"`
	Cron     *string `json:"cron,omitempty"`
	TimeZone *string `json:"time_zone,omitempty"`
	// Template replaces the team with a shipped template.
	Template *string `json:"template,omitempty"`
	// Team replaces the template with an inline team.
	Team      json.RawMessage `json:"team,omitempty"`
	Prompt    *string         `json:"prompt,omitempty"`
	Variables map[string]any  `json:"variables,omitempty"`
	Project   *string         `json:"project,omitempty"`
	Priority  *int            `json:"priority,omitempty" jsonschema:"minimum=0,maximum=5"`
	Jitter    *string         `json:"jitter,omitempty"`
	Overlap   *string         `json:"overlap,omitempty" jsonschema:"enum=skip,enum=queue_one,enum=cancel_previous,enum=allow_all"`
	CatchUp   *string         `json:"catch_up,omitempty" jsonschema:"enum=none,enum=last,enum=all"`
	// CatchUpLimit is N of catch_up all.
	CatchUpLimit *int `json:"catch_up_limit,omitempty" jsonschema:"minimum=0"`
}

// JSONSchemaProperty documents team as the template it is parsed into.
func (schedulePatch) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return templates.Template{}
	}
	return nil
}

// scheduleView is a schedule as the API answers it.
type scheduleView struct {
	ID       string `json:"id"`
	Owner    string `json:"owner"`
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone"`
	Template string `json:"template,omitempty"`
	// Team is the inline team when there is no template.
	Team         json.RawMessage `json:"team,omitempty"`
	Prompt       string          `json:"prompt"`
	Variables    map[string]any  `json:"variables"`
	Project      string          `json:"project,omitempty"`
	Priority     int             `json:"priority,omitempty"`
	Jitter       string          `json:"jitter,omitempty"`
	Overlap      string          `json:"overlap" jsonschema:"enum=skip,enum=queue_one,enum=cancel_previous,enum=allow_all"`
	CatchUp      string          `json:"catch_up" jsonschema:"enum=none,enum=last,enum=all"`
	CatchUpLimit int             `json:"catch_up_limit,omitempty"`
	Paused       bool            `json:"paused"`
	// NextFires are the next ticks (none while paused) with the time each
	// fires at (the tick plus its jitter).
	NextFires []scheduleTick `json:"next_fires"`
	// LastTick is the latest tick decided: LastStatus (submitted, skipped,
	// missed, failed, deferred), LastReason, LastRunID.
	LastTick   *time.Time `json:"last_tick,omitempty"`
	LastStatus string     `json:"last_status,omitempty"`
	LastReason string     `json:"last_reason,omitempty"`
	LastRunID  string     `json:"last_run_id,omitempty"`
	// Missed counts the ticks missed while no scheduler ran.
	Missed    int64     `json:"missed"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// JSONSchemaProperty documents team as the object it was given as (a
// template object, as the request's team).
func (scheduleView) JSONSchemaProperty(prop string) any {
	if prop == "team" {
		return map[string]any{}
	}
	return nil
}

// scheduleTick is one upcoming tick of a schedule.
type scheduleTick struct {
	Tick   time.Time `json:"tick"`
	FireAt time.Time `json:"fire_at"`
}

type scheduleList struct {
	Schedules []scheduleView `json:"schedules"`
}

// fireView is one tick of a schedule a scheduler claimed.
type fireView struct {
	Tick   time.Time `json:"tick"`
	FireAt time.Time `json:"fire_at"`
	Status string    `json:"status" jsonschema:"enum=claimed,enum=deferred,enum=submitted,enum=skipped,enum=missed,enum=failed"`
	// Reason says why a tick was skipped, missed or failed (overlap,
	// queue_full, downtime, owner_gone, forbidden, …).
	Reason    string    `json:"reason,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	Attempts  int       `json:"attempts"`
	ClaimedBy string    `json:"claimed_by"`
	ClaimedAt time.Time `json:"claimed_at"`
}

// fireList is a page of a schedule's fires, latest tick first.
type fireList struct {
	Fires []fireView `json:"fires"`
	// NextBefore is the before= of the next (older) page; absent on the last.
	NextBefore *time.Time `json:"next_before,omitempty"`
}

// scheduleParam documents the :id of a schedule's routes.
func scheduleParam(r route) route {
	return r.pathParam("id", "The schedule's id (sch_…).", map[string]any{"type": "string", "pattern": "^sch_", "maxLength": 44})
}

// patchRoute is a PATCH row of the route table.
func patchRoute(path, summary string, h fiber.Handler) route {
	return route{method: http.MethodPatch, path: path, summary: summary, handler: h}
}

func (s *Server) viewSchedule(sc store.Schedule, next int) scheduleView {
	v := scheduleView{ID: sc.ID, Owner: sc.Owner, Name: sc.Name, Cron: sc.Cron, TimeZone: sc.TimeZone, Template: sc.Template,
		Prompt: sc.Prompt, Project: sc.Project, Priority: sc.Priority, Overlap: sc.Overlap, CatchUp: sc.CatchUp,
		CatchUpLimit: sc.CatchUpLimit, Paused: sc.Paused, NextFires: []scheduleTick{}, LastTick: sc.LastTick,
		LastStatus: sc.LastStatus, LastReason: sc.LastReason, LastRunID: sc.LastRunID, Missed: sc.Missed,
		CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
	if sc.Template == "" {
		v.Team = sc.Team
	}
	if sc.Jitter > 0 {
		v.Jitter = sc.Jitter.String()
	}
	_ = json.Unmarshal(sc.Variables, &v.Variables)
	if v.Variables == nil {
		v.Variables = map[string]any{}
	}
	if sc.Paused || sc.NextTick == nil || next == 0 {
		return v
	}
	spec, err := schedules.ParseSpec(sc.Cron, sc.TimeZone, time.Second, time.Now())
	if err != nil {
		return v
	}
	ticks := append([]time.Time{*sc.NextTick}, spec.NextN(*sc.NextTick, next-1)...)
	for _, t := range ticks {
		v.NextFires = append(v.NextFires, scheduleTick{Tick: t, FireAt: t.Add(schedules.JitterOffset(sc.ID, t, sc.Jitter))})
	}
	return v
}

// scheduleInvalid answers a schedules.InvalidError as a 400 naming its field.
func scheduleInvalid(err error) error {
	var ie *schedules.InvalidError
	if errors.As(err, &ie) {
		return badRequest(ie.Field, "%s", ie.Message)
	}
	return err
}

// checkSchedule validates a schedule as created or changed and sets its next
// tick from now: everything a tick's submit would refuse that does not depend
// on the owner's roles at fire time (the template or team, its variables, the
// project) and the cron expression, time zone, jitter and policies.
func (s *Server) checkSchedule(c *fiber.Ctx, sc *store.Schedule) error {
	cfg := s.d.Schedules.WithDefaults()
	sc.Name = strings.TrimSpace(sc.Name)
	if sc.Name == "" || len(sc.Name) > MaxScheduleName || strings.ContainsFunc(sc.Name, unicode.IsControl) {
		return badRequest("name", "name is required: 1-%d characters, no control characters", MaxScheduleName)
	}
	if strings.TrimSpace(sc.Prompt) == "" {
		return badRequest("prompt", "prompt is required")
	}
	if len(sc.Prompt) > submit.MaxPromptBytes {
		return badRequest("prompt", "prompt is over %d bytes", submit.MaxPromptBytes)
	}
	now := time.Now()
	spec, err := schedules.ParseSpec(sc.Cron, sc.TimeZone, cfg.MinInterval, now)
	if err != nil {
		return scheduleInvalid(err)
	}
	sc.Cron, sc.TimeZone = spec.Expr, spec.Loc.String()
	if err := schedules.CheckJitter(sc.Jitter, cfg.MaxJitter, spec); err != nil {
		return scheduleInvalid(err)
	}
	switch sc.Overlap {
	case "":
		sc.Overlap = store.OverlapSkip
	case store.OverlapSkip, store.OverlapQueueOne, store.OverlapCancelPrevious, store.OverlapAllowAll:
	default:
		return badRequest("overlap", "overlap %.40q is not one of skip, queue_one, cancel_previous, allow_all", sc.Overlap)
	}
	switch sc.CatchUp {
	case "", store.CatchUpNone, store.CatchUpLast:
		if sc.CatchUp == "" {
			sc.CatchUp = store.CatchUpNone
		}
		if sc.CatchUpLimit != 0 {
			return badRequest("catch_up_limit", "catch_up_limit applies to catch_up all only")
		}
	case store.CatchUpAll:
		if sc.CatchUpLimit < 1 || sc.CatchUpLimit > cfg.MaxCatchUp {
			return badRequest("catch_up_limit", "catch_up all needs catch_up_limit from 1 to %d (schedules.max_catch_up), got %d", cfg.MaxCatchUp, sc.CatchUpLimit)
		}
	default:
		return badRequest("catch_up", "catch_up %.40q is not one of none, last, all", sc.CatchUp)
	}
	if sc.Priority < 0 || sc.Priority > 5 {
		return badRequest("priority", "priority must be 1 (lowest) to 5, or 0 for the default")
	}
	team, err := s.scheduleTeam(sc)
	if err != nil {
		return err
	}
	var vars map[string]any
	_ = json.Unmarshal(sc.Variables, &vars)
	if vars == nil {
		vars = map[string]any{}
	}
	if _, err := team.Render(vars); err != nil {
		return badRequest("variables", "%v", err)
	}
	if sc.Project != "" {
		p, err := s.projectFor(c, sc.Project)
		if err != nil {
			return err
		}
		if p.Owner != sc.Owner {
			return badRequest("project", "project %q is not the schedule owner's (%s)", p.Slug, sc.Owner)
		}
	}
	sc.NextTick, sc.NextFireAt = nil, nil
	if next := spec.Next(now); !next.IsZero() {
		at := next.Add(schedules.JitterOffset(sc.ID, next, sc.Jitter))
		sc.NextTick, sc.NextFireAt = &next, &at
	}
	return nil
}

// scheduleTeam loads the schedule's template, or parses and checks its inline
// team, as the run-from-template and run routes would.
func (s *Server) scheduleTeam(sc *store.Schedule) (templates.Template, error) {
	hasTeam := len(bytes.TrimSpace(sc.Team)) > 0 && string(bytes.TrimSpace(sc.Team)) != "null"
	switch {
	case sc.Template != "" && hasTeam:
		return templates.Template{}, badRequest("team", "give template or team, not both")
	case sc.Template != "":
		sc.Team = nil
		team, err := s.d.Templates.Load(sc.Template, s.d.Registry)
		if errors.Is(err, templates.ErrUnknownTemplate) {
			return team, badRequest("template", "%v", err)
		}
		if err != nil {
			return team, badRequest("template", "template %q cannot be used: %v", sc.Template, err)
		}
		return team, nil
	case hasTeam:
		team, err := templates.ParseJSON(sc.Team)
		if err != nil {
			return team, badRequest("team", "%v", err)
		}
		if err := team.Validate(s.d.Registry); err != nil {
			return team, badRequest("team", "%v", err)
		}
		if owner, taken, err := s.d.Templates.Owner(team.Name); err != nil {
			return team, fmt.Errorf("inline team name: %w", err)
		} else if taken {
			return team, badRequest("team", "name %q belongs to the shipped template %q: an inline team cannot use it", team.Name, owner)
		}
		return team, nil
	default:
		return templates.Template{}, badRequest("template", "template or team is required")
	}
}

func parseJitter(j string) (time.Duration, error) {
	if j == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(j)
	if err != nil {
		return 0, badRequest("jitter", "jitter %.40q is not a duration such as 30s or 5m", j)
	}
	return d, nil
}

func (s *Server) createSchedule(c *fiber.Ctx) error {
	var req scheduleRequest
	if err := decode(c.Body(), &req); err != nil {
		return err
	}
	jitter, err := parseJitter(req.Jitter)
	if err != nil {
		return err
	}
	vars, _ := json.Marshal(req.Variables)
	sc := store.Schedule{ID: store.NewScheduleID(), Owner: principal(c), Name: req.Name, Cron: req.Cron, TimeZone: req.TimeZone,
		Template: req.Template, Team: req.Team, Prompt: req.Prompt, Variables: vars, Project: req.Project, Priority: req.Priority,
		Jitter: jitter, Overlap: req.Overlap, CatchUp: req.CatchUp, CatchUpLimit: req.CatchUpLimit, Paused: req.Paused}
	if err := s.checkSchedule(c, &sc); err != nil {
		return err
	}
	var out store.Schedule
	replayed := false
	if key := c.Get(IdempotencyKeyHeader); key != "" {
		if len(key) > 255 || strings.ContainsFunc(key, unicode.IsControl) {
			return badRequest(IdempotencyKeyHeader, "the Idempotency-Key must be at most 255 printable characters")
		}
		// The body as decoded (key order and spacing do not count), its
		// jitter as the duration it means.
		canon, _ := json.Marshal(req)
		sum := sha256.Sum256(canon)
		out, replayed, err = s.d.Store.CreateScheduleOnce(c.UserContext(), sc, key, hex.EncodeToString(sum[:]))
		if errors.Is(err, store.ErrIdempotencyMismatch) {
			return &Error{Status: http.StatusUnprocessableEntity, Field: IdempotencyKeyHeader,
				Message: "this Idempotency-Key was used with another schedule in the last day: use a new key for a new request"}
		}
	} else {
		out, err = s.d.Store.CreateSchedule(c.UserContext(), sc)
	}
	if errors.Is(err, store.ErrScheduleExists) {
		return &Error{Status: http.StatusConflict, Field: "name", Message: fmt.Sprintf("you have a schedule named %q", sc.Name)}
	}
	if err != nil {
		return err
	}
	if replayed {
		c.Set(IdempotentReplayedHeader, "true")
	} else {
		s.d.Log.Info("schedule created", "schedule_id", out.ID, "owner", out.Owner, "cron", out.Cron, "time_zone", out.TimeZone)
	}
	return c.Status(http.StatusCreated).JSON(s.viewSchedule(out, DefaultNextFires))
}

func (s *Server) listSchedules(c *fiber.Ctx) error {
	scs, err := s.d.Store.ListSchedules(c.UserContext(), ownerScope(c), 1000)
	if err != nil {
		return err
	}
	out := scheduleList{Schedules: make([]scheduleView, 0, len(scs))}
	for _, sc := range scs {
		out.Schedules = append(out.Schedules, s.viewSchedule(sc, 1))
	}
	return c.JSON(out)
}

// scheduleFor loads the route's schedule for the caller: its owner's, or any
// for a reader of everything; another principal's is a 404, like a missing one.
func (s *Server) scheduleFor(c *fiber.Ctx) (store.Schedule, error) {
	id := c.Params("id")
	notFound := &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no schedule %.80q", id)}
	if !strings.HasPrefix(id, "sch_") || len(id) > 44 {
		return store.Schedule{}, notFound
	}
	sc, err := s.d.Store.GetSchedule(c.UserContext(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sc.Owner != principal(c) && !seesAllRuns(c)) {
		return sc, notFound
	}
	return sc, err
}

// ownSchedule is scheduleFor for changes: its owner or an admin.
func (s *Server) ownSchedule(c *fiber.Ctx) (store.Schedule, error) {
	sc, err := s.scheduleFor(c)
	if err == nil && sc.Owner != principal(c) && !hasRole(c, RoleAdmin) {
		return sc, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("schedule %s belongs to %s", sc.ID, sc.Owner)}
	}
	return sc, err
}

func (s *Server) getSchedule(c *fiber.Ctx) error {
	sc, err := s.scheduleFor(c)
	if err != nil {
		return err
	}
	next := DefaultNextFires
	if q := c.Query("next"); q != "" {
		if _, err := fmt.Sscanf(q, "%d", &next); err != nil || next < 0 || next > MaxNextFires || fmt.Sprint(next) != q {
			return badRequest("next", "next must be an integer from 0 to %d", MaxNextFires)
		}
	}
	return c.JSON(s.viewSchedule(sc, next))
}

func (s *Server) patchSchedule(c *fiber.Ctx) error {
	sc, err := s.ownSchedule(c)
	if err != nil {
		return err
	}
	var p schedulePatch
	if err := decode(c.Body(), &p); err != nil {
		return err
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&sc.Name, p.Name)
	set(&sc.Cron, p.Cron)
	set(&sc.TimeZone, p.TimeZone)
	set(&sc.Prompt, p.Prompt)
	set(&sc.Project, p.Project)
	set(&sc.Overlap, p.Overlap)
	if p.Template != nil {
		sc.Template, sc.Team = *p.Template, nil
	}
	if len(p.Team) > 0 {
		sc.Team, sc.Template = p.Team, ""
	}
	if p.Variables != nil {
		sc.Variables, _ = json.Marshal(p.Variables)
	}
	if p.Priority != nil {
		sc.Priority = *p.Priority
	}
	if p.CatchUp != nil {
		sc.CatchUp = *p.CatchUp
		if *p.CatchUp != store.CatchUpAll && p.CatchUpLimit == nil {
			sc.CatchUpLimit = 0
		}
	}
	if p.CatchUpLimit != nil {
		sc.CatchUpLimit = *p.CatchUpLimit
	}
	if p.Jitter != nil {
		if sc.Jitter, err = parseJitter(*p.Jitter); err != nil {
			return err
		}
	}
	if err := s.checkSchedule(c, &sc); err != nil {
		return err
	}
	out, err := s.d.Store.UpdateSchedule(c.UserContext(), sc)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no schedule %q", sc.ID)}
	case errors.Is(err, store.ErrScheduleExists):
		return &Error{Status: http.StatusConflict, Field: "name", Message: fmt.Sprintf("%s has a schedule named %q", sc.Owner, sc.Name)}
	case err != nil:
		return err
	}
	return c.JSON(s.viewSchedule(out, DefaultNextFires))
}

// setPaused pauses or resumes a schedule. Resuming starts from the next tick
// after now: ticks that passed while it was paused are neither missed nor
// caught up.
func (s *Server) setPaused(paused bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		sc, err := s.ownSchedule(c)
		if err != nil {
			return err
		}
		if sc.Paused == paused {
			return c.JSON(s.viewSchedule(sc, DefaultNextFires))
		}
		sc.Paused = paused
		if !paused {
			spec, err := schedules.ParseSpec(sc.Cron, sc.TimeZone, time.Second, time.Now())
			if err != nil {
				return scheduleInvalid(err)
			}
			sc.NextTick, sc.NextFireAt = nil, nil
			if next := spec.Next(time.Now()); !next.IsZero() {
				at := next.Add(schedules.JitterOffset(sc.ID, next, sc.Jitter))
				sc.NextTick, sc.NextFireAt = &next, &at
			}
		}
		out, err := s.d.Store.UpdateSchedule(c.UserContext(), sc)
		if errors.Is(err, store.ErrNotFound) {
			return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no schedule %q", sc.ID)}
		}
		if err != nil {
			return err
		}
		s.d.Log.Info("schedule paused or resumed", "schedule_id", sc.ID, "paused", paused, "by", principal(c))
		return c.JSON(s.viewSchedule(out, DefaultNextFires))
	}
}

func (s *Server) deleteSchedule(c *fiber.Ctx) error {
	sc, err := s.ownSchedule(c)
	if err != nil {
		return err
	}
	if err := s.d.Store.DeleteSchedule(c.UserContext(), sc.ID); errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Field: "id", Message: fmt.Sprintf("no schedule %q", sc.ID)}
	} else if err != nil {
		return err
	}
	s.d.Log.Info("schedule deleted", "schedule_id", sc.ID, "owner", sc.Owner, "by", principal(c))
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) listFires(c *fiber.Ctx) error {
	sc, err := s.scheduleFor(c)
	if err != nil {
		return err
	}
	limit, err := queryLimit(c, 100, 1000)
	if err != nil {
		return err
	}
	var before time.Time
	if b := c.Query("before"); b != "" {
		if before, err = time.Parse(time.RFC3339Nano, b); err != nil {
			return badRequest("before", "before must be an RFC 3339 time (next_before of the previous page)")
		}
	}
	fires, err := s.d.Store.ListScheduleFires(c.UserContext(), sc.ID, before, limit)
	if err != nil {
		return err
	}
	out := fireList{Fires: make([]fireView, 0, len(fires))}
	for _, f := range fires {
		out.Fires = append(out.Fires, fireView{Tick: f.Tick, FireAt: f.FireAt, Status: f.Status, Reason: f.Reason, Detail: f.Detail,
			RunID: f.RunID, Attempts: f.Attempts, ClaimedBy: f.ClaimedBy, ClaimedAt: f.ClaimedAt})
	}
	if len(fires) == limit {
		last := fires[len(fires)-1].Tick
		out.NextBefore = &last
	}
	return c.JSON(out)
}
