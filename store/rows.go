package store

import "github.com/jackc/pgx/v5"

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
