package knowledge_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/knowledge"
)

// env is one test's knowledge base on its own migrated database.
type env struct {
	pool *pgxpool.Pool
	kb   *knowledge.Postgres
}

// setup opens a fresh database (testdb: a clone of a migrated template, failing
// under CI=true when PostgreSQL is unreachable) and the backend on it.
func setup(t testing.TB, cfg knowledge.Config, opts ...knowledge.Option) *env {
	t.Helper()
	st := testdb.Store(t)
	return &env{pool: st.Pool, kb: knowledge.NewPostgres(st.Pool, cfg, opts...)}
}

func (e *env) index(t testing.TB, src knowledge.Source, path, title, content string) knowledge.Indexed {
	t.Helper()
	res, err := e.kb.Index(context.Background(), knowledge.Document{Source: src, Path: path, Title: title, Content: content})
	require.NoError(t, err)
	return res
}

func (e *env) search(t testing.TB, scope knowledge.Scope, q string, k int) []knowledge.Result {
	t.Helper()
	res, err := e.kb.Search(context.Background(), knowledge.Query{Text: q, K: k, Scope: scope})
	require.NoError(t, err)
	return res
}

func paths(rs []knowledge.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Path
	}
	return out
}
