package testdb

import (
	"errors"
	"os/exec"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// ClusterNodes is how many masters the test cluster has: three is the
// smallest cluster redis-cli accepts, and enough that a service's or a run's
// keys land on different nodes than the next one's.
const ClusterNodes = testinfra.MinClusterMasters

// RedisTarget is one Redis shape a test runs against (RedisMatrix).
type RedisTarget struct {
	// Name is the sub-test name: "single" or "cluster".
	Name string
	// URL is a redis_url for internal/redisconn.
	URL string
	// Prefix is unique to the test. A single node is private to the test anyway;
	// the cluster is shared by the whole test binary and has only database 0, so
	// tests isolate their keys by this prefix (lease.Config.Prefix,
	// mailbox.Config.Prefix, a lock key).
	Prefix string
}

// RedisMatrix returns the shapes a test of our own Redis use must pass on: a
// private single node, and the binary's shared Redis Cluster (RedisCluster). The
// package's TestMain must call Main so the cluster is stopped at exit.
func RedisMatrix(t testing.TB) []RedisTarget {
	t.Helper()
	return []RedisTarget{
		{Name: "single", URL: Redis(t), Prefix: randomName("t")},
		{Name: "cluster", URL: RedisCluster(t), Prefix: randomName("t")},
	}
}

// EachRedis runs body as a parallel sub-test per shape of RedisMatrix.
func EachRedis(t *testing.T, body func(t *testing.T, tg RedisTarget)) {
	t.Helper()
	for _, tg := range RedisMatrix(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			body(t, tg)
		})
	}
}

var (
	clusterMu      sync.Mutex
	clusterMain    bool
	clusterStarted bool
	cluster        *testinfra.RedisCluster
	clusterErr     error
)

// Main runs a test binary's tests and then stops the Redis Cluster if one was
// started. Use it as TestMain: func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }.
func Main(m *testing.M) int {
	clusterMu.Lock()
	clusterMain = true
	clusterMu.Unlock()
	code := m.Run()
	StopRedisCluster()
	return code
}

// RedisCluster returns the URL (redis-cluster://…) of a Redis Cluster of
// ClusterNodes masters on loopback ports, started once per test binary on the
// first call. It fails under CI=true when redis-server is missing and skips
// otherwise, like Redis.
func RedisCluster(t testing.TB) string {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if !clusterMain {
		// Without Main nobody stops the processes at exit.
		t.Fatal("testdb.RedisCluster needs the package's TestMain to call testdb.Main")
	}
	if !clusterStarted {
		clusterStarted = true
		cluster, clusterErr = testinfra.StartRedisCluster(ClusterNodes)
	}
	if errors.Is(clusterErr, exec.ErrNotFound) {
		Unavailable(t, "redis cluster: %v", clusterErr)
	}
	if clusterErr != nil {
		t.Fatalf("redis cluster: %v", clusterErr)
	}
	return cluster.URL()
}

// StopRedisCluster kills the cluster's processes and removes their data.
func StopRedisCluster() {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if cluster != nil {
		cluster.Stop()
		cluster = nil
	}
}

// Connect opens a client of whatever shape url names (internal/redisconn),
// closed at cleanup: each call is a separate "process".
func Connect(t testing.TB, url string) redis.UniversalClient {
	t.Helper()
	rc, err := redisconn.Parse(url)
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	rdb := rc.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
