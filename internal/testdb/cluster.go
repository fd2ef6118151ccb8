package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/redisconn"
	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// ClusterNodes is how many masters the test cluster has: three is the
// smallest cluster redis-cli accepts, and enough that a service's or a run's
// keys land on different nodes than the next one's.
const ClusterNodes = 3

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
	clusterURL     string
	clusterErr     error
	clusterProcs   []*exec.Cmd
	clusterDir     string
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
		clusterURL, clusterErr = startCluster()
		if clusterErr != nil {
			stopClusterLocked()
		}
	}
	if errors.Is(clusterErr, exec.ErrNotFound) {
		Unavailable(t, "redis cluster: %v", clusterErr)
	}
	if clusterErr != nil {
		t.Fatalf("redis cluster: %v", clusterErr)
	}
	return clusterURL
}

// StopRedisCluster kills the cluster's processes and removes their data.
func StopRedisCluster() {
	clusterMu.Lock()
	defer clusterMu.Unlock()
	stopClusterLocked()
}

func stopClusterLocked() {
	for _, c := range clusterProcs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	clusterProcs = nil
	if clusterDir != "" {
		_ = os.RemoveAll(clusterDir)
		clusterDir = ""
	}
}

func startCluster() (string, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server: %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli: %w", err)
	}
	if clusterDir, err = os.MkdirTemp("", "aeth-redis-cluster-"); err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	var addrs []string
	for i := 0; i < ClusterNodes; i++ {
		// The bus port is chosen too: the default (port+10000) may be taken.
		port, err := testinfra.FreePort()
		if err != nil {
			return "", fmt.Errorf("free port: %w", err)
		}
		bus, err := testinfra.FreePort()
		if err != nil {
			return "", fmt.Errorf("free port: %w", err)
		}
		dir := filepath.Join(clusterDir, fmt.Sprint(port))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("node dir: %w", err)
		}
		cmd := exec.Command(server, "--port", fmt.Sprint(port), "--cluster-port", fmt.Sprint(bus), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
		// A test binary killed by its timeout never reaches Main's cleanup; the
		// kernel then ends the nodes with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return "", fmt.Errorf("start redis-server: %w", err)
		}
		clusterProcs = append(clusterProcs, cmd)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range addrs {
		if err := waitFor(ctx, func() error {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			return c.Ping(ctx).Err()
		}); err != nil {
			return "", fmt.Errorf("node %s did not answer: %w", a, err)
		}
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	// Every node must agree before the first test: a node that has not yet
	// heard of the others answers CLUSTERDOWN or MOVED to nowhere.
	for _, a := range addrs {
		if err := waitFor(ctx, func() error {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", ClusterNodes)) {
				return fmt.Errorf("not ready: %s", strings.Fields(info)[0])
			}
			return nil
		}); err != nil {
			return "", fmt.Errorf("node %s: cluster_state never ok: %w", a, err)
		}
	}
	return "redis-cluster://" + strings.Join(addrs, ","), nil
}

func waitFor(ctx context.Context, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
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
