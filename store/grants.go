package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Grant scopes: which runs of the grant's owner it covers.
const (
	GrantScopeRun     = "run"
	GrantScopeProject = "project"
	GrantScopeTeam    = "team"
)

// Grant matches: how a call's arguments are compared with the pattern.
const (
	// GrantExact: the arguments hash to the pattern (an args hash).
	GrantExact = "exact"
	// GrantCommand: run_shell's normalized command words.
	GrantCommand = "command"
	// GrantURLPrefix: every URL of the arguments is under the prefix.
	GrantURLPrefix = "url_prefix"
)

// Grant statuses (computed, not stored).
const (
	GrantActive    = "active"
	GrantExpired   = "expired"
	GrantRevoked   = "revoked"
	GrantSuspended = "suspended"
)

// ErrGrantClosed refuses revoking or confirming a grant that is revoked or
// expired.
var ErrGrantClosed = errors.New("grant is revoked or expired")

// Grant lets the calls of one tool that match a pattern, by the runs of one owner
// in one scope, run without asking a human, until it expires or is revoked, while
// the permissions file is at PolicyRevision.
type Grant struct {
	ID         string    `json:"id"`
	CreatedBy  string    `json:"created_by"`
	CreatedAt  time.Time `json:"created_at"`
	ApprovalID string    `json:"approval_id"`
	// Owner is the principal whose runs it covers (the run's owner).
	Owner string `json:"owner"`
	Scope string `json:"scope"`
	// ScopeID is the run id, the project id or the team name.
	ScopeID        string     `json:"scope_id"`
	Tool           string     `json:"tool"`
	Match          string     `json:"match"`
	Pattern        string     `json:"pattern"`
	PolicyRevision string     `json:"policy_revision"`
	ConfirmedBy    string     `json:"confirmed_by,omitempty"`
	ExpiresAt      time.Time  `json:"expires_at"`
	RevokedAt      *time.Time `json:"revoked_at,omitempty"`
	RevokedBy      string     `json:"revoked_by,omitempty"`
	// Status is GrantActive, GrantExpired, GrantRevoked or GrantSuspended (its
	// revision is not the current one), as of the query.
	Status string `json:"status"`
}

const grantCols = `id, created_by, created_at, approval_id, owner, scope, scope_id, tool, match, pattern, policy_revision,
	confirmed_by, expires_at, revoked_at, revoked_by, expires_at <= now()`

func scanGrant(row pgx.Row) (Grant, error) {
	var g Grant
	var expired bool
	err := row.Scan(&g.ID, &g.CreatedBy, &g.CreatedAt, &g.ApprovalID, &g.Owner, &g.Scope, &g.ScopeID, &g.Tool, &g.Match, &g.Pattern,
		&g.PolicyRevision, &g.ConfirmedBy, &g.ExpiresAt, &g.RevokedAt, &g.RevokedBy, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return g, ErrNotFound
	}
	switch {
	case g.RevokedAt != nil:
		g.Status = GrantRevoked
	case expired:
		g.Status = GrantExpired
	default:
		g.Status = GrantActive
	}
	return g, err
}

// withRevision marks an active grant made under another revision suspended.
func withRevision(gs []Grant, revision string) []Grant {
	for i := range gs {
		if gs[i].Status == GrantActive && revision != "" && gs[i].PolicyRevision != revision {
			gs[i].Status = GrantSuspended
		}
	}
	return gs
}

