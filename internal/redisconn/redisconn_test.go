package redisconn_test

import (
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
)

func TestParseShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		url   string
		shape redisconn.Shape
		addrs []string
		db    int
		opt   asynq.RedisConnOpt
	}{
		{"single", "redis://127.0.0.1:6379/3", redisconn.Single, []string{"127.0.0.1:6379"}, 3,
			asynq.RedisClientOpt{Network: "tcp", Addr: "127.0.0.1:6379", DB: 3}},
		{"single with password", "redis://:s3cret@h:6380", redisconn.Single, []string{"h:6380"}, 0,
			asynq.RedisClientOpt{Network: "tcp", Addr: "h:6380", Password: "s3cret"}},
		{"sentinel", "redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/mymaster/2?sentinel_password=sp", redisconn.Sentinel,
			[]string{"10.0.0.1:26379", "10.0.0.2:26380"}, 2,
			asynq.RedisFailoverClientOpt{MasterName: "mymaster", SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26380"}, SentinelPassword: "sp", Password: "pw", DB: 2}},
		{"sentinel default port", "redis-sentinel://s1,s2:1/m", redisconn.Sentinel, []string{"s1:26379", "s2:1"}, 0,
			asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:1"}}},
		{"sentinel ipv6", "redis-sentinel://[::1]:26379,[::1]/m/", redisconn.Sentinel, []string{"[::1]:26379", "[::1]:26379"}, 0,
			asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"[::1]:26379", "[::1]:26379"}}},
		{"cluster", "redis-cluster://u:p%40ss@127.0.0.1:7000,127.0.0.1:7001", redisconn.Cluster,
			[]string{"127.0.0.1:7000", "127.0.0.1:7001"}, 0,
			redisconn.ClusterOpt{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Username: "u", Password: "p@ss"}},
		{"cluster one seed trailing slash ok", "redis-cluster://c1:7000", redisconn.Cluster, []string{"c1:7000"}, 0,
			redisconn.ClusterOpt{Addrs: []string{"c1:7000"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := redisconn.Parse(tc.url)
			require.NoError(t, err)
			require.Equal(t, tc.shape, c.Shape)
			require.Equal(t, tc.addrs, c.Addrs())
			require.Equal(t, tc.db, c.DB())
			require.Equal(t, tc.opt, c.Asynq())
		})
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, url, want string }{
		{"empty", "", "want redis://"},
		{"no scheme", "127.0.0.1:6379", "want redis://"},
		{"unknown scheme", "memcache://h:1", "unknown scheme"},
		{"single bad port", "redis://h:99999/0", "port"},
		{"single no host", "redis://:6379/0", "no host"},
		{"sentinel no hosts", "redis-sentinel:///m", "no host"},
		{"sentinel empty host in list", "redis-sentinel://a:1,,b:2/m", "no host"},
		{"sentinel port not a number", "redis-sentinel://a:x/m", "port"},
		{"sentinel port zero", "redis-sentinel://a:0/m", "port"},
		{"sentinel missing master", "redis-sentinel://a:1", "no master name"},
		{"sentinel missing master slash", "redis-sentinel://a:1/", "no master name"},
		{"sentinel bad db", "redis-sentinel://a:1/m/x", "database"},
		{"sentinel negative db", "redis-sentinel://a:1/m/-1", "database"},
		{"sentinel extra path", "redis-sentinel://a:1/m/0/x", "more than"},
		{"sentinel unknown param", "redis-sentinel://a:1/m?foo=1", "unknown parameter"},
		{"cluster with db", "redis-cluster://a:1,b:2/0", "only database 0"},
		{"cluster with db 3", "redis-cluster://a:1/3", "only database 0"},
		{"cluster unknown param", "redis-cluster://a:1?sentinel_password=x", "unknown parameter"},
		{"cluster no host", "redis-cluster://", "no host"},
		{"cluster only password", "redis-cluster://:pw@", "no host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := redisconn.Parse(tc.url)
			require.ErrorIs(t, err, redisconn.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestErrorsNeverEchoThePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"redis-sentinel://:topsecret@a:x/m", "redis-cluster://u:topsecret@a:1/0", "redis://:topsecret@h:99999"} {
		_, err := redisconn.Parse(u)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "topsecret")
	}
}
