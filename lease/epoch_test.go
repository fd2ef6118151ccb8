package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"

	"github.com/aetherium-engine/aetherium/lease"
)

func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A real failover: a replica that stopped receiving writes is promoted (REPLICAOF
// NO ONE gives it a new replication id) while the old primary went on granting.
// Its fence counter is behind, yet the tokens it grants sort after every token
// the old primary issued, because the manager takes a new epoch from PostgreSQL.
func TestEpochKeepsTokensIncreasingAcrossFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.Database(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	epochs := lease.PostgresEpoch(pool)

	primaryURL, replicaURL := testdb.Redis(t), testdb.Redis(t)
	primary, replica := client(t, primaryURL), client(t, replicaURL)
	popt, _ := redis.ParseURL(primaryURL)
	host, port, _ := strings.Cut(popt.Addr, ":")

	cfg := lease.Config{Services: []lease.Service{{Name: "comfyui", Capacity: 1, TTL: time.Minute}}}
	opts := lease.Options{Epoch: epochs, EpochCheck: time.Nanosecond}
	m1, err := lease.New(primary, cfg, opts)
	require.NoError(t, err)

	var before []uint64
	grant := func(m *lease.Manager, holder string) uint64 {
		g, err := m.Acquire(ctx, "comfyui", holder)
		require.NoError(t, err)
		_, err = m.Release(ctx, "comfyui", holder, g.Token)
		require.NoError(t, err)
		return g.Token
	}
	for _, h := range []string{"a", "b"} {
		before = append(before, grant(m1, h))
	}
	require.Equal(t, m1.Epoch(), lease.TokenEpoch(before[0]), "tokens carry the epoch")
	require.NotZero(t, m1.Epoch())

	require.NoError(t, replica.Do(ctx, "REPLICAOF", host, port).Err())
	require.Eventually(t, func() bool {
		info, _ := replica.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up") && replica.Exists(ctx, "{aeth:lease}:epoch").Val() == 1
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // let the last writes arrive
	require.NoError(t, replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err())

	// The old primary keeps granting: the promoted replica never hears of these.
	for _, h := range []string{"c", "d", "e"} {
		before = append(before, grant(m1, h))
	}
	for i := 1; i < len(before); i++ {
		require.Greater(t, before[i], before[i-1])
	}

	m2, err := lease.New(replica, cfg, opts)
	require.NoError(t, err)
	after := grant(m2, "f")
	require.Greater(t, m2.Epoch(), m1.Epoch(), "a new history takes a new epoch")
	require.Greater(t, after, before[len(before)-1], "the first token after the failover sorts after every token before it")
	require.Equal(t, m2.Epoch(), lease.TokenEpoch(after))
	require.Equal(t, uint64(1), lease.TokenCounter(after), "the counter restarts at the new epoch's floor")
}

// Without an EpochSource tokens stay the bare counter (epoch 0).
func TestNoEpochSourceKeepsBareCounter(t *testing.T) {
	t.Parallel()
	matrix(t, lease.Config{Services: []lease.Service{{Name: "s"}}}, func(t *testing.T, e *env) {
		g, err := e.proc(t, nil).Acquire(context.Background(), "s", "h")
		require.NoError(t, err)
		require.Equal(t, uint64(1), g.Token)
	})
}

// On a cluster every master has its own replication id. The manager must judge
// the history of the master that holds the lease family's slot: were it to ask
// any node, ids would differ from call to call and every grant would spend a new
// epoch. A changed id of that master (what a failover to its replica looks like)
// takes a new epoch, and tokens keep increasing.
func TestEpochFollowsTheMasterOfTheLeaseSlot(t *testing.T) {
	t.Parallel()
	var next atomic.Uint64
	epochs := func(context.Context) (uint64, error) { return next.Add(1), nil }
	matrix(t, lease.Config{Services: []lease.Service{{Name: "comfyui", TTL: time.Minute}, {Name: "qwen-tts", TTL: time.Minute}}}, func(t *testing.T, e *env) {
		ctx := context.Background()
		rdb := testdb.Connect(t, e.url)
		m, err := lease.New(rdb, e.cfg, lease.Options{Epoch: epochs, EpochCheck: time.Nanosecond})
		require.NoError(t, err)
		last := map[string]uint64{}
		grant := func(svc, holder string) uint64 {
			g, err := m.Acquire(ctx, svc, holder)
			require.NoError(t, err)
			_, err = m.Release(ctx, svc, holder, g.Token)
			require.NoError(t, err)
			require.Greater(t, g.Token, last[svc], "a service's tokens only increase")
			last[svc] = g.Token
			return g.Token
		}
		first := lease.TokenEpoch(grant("comfyui", "a"))
		require.NotZero(t, first)
		for i := range 10 {
			grant("comfyui", fmt.Sprint("b", i))
		}
		require.Equal(t, first, m.Epoch(), "one history, one epoch, however many grants")

		key := "{" + e.cfg.Prefix + "}:epoch"
		require.NoError(t, rdb.HSet(ctx, key, "replid", "a-history-before-a-failover").Err())
		tok := grant("qwen-tts", "c")
		require.Greater(t, lease.TokenEpoch(tok), first, "a new history of the slot's master takes a new epoch")
		require.Equal(t, uint64(1), lease.TokenCounter(tok), "every service's counter is lifted to the new epoch's floor")
		require.Equal(t, lease.TokenEpoch(tok), lease.TokenEpoch(grant("comfyui", "d")))
	})
}
