package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Statement counts per unit of work (issue 45): when the bench's PostgreSQL has
// pg_stat_statements preloaded, each fleet workload of section 2 resets it at
// its start and reads the bench database's statements at its end, so section 7's
// transactions per model turn and per round trip come with the statements that
// make them up (BEGIN counts the explicit transactions; every other statement
// outside one is a transaction of its own). Without the extension: nothing.

// stmtCounts is calls by normalized statement text of the bench database.
type stmtCounts map[string]int64

// enablePGSS creates the extension in the bench database when the server
// preloads it; it reports whether statements can be counted.
func (e *env) enablePGSS(ctx context.Context) bool {
	var n int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting LIKE '%pg_stat_statements%'`).Scan(&n); err != nil || n == 0 {
		return false
	}
	if _, err := e.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		progress("pg_stat_statements: %v (statements not counted)", err)
		return false
	}
	return true
}

// resetStatements empties pg_stat_statements (the whole server's: the bench
// counts on a PostgreSQL of its own when it counts statements).
func (e *env) resetStatements(ctx context.Context) error {
	if !e.pgss {
		return nil
	}
	if _, err := e.db.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("pg_stat_statements_reset: %w", err)
	}
	return nil
}

// statements reads the bench database's statements since the last reset.
func (e *env) statements(ctx context.Context) (stmtCounts, error) {
	if !e.pgss {
		return nil, nil
	}
	out := stmtCounts{}
	rows, err := e.db.Query(ctx, `SELECT query, sum(calls)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) GROUP BY query`, e.o.database)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	var q string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&q, &n}, func() error {
		out[oneLine(q)] += n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return out, nil
}

// oneLine folds a statement's white space and cuts it to a readable length.
func oneLine(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 140 {
		q = q[:140] + "…"
	}
	return q
}

// printStatements prints calls per unit of a (minus b's, scaled by bScale,
// when b is given), most first, down to 0.05 per unit.
func printStatements(label string, a stmtCounts, units float64, b stmtCounts, bScale float64) {
	if a == nil || units <= 0 {
		return
	}
	per := map[string]float64{}
	for q, n := range a {
		per[q] = float64(n)
	}
	for q, n := range b {
		per[q] -= float64(n) * bScale
	}
	keys := slices.SortedFunc(maps.Keys(per), func(x, y string) int { return cmp.Compare(per[y], per[x]) })
	var total float64
	var lines []string
	for _, q := range keys {
		v := per[q] / units
		total += v
		if v >= 0.05 || v <= -0.05 {
			lines = append(lines, fmt.Sprintf("    %7.2f  %s", v, q))
		}
	}
	progress("statements per %s (pg_stat_statements; %.2f in all):\n%s", label, total, strings.Join(lines, "\n"))
}
