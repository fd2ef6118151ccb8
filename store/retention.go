package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retention (docs/retention.md): the batched deletes of old rows, and a run's
// rows read for its archive and written back by an import. Every delete is a
// bounded batch in its own short transaction that takes its rows with FOR
// UPDATE SKIP LOCKED: two sweepers take disjoint batches, and a row another
// transaction holds is left for a later batch instead of waited for.

// ArchiveTable is one table of a run's archive: the rows of the run in it are
// written in order, and imported in the order of ArchiveTables (parents first).
type ArchiveTable struct {
	Name string
	// where selects the run's rows ($1 is the run id); order keeps an
	// archive's lines stable.
	where, order string
	// check is the condition an imported row must meet to belong to the run
	// ($2 is the run id): an archive cannot slip a row into another run.
	check string
	// keepExisting: a row already present is left as it is (the audit outlives
	// its run under security.audit_retention, so a re-import finds it).
	keepExisting bool
	// serial names the bigserial column whose sequence an import advances past
	// the imported ids (a fresh database's sequence starts below them).
	serial string
}

const (
	ofRun      = "run_id = $1"
	runCheck   = "r.run_id = $2"
	ofSessions = "session_id IN (SELECT id FROM sessions WHERE run_id = $1)"
	sessCheck  = "r.session_id IN (SELECT id FROM sessions WHERE run_id = $2)"
)

// archiveTables are what a run's archive holds: the run, its sessions with their
// messages and compactions, delegations, events, approvals, audit rows and model
// calls. The rest of a run's rows (plans, todos, intents, command log, tool
// results, egress rows, MCP calls, finish images) are deleted with it and not
// archived: replay reads none of them.
var archiveTables = []ArchiveTable{
	{Name: "runs", where: "id = $1", order: "id", check: "r.id = $2"},
	{Name: "sessions", where: ofRun, order: "created_at, id", check: runCheck},
	{Name: "session_messages", where: ofSessions, order: "session_id, seq", check: sessCheck},
	{Name: "session_compactions", where: ofSessions, order: "session_id, n", check: sessCheck},
	{Name: "delegations", where: ofRun, order: "created_at, id", check: runCheck},
	{Name: "run_events", where: ofRun, order: "id", check: runCheck, serial: "id"},
	{Name: "approvals", where: ofRun, order: "created_at, id", check: runCheck},
	{Name: "tool_audit", where: ofRun, order: "id", check: runCheck, keepExisting: true, serial: "id"},
	{Name: "llm_calls", where: ofRun, order: "id", check: runCheck, serial: "id"},
}

// ArchiveTables are the names of the tables a run's archive holds, in import order.
func ArchiveTables() []string {
	out := make([]string, len(archiveTables))
	for i, t := range archiveTables {
		out[i] = t.Name
	}
	return out
}

func archiveTable(name string) (ArchiveTable, int, bool) {
	for i, t := range archiveTables {
		if t.Name == name {
			return t, i, true
		}
	}
	return ArchiveTable{}, 0, false
}

// ArchiveRow is one row of a run's archive: its table, and the row as
// PostgreSQL's to_jsonb writes it (every column, by name), which
// jsonb_populate_record reads back exactly.
type ArchiveRow struct {
	Table string          `json:"table"`
	Row   json.RawMessage `json:"row"`
}

// RunExporter receives a run's rows before they are deleted: rows streams them
// (ArchiveTables order) to emit. Its error aborts the batch: nothing is deleted.
type RunExporter func(ctx context.Context, runID string, rows func(emit func(ArchiveRow) error) error) error

// RunExport archives a batch's runs before they are deleted.
type RunExport struct {
	// Run receives each run's rows.
	Run RunExporter
	// Flush, when set, runs after the batch's last Run and before its deletes:
	// what Run wrote must be durable when it returns (one sync a batch instead
	// of one a run). Its error aborts the batch.
	Flush func(ctx context.Context) error
}