func insertGrant(ctx context.Context, tx pgx.Tx, g Grant) error {
	_, err := tx.Exec(ctx, `INSERT INTO grants (id, created_by, approval_id, owner, scope, scope_id, tool, match, pattern, policy_revision, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		g.ID, g.CreatedBy, g.ApprovalID, g.Owner, g.Scope, g.ScopeID, g.Tool, g.Match, g.Pattern, g.PolicyRevision, g.ExpiresAt)
	if err != nil {
		return fmt.Errorf("insert grant: %w", err)
	}
	return nil
}

// GrantScope is where a call is made: the grants of these scopes may cover it.
type GrantScope struct {
	Owner, RunID, ProjectID, Team string
}

// LiveGrants lists the unrevoked, unexpired grants of tool that cover calls made
// in sc, whatever their revision (the caller tells suspended ones), oldest first.
func (s *Store) LiveGrants(ctx context.Context, tool string, sc GrantScope) ([]Grant, error) {
	return queryRows(ctx, s.db, "live grants", []Grant{}, rowsOf(scanGrant), `SELECT `+grantCols+` FROM grants
		WHERE revoked_at IS NULL AND expires_at > now() AND owner = $1 AND tool = $2
		AND ((scope = 'run' AND scope_id = $3) OR (scope = 'project' AND $4 <> '' AND scope_id = $4) OR (scope = 'team' AND scope_id = $5))
		ORDER BY created_at, id`, sc.Owner, tool, sc.RunID, sc.ProjectID, sc.Team)
}

// GrantFilter selects grants; empty fields match everything.
type GrantFilter struct {
	Owner string
	// Status is one of the Grant statuses.
	Status string
	Limit  int
}

// ListGrants lists grants, newest first, with statuses as of now under revision.
func (s *Store) ListGrants(ctx context.Context, f GrantFilter, revision string) ([]Grant, error) {
	cond := `true`
	switch f.Status {
	case GrantRevoked:
		cond = `revoked_at IS NOT NULL`
	case GrantExpired:
		cond = `revoked_at IS NULL AND expires_at <= now()`
	case GrantActive:
		cond = `revoked_at IS NULL AND expires_at > now() AND policy_revision = $3`
	case GrantSuspended:
		cond = `revoked_at IS NULL AND expires_at > now() AND policy_revision <> $3`
	}
	gs, err := queryRows(ctx, s.db, "list grants", []Grant{}, rowsOf(scanGrant), `SELECT `+grantCols+` FROM grants
		WHERE ($1 = '' OR owner = $1) AND `+cond+` AND $3::text IS NOT NULL ORDER BY created_at DESC, id LIMIT $2`, f.Owner, f.Limit, revision)
	return withRevision(gs, revision), err
}

// GetGrant loads one grant, its status under revision.
func (s *Store) GetGrant(ctx context.Context, id, revision string) (Grant, error) {
	g, err := scanGrant(s.db.QueryRow(ctx, `SELECT `+grantCols+` FROM grants WHERE id = $1`, id))
	if err != nil {
		return g, lookupErr(err, "get grant")
	}
	return withRevision([]Grant{g}, revision)[0], nil
}

// RevokeGrant revokes a live grant: the next matching call asks again.
// ErrGrantClosed when it is revoked or expired already.
func (s *Store) RevokeGrant(ctx context.Context, id, by, revision string) (Grant, error) {
	return s.changeGrant(ctx, id, revision, `revoked_at = now(), revoked_by = $2`, by)
}

// ConfirmGrant rebinds a live grant to revision (a suspended grant covers calls
// again). ErrGrantClosed when it is revoked or expired.
func (s *Store) ConfirmGrant(ctx context.Context, id, by, revision string) (Grant, error) {
	return s.changeGrant(ctx, id, revision, `policy_revision = $3, confirmed_by = $2`, by)
}

func (s *Store) changeGrant(ctx context.Context, id, revision, set, by string) (Grant, error) {
	g, err := scanGrant(s.db.QueryRow(ctx, `UPDATE grants SET `+set+`
		WHERE id = $1 AND revoked_at IS NULL AND expires_at > now() AND $3::text IS NOT NULL RETURNING `+grantCols, id, by, revision))
	if errors.Is(err, ErrNotFound) {
		if _, gerr := s.GetGrant(ctx, id, revision); gerr != nil {
			return g, gerr
		}
		return g, fmt.Errorf("%w: %s", ErrGrantClosed, id)
	}
	if err != nil {
		return g, fmt.Errorf("change grant %s: %w", id, err)
	}
	return withRevision([]Grant{g}, revision)[0], nil
}
