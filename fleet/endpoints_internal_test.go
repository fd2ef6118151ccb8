package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egress"
)

// The egress proxy refuses every Redis address the URL names, whatever its
// shape: the node, each sentinel, each cluster seed (the nodes behind them are
// learnt at run time by redisNodes).
func TestFleetEndpointsNameEveryRedisAddressOfTheURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		want []string
	}{
		{"redis://127.0.0.1:6379/0", []string{"127.0.0.1:6379"}},
		{"redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2:26380/m/1", []string{"10.0.0.1:26379", "10.0.0.2:26380"}},
		{"redis-cluster://10.0.0.5:7000,10.0.0.6:7001,10.0.0.7:7002", []string{"10.0.0.5:7000", "10.0.0.6:7001", "10.0.0.7:7002"}},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.RedisURL = tc.url
			var got []string
			for _, e := range fleetEndpoints(cfg, Options{}) {
				if e.Name == egress.EndpointRedis {
					got = append(got, e.Addr)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}
