package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Statuses of a finish_images row.
const (
	FinishPending = "pending"
	FinishDone    = "done"
	FinishFailed  = "failed"
	FinishSkipped = "skipped"
)

// FinishImage is one picture finish_image asked to upscale after its run.
type FinishImage struct {
	RunID string `json:"-"`
	// Path is the original, Output the upscale beside it (both relative to the
	// run's workspace).
	Path       string     `json:"path"`
	Output     string     `json:"output"`
	Status     string     `json:"status"`
	Width      int        `json:"width,omitempty"`
	Height     int        `json:"height,omitempty"`
	Error      string     `json:"error,omitempty"`
	CreatedAt  time.Time  `json:"-"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// RequestFinishImages records pictures to upscale after runID, each once: a
// picture already requested (in any status) is left as it is. It returns the
// paths recorded now, in the order given. max bounds the run's requests in
// all (0: no bound); a request that would pass it records nothing and fails.
func (s *Store) RequestFinishImages(ctx context.Context, runID string, imgs []FinishImage, limit int) ([]string, error) {
	if len(imgs) == 0 {
		return nil, nil
	}
	paths := make([]string, len(imgs))
	outputs := make([]string, len(imgs))
	for i, im := range imgs {
		paths[i], outputs[i] = im.Path, im.Output
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Serialize a run's requests (two calls in parallel must not both pass the
	// bound) and order them against the run's end: lock the run's row. The row
	// that ends the run takes the same lock, so either this request commits first
	// (run:cleanup, which starts after the run ended, sees it) or it sees the run
	// ended and refuses: a request cleanup already passed would never be served.
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status); errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("request finish images: run %s: %w", runID, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	if Terminal(status) {
		return nil, fmt.Errorf("%w: the run is %s; finish_image is asked for while the run is in flight", ErrRunEnded, status)
	}
	var total int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM finish_images WHERE run_id = $1`, runID).Scan(&total); err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	var fresh int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM unnest($2::text[]) p WHERE NOT EXISTS (SELECT 1 FROM finish_images f WHERE f.run_id = $1 AND f.path = p)`, runID, paths).Scan(&fresh); err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	if limit > 0 && total+fresh > limit {
		return nil, fmt.Errorf("%w: the run already asked for %d pictures, %d more would pass the limit of %d", ErrFinishLimit, total, fresh, limit)
	}
	rows, err := tx.Query(ctx, `INSERT INTO finish_images (run_id, path, output)
		SELECT $1, p, o FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(p, o, n) ORDER BY n
		ON CONFLICT (run_id, path) DO NOTHING RETURNING path`, runID, paths, outputs)
	if err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	added := map[string]bool{}
	var p string
	if _, err := pgx.ForEachRow(rows, []any{&p}, func() error { added[p] = true; return nil }); err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("request finish images: %w", err)
	}
	var out []string
	for _, p := range paths {
		if added[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// ErrRunEnded refuses post-run work asked for after its run ended (its cleanup may
// already have looked for it).
var ErrRunEnded = errors.New("the run has ended")

// ErrFinishLimit refuses a finish_image request past the run's bound.
var ErrFinishLimit = errors.New("too many pictures to finish")

// FinishImages lists a run's finish requests in the order they were made.
func (s *Store) FinishImages(ctx context.Context, runID string) ([]FinishImage, error) {
	scan := func(r pgx.CollectableRow) (FinishImage, error) {
		f := FinishImage{RunID: runID}
		err := r.Scan(&f.Path, &f.Output, &f.Status, &f.Width, &f.Height, &f.Error, &f.CreatedAt, &f.FinishedAt)
		return f, err
	}
	return queryRows(ctx, s.db, "finish images", []FinishImage(nil), scan, `SELECT path, output, status, width, height, error, created_at, finished_at
		FROM finish_images WHERE run_id = $1 ORDER BY seq`, runID)
}

// SettleFinishImage moves one pending request to status (done, failed or
// skipped) with its size or error; false when it was not pending (another
// delivery settled it).
func (s *Store) SettleFinishImage(ctx context.Context, runID, path, status string, width, height int, errMsg string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE finish_images SET status = $3, width = $4, height = $5, error = $6, finished_at = now()
		WHERE run_id = $1 AND path = $2 AND status = 'pending'`, runID, path, status, width, height, errMsg)
	if err != nil {
		return false, fmt.Errorf("settle finish image %s: %w", path, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SettlePendingFinishImages moves every pending request of a run to status
// with errMsg (a run that did not complete: skipped; a task out of retries:
// failed) and returns how many it moved.
func (s *Store) SettlePendingFinishImages(ctx context.Context, runID, status, errMsg string) (int, error) {
	tag, err := s.db.Exec(ctx, `UPDATE finish_images SET status = $2, error = $3, finished_at = now()
		WHERE run_id = $1 AND status = 'pending'`, runID, status, errMsg)
	if err != nil {
		return 0, fmt.Errorf("settle finish images: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
