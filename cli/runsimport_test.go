package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/retention"
	"github.com/aetherium-engine/aetherium/store"
)

// runs import writes an archive back once, says so the second time, and
// refuses an archive of another owner and a missing --owner, writing nothing.
// Not parallel: the database is named by the environment (t.Setenv).
func TestRunsImport(t *testing.T) {
	ctx := context.Background()
	url := testdb.Database(t)
	st, err := store.Open(ctx, url)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	id := uuid.NewString()
	require.NoError(t, st.CreateRun(ctx, store.Run{ID: id, Prompt: "p", Team: json.RawMessage(`{}`), Variables: json.RawMessage(`{}`), Owner: "alice"}))
	_, err = st.Pool.Exec(ctx, `UPDATE runs SET status = 'completed', finished_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	dir := t.TempDir()
	path, err := retention.WriteArchive(dir, id, func(emit func(store.ArchiveRow) error) error { return st.ExportRun(ctx, id, emit) })
	require.NoError(t, err)
	_, err = st.Pool.Exec(ctx, `DELETE FROM runs WHERE id = $1`, id)
	require.NoError(t, err)
	t.Setenv("AETHERIUM_CONFIG", "")
	t.Setenv("AETHERIUM_DATABASE_URL", url)

	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"runs", "import"}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := run(path)
	require.Equal(t, 1, code)
	require.Contains(t, out, "--owner is required")

	code, out = run("--owner", "mallory", path)
	require.Equal(t, 1, code)
	require.Contains(t, out, `owned by "alice", not "mallory"`)
	require.Contains(t, out, "1 of 1 archives not imported")
	var n int
	require.NoError(t, st.Pool.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n))
	require.Zero(t, n)

	code, out = run("--owner", "alice", path)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "[1/1] imported run "+id)
	got, err := st.GetRun(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, got.Status)

	code, out = run("--owner", AnyOwner, "--json", path)
	require.Equal(t, 0, code, out)
	var res struct {
		Imports []struct {
			RunID          string `json:"run_id"`
			AlreadyPresent bool   `json:"already_present"`
		} `json:"imports"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Imports, 1)
	require.True(t, res.Imports[0].AlreadyPresent)
}
