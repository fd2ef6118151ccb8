package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// lookupErr gives a one-row lookup's error its context (what). ErrNotFound is
// returned as it is: an answer the caller checks for, not a failure to explain.
func lookupErr(err error, what string) error {
	if err == nil || errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// queryRows runs q on db and appends its rows, scanned by scan, to dst; what
// names the listing in errors ("list runs: …"). A nil dst leaves an empty
// listing nil, []T{} keeps it an empty slice (a JSON [] for the API).
func queryRows[T any](ctx context.Context, db DBTX, what string, dst []T, scan pgx.RowToFunc[T], q string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.AppendRows(dst, rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// rowsOf adapts a scan function written for one row (scanRun, scanApproval, …,
// which QueryRow's rows share) to pgx.CollectRows and pgx.AppendRows.
func rowsOf[T any](scan func(pgx.Row) (T, error)) pgx.RowToFunc[T] {
	return func(r pgx.CollectableRow) (T, error) { return scan(r) }
}

// insertedEvent scans the (id, type) that an INSERT INTO run_events … RETURNING
// id, type gives back, as an event of run runID.
func insertedEvent(runID string) pgx.RowToFunc[Event] {
	return func(r pgx.CollectableRow) (Event, error) {
		e := Event{RunID: runID}
		err := r.Scan(&e.ID, &e.Type)
		return e, err
	}
}