// RetentionBatch is what one batch deleted and how long its transaction held
// its locks (from its first statement to its commit).
type RetentionBatch struct {
	// Runs are the ids of the runs deleted (DeleteRunsBatch only).
	Runs []string
	// Rows is how many rows the batch deleted from its table (runs: the runs;
	// their children go by ON DELETE CASCADE and are not counted).
	Rows int64
	// Held is the whole transaction, the export included; Deleting is the
	// part from the first DELETE to the commit, when the deleted rows (and
	// their children) are locked. Before that, only the batch's terminal runs
	// rows are locked, which no live work touches.
	Held, Deleting time.Duration
}

// DeleteRunsBatch deletes up to limit terminal runs (completed, failed,
// cancelled) that finished before cutoff, oldest first, with every row that
// belongs to them: the tables' ON DELETE CASCADE, and llm_calls, which has no
// foreign key. A queued, running or waiting run is never taken, however old;
// tool_audit rows stay (security.audit_retention governs them). With export
// set, each run's rows are handed to it first, inside the same transaction, so
// an archive holds exactly what is deleted.
func (s *Store) DeleteRunsBatch(ctx context.Context, cutoff time.Time, limit int, export *RunExport) (RetentionBatch, error) {
	var b RetentionBatch
	start := time.Now()
	var deleting time.Time
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id::text FROM runs
			WHERE status IN ('completed','failed','cancelled') AND finished_at < $1
			ORDER BY finished_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, cutoff, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		if export != nil {
			for _, id := range ids {
				if err := export.Run(ctx, id, func(emit func(ArchiveRow) error) error { return exportRun(ctx, tx, id, emit) }); err != nil {
					return fmt.Errorf("export run %s: %w", id, err)
				}
			}
			if export.Flush != nil {
				if err := export.Flush(ctx); err != nil {
					return fmt.Errorf("export: %w", err)
				}
			}
		}
		deleting = time.Now()
		if _, err := tx.Exec(ctx, `DELETE FROM llm_calls WHERE run_id = ANY($1::uuid[])`, ids); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM runs WHERE id = ANY($1::uuid[])`, ids)
		if err != nil {
			return err
		}
		b.Runs, b.Rows = ids, tag.RowsAffected()
		return nil
	})
	b.Held = time.Since(start)
	if !deleting.IsZero() {
		b.Deleting = time.Since(deleting)
	}
	if err != nil {
		return RetentionBatch{Held: b.Held}, fmt.Errorf("retention: delete runs: %w", err)
	}
	return b, nil
}

// ExportRun streams run id's archive rows to emit, read in one snapshot.
func (s *Store) ExportRun(ctx context.Context, id string, emit func(ArchiveRow) error) error {
	if _, err := uuid.Parse(id); err != nil {
		return fmt.Errorf("export run %q: not a run id", id)
	}
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if s.Pool != nil { // a transaction of its own: one snapshot for every table
			if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`); err != nil {
				return err
			}
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM runs WHERE id = $1`, id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("export run %s: %w", id, ErrNotFound)
		}
		return exportRun(ctx, tx, id, emit)
	})
}

func exportRun(ctx context.Context, q DBTX, id string, emit func(ArchiveRow) error) error {
	for _, t := range archiveTables {
		rows, err := q.Query(ctx, `SELECT to_jsonb(t)::text FROM `+t.Name+` t WHERE `+t.where+` ORDER BY `+t.order, id)
		if err != nil {
			return fmt.Errorf("read %s: %w", t.Name, err)
		}
		var row string
		_, err = pgx.ForEachRow(rows, []any{&row}, func() error {
			return emit(ArchiveRow{Table: t.Name, Row: json.RawMessage(row)})
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", t.Name, err)
		}
	}
	return nil
}

// Import errors callers branch on.
var (
	// ErrAlreadyImported: the run is present with the same row; the import
	// was a no-op.
	ErrAlreadyImported = errors.New("run already present")
	// ErrImportConflict: a row of the archive collides with a different row
	// already in the database (the run itself, or an id another run holds).
	ErrImportConflict = errors.New("conflicting id")
	// ErrBadArchive: the archive's rows do not make a run (order, ownership,
	// a row of another run, a column PostgreSQL refuses).
	ErrBadArchive = errors.New("bad archive")
)

// ImportRun writes a run's archive rows back in one transaction: all of them or
// none. next returns the rows in archive order and io.EOF-like done=true at the
// end. The first row must be the run (id runID); when owner is not empty the
// run must be owned by it. A run already present with the same row is
// ErrAlreadyImported (nothing written); with a different row, or a child row
// whose id another run holds, ErrImportConflict. Every row must belong to the
// run (ErrBadArchive otherwise). It returns how many rows it wrote.
func (s *Store) ImportRun(ctx context.Context, runID, owner string, next func() (ArchiveRow, bool, error)) (int, error) {
	if _, err := uuid.Parse(runID); err != nil {
		return 0, fmt.Errorf("%w: run id %q is not a UUID", ErrBadArchive, runID)
	}
	written := 0
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		first, done, err := next()
		if err != nil {
			return err
		}
		if done || first.Table != "runs" {
			return fmt.Errorf("%w: the first row must be the run", ErrBadArchive)
		}
		var id, runOwner string
		var present, same bool
		err = tx.QueryRow(ctx, `SELECT a.id::text, a.owner,
				EXISTS (SELECT 1 FROM runs WHERE id = a.id),
				EXISTS (SELECT 1 FROM runs r WHERE r.id = a.id
					AND (SELECT jsonb_object_agg(key, value) FROM jsonb_each(to_jsonb(r)) WHERE $1::jsonb ? key) = $1::jsonb)
			FROM jsonb_populate_record(NULL::runs, $1::jsonb) a`, string(first.Row)).Scan(&id, &runOwner, &present, &same)
		if err != nil {
			return fmt.Errorf("%w: run row: %v", ErrBadArchive, err)
		}
		if id != runID {
			return fmt.Errorf("%w: the run row is run %s, the archive's header says %s", ErrBadArchive, id, runID)
		}
		if owner != "" && runOwner != owner {
			return fmt.Errorf("%w: run %s is owned by %q, not %q", ErrBadArchive, runID, runOwner, owner)
		}
		if same {
			return ErrAlreadyImported
		}
		if present {
			return fmt.Errorf("%w: run %s exists with different contents", ErrImportConflict, runID)
		}
		maxSerial := map[string]int64{}
		cols := map[string]map[string]bool{}
		last := 0
		for row, i := first, 1; ; i++ {
			t, at, ok := archiveTable(row.Table)
			if !ok {
				return fmt.Errorf("%w: row %d: unknown table %q", ErrBadArchive, i, row.Table)
			}
			if at < last || (at == 0 && i > 1) {
				return fmt.Errorf("%w: row %d: table %s out of order", ErrBadArchive, i, row.Table)
			}
			last = at
			if cols[t.Name] == nil {
				if cols[t.Name], err = tableColumns(ctx, tx, t.Name); err != nil {
					return err
				}
			}
			n, err := importRow(ctx, tx, t, cols[t.Name], runID, row.Row, maxSerial)
			if err != nil {
				return fmt.Errorf("row %d (%s): %w", i, t.Name, err)
			}
			written += n
			var done bool
			if row, done, err = next(); err != nil {
				return err
			} else if done {
				break
			}
		}
		for table, max := range maxSerial {
			t, _, _ := archiveTable(table)
			// Only ever forward: importing into the database the run came from
			// finds the sequence past its ids already.
			if _, err := tx.Exec(ctx, `SELECT setval(seq, $2) FROM (SELECT pg_get_serial_sequence($1, $3) AS seq) s
				WHERE $2 > (SELECT coalesce(last_value, 0) FROM pg_sequences WHERE quote_ident(schemaname) || '.' || quote_ident(sequencename) = s.seq)`,
				table, max, t.serial); err != nil {
				return fmt.Errorf("advance %s's sequence: %w", table, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return written, nil
}

// importRow inserts one archive row into t, checking it belongs to runID; it
// returns 1 when written, 0 when kept (keepExisting).
//
// Only the archive's columns are written: a column added to the table since the
// archive was made takes its default, so an archive outlives schema changes that
// add columns. A column the table lacks (an archive of a newer schema) is refused,
// not dropped.
func importRow(ctx context.Context, tx pgx.Tx, t ArchiveTable, cols map[string]bool, runID string, row json.RawMessage, maxSerial map[string]int64) (int, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(row, &obj); err != nil || obj == nil {
		return 0, fmt.Errorf("%w: not a JSON object", ErrBadArchive)
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		if !cols[k] {
			return 0, fmt.Errorf("%w: %s has no column %q (an archive of a newer schema?)", ErrBadArchive, t.Name, k)
		}
		names = append(names, pgx.Identifier{k}.Sanitize())
	}
	slices.Sort(names)
	list := strings.Join(names, ", ")
	conflict := ""
	if t.keepExisting {
		conflict = " ON CONFLICT DO NOTHING"
	}
	// The belongs-to check runs in the same statement, so a row of another run
	// is never inserted (and the whole import rolls back).
	var ok bool
	err := tx.QueryRow(ctx, `SELECT `+t.check+` FROM jsonb_populate_record(NULL::`+t.Name+`, $1::jsonb) r`, string(row), runID).Scan(&ok)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	if !ok {
		return 0, fmt.Errorf("%w: the row belongs to another run", ErrBadArchive)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+t.Name+` (`+list+`) SELECT `+list+` FROM jsonb_populate_record(NULL::`+t.Name+`, $1::jsonb)`+conflict, string(row))
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return 0, fmt.Errorf("%w: %s (%s)", ErrImportConflict, pgErr.Detail, pgErr.ConstraintName)
	case errors.As(err, &pgErr) && pgErr.Code[:2] == "23", errors.As(err, &pgErr) && pgErr.Code[:2] == "22":
		return 0, fmt.Errorf("%w: %s", ErrBadArchive, pgErr.Message)
	case err != nil:
		return 0, err
	}
	if t.serial != "" {
		var id int64
		if err := json.Unmarshal(obj[t.serial], &id); err == nil && id > maxSerial[t.Name] {
			maxSerial[t.Name] = id
		}
	}
	return int(tag.RowsAffected()), nil
}

// tableColumns are the columns of table an insert may write (not dropped, not
// generated).
func tableColumns(ctx context.Context, tx pgx.Tx, table string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT attname::text FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// DeleteOlderBatch deletes up to limit rows of an age-kept table whose time
// column is before cutoff, oldest first (egress_connections by at, tool_audit
// by at).
func (s *Store) DeleteOlderBatch(ctx context.Context, table AgedTable, cutoff time.Time, limit int) (RetentionBatch, error) {
	col, ok := agedTables[table]
	if !ok {
		return RetentionBatch{}, fmt.Errorf("retention: %q is not an age-kept table", table)
	}
	start := time.Now()
	tag, err := s.db.Exec(ctx, `WITH doomed AS (SELECT id FROM `+string(table)+` WHERE `+col+` < $1
			ORDER BY `+col+` LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM `+string(table)+` t USING doomed WHERE t.id = doomed.id`, cutoff, limit)
	b := RetentionBatch{Held: time.Since(start)}
	b.Deleting = b.Held
	if err != nil {
		return b, fmt.Errorf("retention: delete from %s: %w", table, err)
	}
	b.Rows = tag.RowsAffected()
	return b, nil
}

// AgedTable is a table whose rows retention deletes by their own age.
type AgedTable string

// The age-kept tables.
const (
	TableEgress AgedTable = "egress_connections"
	TableAudit  AgedTable = "tool_audit"
)

var agedTables = map[AgedTable]string{TableEgress: "at", TableAudit: "at"}

// OrphanProjectKnowledge lists up to limit project knowledge sources whose
// project no longer exists, last written before cutoff (the api's project
// delete removes them at once; this finds what a failed removal left).
func (s *Store) OrphanProjectKnowledge(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT source FROM knowledge_sources k
		WHERE kind = 'project' AND updated_at < $1
		AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.id::text = k.source)
		ORDER BY updated_at LIMIT $2`, cutoff, limit)
	if err != nil {
		return nil, fmt.Errorf("retention: orphan project knowledge: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("retention: orphan project knowledge: %w", err)
	}
	return out, nil
}
