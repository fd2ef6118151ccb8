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

// stmtCounts is calls and execution time by normalized statement text of the
// bench database. The time is PostgreSQL's executor's (total_exec_time): it
// leaves out parsing, binding and the protocol, which for the fleet's small
// statements are much of their CPU, but it tells a statement that reads
// much from one that does not.
// Keyed by queryid: after a reset the text pg_stat_statements shows for a
// statement is the first one it saw (constants folded to $n or not), so two
// workloads' texts of the same statement can differ.
type stmtCounts map[int64]stmtCount

type stmtCount struct {
	text  string
	calls int64
	ms    float64
}

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
	rows, err := e.db.Query(ctx, `SELECT queryid, min(query), sum(calls)::bigint, sum(total_exec_time)::float8 FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) GROUP BY queryid`, e.o.database)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	var id int64
	var q string
	var n int64
	var ms float64
	if _, err := pgx.ForEachRow(rows, []any{&id, &q, &n, &ms}, func() error {
		out[id] = stmtCount{text: oneLine(q), calls: n, ms: ms}
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

// printStatements prints calls and executor microseconds per unit of a (minus
// b's, scaled by bScale, when b is given), most calls first, down to 0.05
// calls per unit.
func printStatements(label string, a stmtCounts, units float64, b stmtCounts, bScale float64) {
	if a == nil || units <= 0 {
		return
	}
	type per struct {
		text      string
		calls, us float64
	}
	m := map[int64]per{}
	for id, c := range a {
		m[id] = per{c.text, float64(c.calls), c.ms * 1000}
	}
	for id, c := range b {
		p := m[id]
		p.text = cmp.Or(p.text, c.text)
		p.calls -= float64(c.calls) * bScale
		p.us -= c.ms * 1000 * bScale
		m[id] = p
	}
	keys := slices.SortedFunc(maps.Keys(m), func(x, y int64) int { return cmp.Compare(m[y].calls, m[x].calls) })
	var calls, us float64
	var lines []string
	for _, id := range keys {
		c, t := m[id].calls/units, m[id].us/units
		calls += c
		us += t
		if c >= 0.05 || c <= -0.05 {
			lines = append(lines, fmt.Sprintf("    %7.2f %8.1f µs  %s", c, t, m[id].text))
		}
	}
	progress("statements per %s (pg_stat_statements: calls, executor time; %.2f calls, %.0f µs in all):\n%s", label, calls, us, strings.Join(lines, "\n"))
}
