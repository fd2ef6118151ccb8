package testdb_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func TestRedisMatrixGivesASingleNodeAndAClusterOfThreeMasters(t *testing.T) {
	t.Parallel()
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		rdb := testdb.Connect(t, tg.URL)
		ctx := context.Background()
		require.NoError(t, rdb.Set(ctx, tg.Prefix+":k", "v", 0).Err())
		require.Equal(t, "v", rdb.Get(ctx, tg.Prefix+":k").Val())
		if tg.Name == "cluster" {
			_, isCluster := rdb.(*redis.ClusterClient)
			require.True(t, isCluster)
			slots, err := rdb.ClusterSlots(ctx).Result()
			require.NoError(t, err)
			require.Len(t, slots, testdb.ClusterNodes)
		}
	})
}

func TestClusterIsSharedByTheBinary(t *testing.T) {
	t.Parallel()
	require.Equal(t, testdb.RedisCluster(t), testdb.RedisCluster(t))
}
