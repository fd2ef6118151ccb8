package fleet

import (
	"context"
	"fmt"
	"slices"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/metrics"
	"github.com/aetherium-engine/aetherium/schedules"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/toolbox"
)

// Schedules builds the scheduler role's schedule loop (package schedules) on
// this process's store: d's zero fields are filled in with the fleet's parts
// (the submitter, the principals of api.tokens, run cancellation, the
// metrics, the log), so a test passes only its clock, its name and its hooks.
func (f *Fleet) Schedules(d schedules.Deps) (*schedules.Scheduler, error) {
	if d.Store == nil {
		d.Store = f.Store
	}
	if d.Principal == nil {
		d.Principal = f.SchedulePrincipal
	}
	if d.Cancel == nil {
		sub := f.Submitter()
		d.Cancel = func(ctx context.Context, runID, reason string) error {
			_, _, err := sub.Cancel(ctx, runID, reason)
			return err
		}
	}
	if d.Log == nil {
		d.Log = f.Log.With("component", "schedules")
	}
	if d.Metrics == nil {
		m, err := metrics.NewSchedules(f.Metrics.Registry, schedules.Reasons())
		if err != nil {
			return nil, fmt.Errorf("schedule metrics: %w", err)
		}
		d.Metrics = m
	}
	if d.Submit == nil {
		// The scheduler role opens neither the API's catalog nor the streams;
		// submit checks a team against both (its tools, its gpu_services).
		if f.Registry == nil {
			reg, err := toolbox.New(toolbox.Deps{Research: f.Cfg.Research})
			if err != nil {
				return nil, fmt.Errorf("schedules: tool catalog: %w", err)
			}
			f.Registry = reg
		}
		if err := f.openStreams(); err != nil {
			return nil, fmt.Errorf("schedules: %w", err)
		}
		d.Submit = f.Submitter()
	}
	return schedules.New(f.Cfg.Schedules, d), nil
}

// everyRole is what the one local principal of an API without tokens holds.
var everyRole = []string{api.RoleSubmit, api.RoleRead, api.RoleReadAll, api.RoleApprove, api.RoleAdmin}

// SchedulePrincipal resolves a schedule's owner to its roles as api.tokens
// says now: a token whose roles shrank fires with the smaller roles; a token
// removed (or one that lost submit) fires nothing (schedules.ErrOwnerGone,
// ErrOwnerForbidden). Without tokens the API's one principal,
// store.LocalOwner, holds every role.
func (f *Fleet) SchedulePrincipal(_ context.Context, owner string) (submit.Principal, error) {
	tokens := f.Cfg.API.Tokens
	if len(tokens) == 0 {
		if owner == store.LocalOwner {
			return submit.Principal{Name: owner, Roles: slices.Clone(everyRole), Admin: true, ReadAll: true}, nil
		}
		return submit.Principal{}, fmt.Errorf("%w: %q (api.tokens is empty: only %q exists)", schedules.ErrOwnerGone, owner, store.LocalOwner)
	}
	for _, t := range tokens {
		if t.Name != owner {
			continue
		}
		if !slices.Contains(t.Roles, api.RoleSubmit) && !slices.Contains(t.Roles, api.RoleAdmin) {
			return submit.Principal{}, fmt.Errorf("%w: token %q holds neither submit nor admin", schedules.ErrOwnerForbidden, owner)
		}
		admin := slices.Contains(t.Roles, api.RoleAdmin)
		return submit.Principal{Name: owner, Roles: slices.Clone(t.Roles), Admin: admin,
			ReadAll: admin || slices.Contains(t.Roles, api.RoleReadAll)}, nil
	}
	return submit.Principal{}, fmt.Errorf("%w: no api token is named %q", schedules.ErrOwnerGone, owner)
}
