package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Project is a workspace, a knowledge base and agents' memory that outlive runs.
//
// ID is the project's identity: runs, the workspace, memory, knowledge and MCP
// runs refer to it, never to the slug. Slug is a name, unique among the projects
// that exist (the API's routes name a project by it) but free again once its
// project is deleted; a later project of the same slug, whoever owns it, gets a
// new ID and shares nothing with the old one.
type Project struct {
	ID        string    `json:"id"`
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"created_at"`
	// Workspace is the id of the workspace its runs share: project-<ID>, or
	// project-<slug> for a project made before projects had ids (its files are
	// there). Never given to another project.
	Workspace string `json:"-"`
}

// ProjectAccess is the one ownership check of projects, used by the API and the
// MCP server alike: what a principal holding some roles may do with a project.
type ProjectAccess struct {
	Principal string
	// ReadAll sees every principal's projects (roles read_all, admin).
	ReadAll bool
	// Admin changes and uses every principal's projects.
	Admin bool
}

// MaySee reports whether the principal may read the project (list it, read its
// memory, read its runs' files when it may read the runs).
func (a ProjectAccess) MaySee(p Project) bool { return p.Owner == a.Principal || a.ReadAll || a.Admin }

// MayUse reports whether the principal may change the project or work in it:
// submit runs into it, call tools on its workspace, add or delete its memory,
// delete it. Only its owner and admins.
func (a ProjectAccess) MayUse(p Project) bool { return p.Owner == a.Principal || a.Admin }

// Project errors callers branch on.
var (
	ErrProjectExists = errors.New("project exists")
	// ErrProjectBusy refuses to delete a project with runs in flight.
	ErrProjectBusy = errors.New("project has runs in flight")
)

// SlugPattern is a project's slug: it names a directory and a knowledge source.
var SlugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CreateProject inserts a project; ErrProjectExists when the slug is taken.
func (s *Store) CreateProject(ctx context.Context, p Project) (Project, error) {
	p.ID = uuid.NewString()
	p.Workspace = ProjectWorkspacePrefix + p.ID
	err := s.db.QueryRow(ctx, `INSERT INTO projects (id, slug, name, owner, workspace) VALUES ($1, $2, $3, $4, $5) RETURNING created_at`,
		p.ID, p.Slug, p.Name, p.Owner, p.Workspace).Scan(&p.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return p, fmt.Errorf("%w: %s", ErrProjectExists, p.Slug)
	}
	if err != nil {
		return p, fmt.Errorf("create project %s: %w", p.Slug, err)
	}
	return p, nil
}

// GetProject loads a project; ErrNotFound when there is none.
func (s *Store) GetProject(ctx context.Context, slug string) (Project, error) {
	p, err := scanProject(s.db.QueryRow(ctx, `SELECT `+projectCols+` FROM projects WHERE slug = $1`, slug))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	if err != nil {
		return p, fmt.Errorf("project %s: %w", slug, err)
	}
	return p, nil
}

const projectCols = `id::text, slug, name, owner, created_at, workspace`

func scanProject(row pgx.Row) (Project, error) {
	var p Project
	err := row.Scan(&p.ID, &p.Slug, &p.Name, &p.Owner, &p.CreatedAt, &p.Workspace)
	return p, err
}

// ListProjects lists one owner's projects ("" for everyone's), newest first.
func (s *Store) ListProjects(ctx context.Context, owner string, limit int) ([]Project, error) {
	return queryRows(ctx, s.db, "projects", []Project{}, rowsOf(scanProject), `SELECT `+projectCols+` FROM projects
		WHERE $1 = '' OR owner = $1 ORDER BY created_at DESC, slug LIMIT $2`, owner, limit)
}

// DeleteProject removes project p (by its id) and its memory in one
// transaction, with an audit row naming who deleted it, unless a run of it is in
// flight (ErrProjectBusy). MCP runs do not count: an MCP client's run lives for
// its session, and another principal's client must never keep an owner from
// deleting a project; its later calls are refused because the project is gone.
// Its workspace and knowledge are the caller's to remove. ErrNotFound when
// there is no such project.
func (s *Store) DeleteProject(ctx context.Context, p Project, by string) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Locks the row: a run submitted meanwhile waits, then finds no project.
		var n int
		err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE project_id = p.id AND status IN ('queued','running','waiting')
				AND template NOT LIKE 'mcp:%')
			FROM projects p WHERE id = $1 FOR UPDATE`, p.ID).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete project %s: %w", p.Slug, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s has %d", ErrProjectBusy, p.Slug, n)
		}
		var entries int64
		tag, err := tx.Exec(ctx, `DELETE FROM agent_memory WHERE project = $1`, p.ID)
		if err != nil {
			return fmt.Errorf("delete project %s memory: %w", p.Slug, err)
		}
		entries = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM projects WHERE id = $1`, p.ID); err != nil {
			return fmt.Errorf("delete project %s: %w", p.Slug, err)
		}
		return auditProject(ctx, tx, by, "project.delete", p, fmt.Sprintf("name %q, workspace %s, %d memory entries", p.Name, p.Workspace, entries))
	})
}

// PromoteWorkspace promotes the staging run r's workspace into its project's
// (the storage tiers' Staging -> Production): it locks the project's row (a
// run submitted into the project meanwhile waits for the promotion), refuses
// with ErrProjectBusy while a run of the project works in the project's
// workspace, audits the promotion (project_audit, action workspace.promote),
// and calls do with the project (to check who may use it) and the two
// workspace ids, which copies the files; do's error rolls the audit back.
func (s *Store) PromoteWorkspace(ctx context.Context, r Run, by string, do func(ctx context.Context, p Project, from, to string) error) (Project, error) {
	var p Project
	if !r.Staging() {
		return p, fmt.Errorf("promote run %s: not a staging run of a project", r.ID)
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var n int
		err := tx.QueryRow(ctx, `SELECT p.id::text, p.slug, p.name, p.owner, p.created_at, p.workspace,
				(SELECT count(*) FROM runs WHERE workspace = p.workspace AND status IN ('queued','running','waiting'))
			FROM projects p WHERE id = $1::uuid FOR UPDATE`, r.ProjectID).Scan(&p.ID, &p.Slug, &p.Name, &p.Owner, &p.CreatedAt, &p.Workspace, &n)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: project %s of run %s (deleted?)", ErrNoProject, r.ProjectID, r.ID)
		}
		if err != nil {
			return fmt.Errorf("promote run %s: %w", r.ID, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s has %d working in its workspace", ErrProjectBusy, p.Slug, n)
		}
		if err := auditProject(ctx, tx, by, "workspace.promote", p, fmt.Sprintf("run %s: workspace %s promoted into %s", r.ID, r.Workspace, p.Workspace)); err != nil {
			return err
		}
		return do(ctx, p, r.Workspace, p.Workspace)
	})
	return p, err
}

// ProjectAuditRow is a person's deletion of a project or of a memory entry.
type ProjectAuditRow struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Action    string    `json:"action"`
	ProjectID string    `json:"project_id"`
	Slug      string    `json:"slug"`
	Owner     string    `json:"owner"`
	Detail    string    `json:"detail"`
}

func auditProject(ctx context.Context, tx pgx.Tx, by, action string, p Project, detail string) error {
	_, err := tx.Exec(ctx, `INSERT INTO project_audit (principal, action, project_id, slug, owner, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		by, action, p.ID, p.Slug, p.Owner, pgText(detail))
	if err != nil {
		return fmt.Errorf("audit %s of project %s: %w", action, p.Slug, err)
	}
	return nil
}

// ProjectAudit lists the audited deletions of one project (by id; "" for every
// project), oldest first.
func (s *Store) ProjectAudit(ctx context.Context, projectID string, limit int) ([]ProjectAuditRow, error) {
	rows, err := s.db.Query(ctx, `SELECT id, at, principal, action, project_id::text, slug, owner, detail FROM project_audit
		WHERE $1 = '' OR project_id::text = $1 ORDER BY id LIMIT $2`, projectID, limit)
	if err != nil {
		return nil, fmt.Errorf("project audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProjectAuditRow, error) {
		var r ProjectAuditRow
		err := row.Scan(&r.ID, &r.At, &r.Principal, &r.Action, &r.ProjectID, &r.Slug, &r.Owner, &r.Detail)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("project audit: %w", err)
	}
	return out, nil
}
