package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Project is a workspace, a knowledge base and agents' memory that outlive runs.
type Project struct {
	Slug      string    `json:"slug"`
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"created_at"`
}

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
	err := s.db.QueryRow(ctx, `INSERT INTO projects (slug, name, owner) VALUES ($1, $2, $3) RETURNING created_at`,
		p.Slug, p.Name, p.Owner).Scan(&p.CreatedAt)
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
	var p Project
	err := s.db.QueryRow(ctx, `SELECT slug, name, owner, created_at FROM projects WHERE slug = $1`, slug).
		Scan(&p.Slug, &p.Name, &p.Owner, &p.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	if err != nil {
		return p, fmt.Errorf("project %s: %w", slug, err)
	}
	return p, nil
}

// ListProjects lists one owner's projects ("" for everyone's), newest first.
func (s *Store) ListProjects(ctx context.Context, owner string, limit int) ([]Project, error) {
	rows, err := s.db.Query(ctx, `SELECT slug, name, owner, created_at FROM projects
		WHERE $1 = '' OR owner = $1 ORDER BY created_at DESC, slug LIMIT $2`, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("projects: %w", err)
	}
	defer rows.Close()
	out := []Project{}
	for rows.Next() {
		var p Project
		if err := rows.Scan(&p.Slug, &p.Name, &p.Owner, &p.CreatedAt); err != nil {
			return nil, fmt.Errorf("projects: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeleteProject removes a project and its memory in one transaction, unless a run
// of it is in flight (ErrProjectBusy). Its workspace and knowledge are the
// caller's to remove. ErrNotFound when there is no such project.
func (s *Store) DeleteProject(ctx context.Context, slug string) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Locks the row: a run submitted meanwhile waits, then finds no project.
		var n int
		err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE project = p.slug AND status IN ('queued','running','waiting'))
			FROM projects p WHERE slug = $1 FOR UPDATE`, slug).Scan(&n)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete project %s: %w", slug, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s has %d", ErrProjectBusy, slug, n)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM agent_memory WHERE project = $1`, slug); err != nil {
			return fmt.Errorf("delete project %s memory: %w", slug, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM projects WHERE slug = $1`, slug); err != nil {
			return fmt.Errorf("delete project %s: %w", slug, err)
		}
		return nil
	})
}
