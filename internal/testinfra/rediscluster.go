package testinfra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// MinClusterMasters is the smallest Redis Cluster redis-cli creates.
const MinClusterMasters = 3

// RedisCluster is a Redis Cluster on loopback ports (masters only, or masters with
// replicas), each node a redis-server process, for tests and drills on this machine.
type RedisCluster struct {
	// Dir holds every node's data, config and log (removed by Stop).
	Dir string
	// Addrs are the nodes' client addresses, host:port.
	Addrs []string
	// Procs are the nodes' processes, in Addrs order (a drill may kill one).
	Procs []*exec.Cmd
}

// URL is the cluster's redis-cluster:// URL (internal/redisconn).
func (c *RedisCluster) URL() string { return "redis-cluster://" + strings.Join(c.Addrs, ",") }

// Stop kills every node and removes Dir.
func (c *RedisCluster) Stop() {
	for _, p := range c.Procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	c.Procs = nil
	_ = os.RemoveAll(c.Dir)
}

// ClusterOpts shape a cluster for StartRedisClusterWith.
type ClusterOpts struct {
	Masters int
	// ReplicasPerMaster is redis-cli's --cluster-replicas (0: masters only).
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a node may be unreachable
	// before it is failed and its replica promoted. Default 2s.
	NodeTimeout time.Duration
}

// StartRedisCluster starts masters redis-server nodes with cluster mode on,
// joins them with redis-cli --cluster create and waits until every node says
// cluster_state:ok and knows the others. The error wraps exec.ErrNotFound when
// redis-server or redis-cli is missing. On error nothing is left running.
func StartRedisCluster(masters int) (*RedisCluster, error) {
	return StartRedisClusterWith(ClusterOpts{Masters: masters})
}

// StartRedisClusterWith is StartRedisCluster with replicas and the node timeout
// chosen: o.Masters × (1 + o.ReplicasPerMaster) nodes, redis-cli deciding which
// node replicates which master. It also waits until every replica has finished
// its initial sync, so a failover loses only the replication lag.
func StartRedisClusterWith(o ClusterOpts) (_ *RedisCluster, err error) {
	masters := o.Masters
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = 2 * time.Second
	}
	nodes := masters * (1 + o.ReplicasPerMaster)
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli: %w", err)
	}
	if masters < MinClusterMasters {
		return nil, fmt.Errorf("a redis cluster needs at least %d masters, not %d", MinClusterMasters, masters)
	}
	c := &RedisCluster{}
	if c.Dir, err = os.MkdirTemp("", "aeth-redis-cluster-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for range nodes {
		// The bus port is chosen too: the default (port+10000) may be taken.
		port, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		bus, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		dir := filepath.Join(c.Dir, fmt.Sprint(port))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("node dir: %w", err)
		}
		cmd := exec.Command(server, "--port", fmt.Sprint(port), "--cluster-port", fmt.Sprint(bus), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", fmt.Sprint(o.NodeTimeout.Milliseconds()), "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
		// A test binary killed by its timeout never reaches its cleanup; the
		// kernel then ends the nodes with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		c.Procs = append(c.Procs, cmd)
		c.Addrs = append(c.Addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range c.Addrs {
		if err := Poll(ctx, func() error {
			n := redis.NewClient(&redis.Options{Addr: a})
			defer n.Close()
			return n.Ping(ctx).Err()
		}); err != nil {
			return nil, fmt.Errorf("node %s did not answer: %w", a, err)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(o.ReplicasPerMaster), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	// Every node must agree before the first client: a node that has not yet
	// heard of the others answers CLUSTERDOWN or MOVED to nowhere.
	for _, a := range c.Addrs {
		if err := Poll(ctx, func() error {
			n := redis.NewClient(&redis.Options{Addr: a})
			defer n.Close()
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", nodes)) {
				return errors.New("not ready: " + strings.Fields(info)[0])
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("node %s: cluster_state never ok: %w", a, err)
		}
	}
	if o.ReplicasPerMaster > 0 {
		if err := c.waitReplicasSynced(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitReplicasSynced waits until every replica's link to its master is up with
// no sync in progress: a replica promoted before that holds nothing.
func (c *RedisCluster) waitReplicasSynced(ctx context.Context) error {
	for _, a := range c.Addrs {
		if err := Poll(ctx, func() error {
			n := redis.NewClient(&redis.Options{Addr: a})
			defer n.Close()
			info, err := n.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(info, "role:slave") && (!strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1")) {
				return errors.New("replica still syncing")
			}
			return nil
		}); err != nil {
			return fmt.Errorf("node %s: %w", a, err)
		}
	}
	return nil
}

// Proc is the process of the node at addr (nil if none).
func (c *RedisCluster) Proc(addr string) *exec.Cmd {
	for i, a := range c.Addrs {
		if a == addr {
			return c.Procs[i]
		}
	}
	return nil
}

func Poll(ctx context.Context, try func() error) error {
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
