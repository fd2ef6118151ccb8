package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// SentinelGroup is a Redis primary, one replica of it and the sentinels that
// watch them, all private redis-server processes on loopback ports. Debian ships
// no separate redis-sentinel binary: a sentinel is `redis-server <conf> --sentinel`
// with a config file of its own that it rewrites as it learns the topology.
type SentinelGroup struct {
	Master    string
	Primary   *RedisServer
	Replica   *RedisServer
	Sentinels []*sentinel
}

type sentinel struct {
	Port int
	cmd  *exec.Cmd
	done chan struct{}
}

// SentinelOpts shape a group: how fast sentinels call a primary down and fail it over.
type SentinelOpts struct {
	Sentinels       int
	Quorum          int
	DownAfter       time.Duration
	FailoverTimeout time.Duration
}

// StartSentinelGroup starts the primary, its replica (AOF on both, as a fleet's
// Redis would be) and the sentinels, each with its data in a directory under dir,
// and waits until every sentinel knows the replica and the other sentinels.
func StartSentinelGroup(dir, master string, o SentinelOpts) (_ *SentinelGroup, err error) {
	g := &SentinelGroup{Master: master}
	defer func() {
		if err != nil {
			g.Stop()
		}
	}()
	sub := func(name string) (string, error) {
		d := filepath.Join(dir, name)
		return d, os.MkdirAll(d, 0o755)
	}
	pd, err := sub("primary")
	if err != nil {
		return nil, err
	}
	if g.Primary, err = StartRedisWith(&RedisServer{Dir: pd, AOF: true}); err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	rd, err := sub("replica")
	if err != nil {
		return nil, err
	}
	if g.Replica, err = StartRedisWith(&RedisServer{Dir: rd, AOF: true, Args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(g.Primary.Port)}}); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if err := waitLinkUp(g.Replica.Addr()); err != nil {
		return nil, err
	}
	for i := range o.Sentinels {
		sd, err := sub(fmt.Sprintf("sentinel-%d", i))
		if err != nil {
			return nil, err
		}
		s, err := startSentinel(sd, master, g.Primary.Port, o)
		if err != nil {
			return nil, err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	return g, g.waitTopology(o.Sentinels)
}

func startSentinel(dir, master string, primary int, o SentinelOpts) (*sentinel, error) {
	port, err := testinfra.FreePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, port, dir, filepath.Join(dir, "sentinel.log"), master, primary, o.Quorum,
		master, o.DownAfter.Milliseconds(), master, o.FailoverTimeout.Milliseconds(), master)
	// Writable: a sentinel rewrites its config with what it learns.
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	s := &sentinel{Port: port, cmd: exec.Command("redis-server", conf, "--sentinel"), done: make(chan struct{})}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sentinel: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	return s, nil
}

// waitLinkUp waits until the replica has finished its initial sync: until then it
// holds nothing, and a failover would lose the whole dataset rather than the
// replication lag the drill is about.
func waitLinkUp(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s never finished its initial sync (%v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitTopology waits until every sentinel has found the replica and the other
// sentinels: before that a failover could not reach its quorum.
func (g *SentinelGroup) waitTopology(n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)})
		for {
			m, err := c.Master(context.Background(), g.Master).Result()
			if err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == fmt.Sprint(n-1) {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return fmt.Errorf("sentinel :%d never saw the replica and %d other sentinels (%v, %v)", s.Port, n-1, m, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

// URL is the redis-sentinel:// URL of the group for database db.
func (g *SentinelGroup) URL(db int) string {
	var hosts []string
	for _, s := range g.Sentinels {
		hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", s.Port))
	}
	return fmt.Sprintf("redis-sentinel://%s/%s/%d", strings.Join(hosts, ","), g.Master, db)
}

// MasterAddr is the primary's address as the first sentinel that answers sees it.
func (g *SentinelGroup) MasterAddr(ctx context.Context) (string, error) {
	var last error = errors.New("no sentinel")
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)})
		addr, err := c.GetMasterAddrByName(ctx, g.Master).Result()
		c.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		last = err
	}
	return "", last
}

// WaitPromoted waits until the sentinels name the replica as the master and the
// replica itself says role:master, and returns how long that took.
func (g *SentinelGroup) WaitPromoted(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	c := redis.NewClient(&redis.Options{Addr: g.Replica.Addr()})
	defer c.Close()
	for time.Since(start) < timeout && ctx.Err() == nil {
		addr, err := g.MasterAddr(ctx)
		if err == nil && addr == g.Replica.Addr() {
			if info, err := c.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
				return time.Since(start), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), fmt.Errorf("the replica %s was not promoted within %s", g.Replica.Addr(), timeout)
}

// Stop ends every process of the group.
func (g *SentinelGroup) Stop() {
	for _, s := range g.Sentinels {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	g.Sentinels = nil
	if g.Replica != nil {
		g.Replica.Stop()
	}
	if g.Primary != nil {
		g.Primary.Stop()
	}
}
