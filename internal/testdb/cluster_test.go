package testdb_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func TestRedisMatrixGivesASingleNodeAndAClusterOfThreeMasters(t *testing.T) {
	t.Parallel()
	for _, tg := range testdb.RedisMatrix(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rc, err := redisconn.Parse(tg.URL)
			require.NoError(t, err)
			rdb := rc.Client()
			t.Cleanup(func() { _ = rdb.Close() })
			ctx := context.Background()
			require.NoError(t, rdb.Set(ctx, tg.Prefix+":k", "v", 0).Err())
			require.Equal(t, "v", rdb.Get(ctx, tg.Prefix+":k").Val())
			if tg.Name == "cluster" {
				require.Equal(t, redisconn.Cluster, rc.Shape)
				slots, err := rdb.ClusterSlots(ctx).Result()
				require.NoError(t, err)
				require.Len(t, slots, testdb.ClusterNodes)
			}
		})
	}
}

func TestClusterIsSharedByTheBinary(t *testing.T) {
	t.Parallel()
	require.Equal(t, testdb.RedisCluster(t), testdb.RedisCluster(t))
}
