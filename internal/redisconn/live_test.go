package redisconn_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// Each shape on a real server: our client and the asynq option reach the same
// Redis (a task enqueued through asynq is seen through our client, in the
// database the URL names).
func TestClientAndQueueReachTheSameRedis(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		url  func(t *testing.T) string
		db   int
	}{
		{"single", func(t *testing.T) string { return testdb.Redis(t) }, 0},
		{"sentinel", func(t *testing.T) string { return testdb.RedisSentinel(t, 3) }, 3},
		{"cluster", func(t *testing.T) string { return testdb.RedisCluster(t) }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc, err := redisconn.Parse(tc.url(t))
			require.NoError(t, err)
			require.Equal(t, tc.db, rc.DB())
			ctx := context.Background()
			rdb := rc.Client()
			t.Cleanup(func() { _ = rdb.Close() })
			require.NoError(t, rdb.Ping(ctx).Err())

			// A queue name of its own: the cluster is shared by the binary.
			q := "redisconn-" + tc.name + "-" + time.Now().Format("150405.000000")
			cl := asynq.NewClient(rc.Asynq())
			t.Cleanup(func() { _ = cl.Close() })
			info, err := cl.Enqueue(asynq.NewTask("probe", nil), asynq.Queue(q))
			require.NoError(t, err)
			require.EqualValues(t, 1, rdb.LLen(ctx, "asynq:{"+q+"}:pending").Val(), "our client sees the task asynq enqueued")
			require.Equal(t, q, info.Queue)
		})
	}
}
