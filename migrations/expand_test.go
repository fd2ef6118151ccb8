package migrations_test

import (
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/migrations"
)

// expandSince is the first migration the expand/contract rule binds
// (docs/how-to/upgrade.md): the ones before it were written for stop-the-world
// upgrades and are not rewritten.
const expandSince = 33

// contractMarker, on a line of a migration's Up section with a reason, marks
// a contract-phase migration: it removes what no supported build (N−1
// included) reads any more, and ships one release after the expand that
// made it unused.
const contractMarker = "-- contract-phase:"

var breaking = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(?i)\bDROP\s+(TABLE|COLUMN|VIEW|FUNCTION|TYPE|SEQUENCE)\b`), "drops what the previous build may read"},
	{regexp.MustCompile(`(?i)\bRENAME\b`), "renames what the previous build reads by its old name"},
	{regexp.MustCompile(`(?i)\bALTER\s+COLUMN\s+\S+\s+(SET\s+DATA\s+)?TYPE\b`), "changes a column's type under the previous build"},
	{regexp.MustCompile(`(?i)\bSET\s+NOT\s+NULL\b`), "makes the previous build's inserts without the column fail"},
}

var dropConstraint = regexp.MustCompile(`(?i)\bDROP\s+CONSTRAINT\s+(IF\s+EXISTS\s+)?(\w+)`)

// breaks says why the Up section of a migration would break the previous
// build, or "" when it only expands (a CHECK dropped and added again in the
// same migration widens it: allowed).
func breaks(sql string) string {
	up, _, _ := strings.Cut(sql, "-- +goose Down")
	if strings.Contains(up, contractMarker) {
		return ""
	}
	var code strings.Builder
	for line := range strings.SplitSeq(up, "\n") {
		line, _, _ = strings.Cut(line, "--")
		code.WriteString(line + "\n")
	}
	text := code.String()
	for _, b := range breaking {
		if m := b.re.FindString(text); m != "" {
			return m + ": " + b.why
		}
	}
	for _, m := range dropConstraint.FindAllStringSubmatch(text, -1) {
		if !regexp.MustCompile(`(?i)\bADD\s+CONSTRAINT\s+` + regexp.QuoteMeta(m[2]) + `\b`).MatchString(text) {
			return m[0] + ": drops a constraint without adding it back"
		}
	}
	return ""
}

// Migrations are expand/contract (docs/how-to/upgrade.md): from expandSince on,
// a migration's Up section never drops, renames or retypes what the
// previous build uses, unless it is marked contract-phase.
func TestMigrationsOnlyExpand(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(f, "_", 2)[0])
		require.NoError(t, err, f)
		if n < expandSince {
			continue
		}
		raw, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		require.Empty(t, breaks(string(raw)), "%s breaks the previous build: split it into an expand now and a contract-phase migration a release later (docs/how-to/upgrade.md)", f)
	}
}

// The check catches what breaks N−1 and lets expands, widened checks, Down
// sections and marked contract-phase migrations through.
func TestExpandCheckCatchesBreakingChanges(t *testing.T) {
	t.Parallel()
	old, err := fs.ReadFile(migrations.FS, "00019_session_messages.sql")
	require.NoError(t, err)
	for _, c := range []struct {
		sql    string
		broken bool
	}{
		{string(old), true}, // moved sessions.messages out and dropped the column
		{"-- +goose Up\nALTER TABLE runs ADD COLUMN x int NOT NULL DEFAULT 0;\n-- +goose Down\nALTER TABLE runs DROP COLUMN x;", false},
		{"-- +goose Up\nALTER TABLE runs DROP COLUMN x;", true},
		{"-- +goose Up\nDROP TABLE runs;", true},
		{"-- +goose Up\nALTER TABLE runs RENAME COLUMN a TO b;", true},
		{"-- +goose Up\nALTER TABLE runs ALTER COLUMN a TYPE bigint;", true},
		{"-- +goose Up\nALTER TABLE runs ALTER COLUMN a SET NOT NULL;", true},
		{"-- +goose Up\nALTER TABLE d DROP CONSTRAINT d_check, ADD CONSTRAINT d_check CHECK (s IN ('a','b'));", false},
		{"-- +goose Up\nALTER TABLE d DROP CONSTRAINT d_check;", true},
		{"-- +goose Up\n-- we never DROP COLUMN here\nCREATE TABLE t (id int);", false},
		{"-- +goose Up\n-- contract-phase: runs.x unused since 00040 (release 1.4)\nALTER TABLE runs DROP COLUMN x;", false},
	} {
		require.Equal(t, c.broken, breaks(c.sql) != "", c.sql)
	}
}
