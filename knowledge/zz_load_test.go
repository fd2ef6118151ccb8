package knowledge_test

import (
	"context"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/knowledge"
)

func TestZZLoad(t *testing.T) {
	url := os.Getenv("KB_LOAD_URL")
	if url == "" {
		t.Skip()
	}
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	kb := knowledge.NewPostgres(pool, knowledge.Config{})
	words := benchWords(20000)
	for batch := 0; batch < 4; batch++ {
		_, err := kb.BulkLoad(context.Background(), benchCorpus(5000, batch*5000, words, uint64(batch)))
		require.NoError(t, err)
	}
}

func TestZZQuery(t *testing.T) {
	url := os.Getenv("KB_QUERY_URL")
	if url == "" {
		t.Skip()
	}
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	kb := knowledge.NewPostgres(pool, knowledge.Config{})
	words := benchWords(20000)
	r := rand.New(rand.NewPCG(7, 7))
	var lat []time.Duration
	scope := knowledge.Scope{Packs: []string{"bench0", "bench1", "bench2", "bench3"}}
	for i := 0; i < 300; i++ {
		var q []string
		for j := 0; j < 2+r.IntN(4); j++ {
			q = append(q, words[50+r.IntN(3000)])
		}
		if i%2 == 0 {
			q = append(q, words[r.IntN(50)])
		}
		t0 := time.Now()
		_, err := kb.Search(context.Background(), knowledge.Query{Text: strings.Join(q, " "), K: 5, Scope: scope})
		require.NoError(t, err)
		d := time.Since(t0)
		lat = append(lat, d)
		if d > 60*time.Millisecond {
			t.Logf("slow %s: %q", d, strings.Join(q, " "))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("p50 %s p90 %s p99 %s", lat[150], lat[270], lat[297])
}
