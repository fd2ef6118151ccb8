package testdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name RedisSentinel's sentinel monitors.
const SentinelMaster = "aeth"

// RedisSentinel starts a private primary (Redis) and one sentinel monitoring it
// as SentinelMaster, and returns the redis-sentinel:// URL of database db. It is
// enough to check that clients find the primary through Sentinel; a failover
// needs a replica and a quorum of sentinels (the Sentinel drill builds those).
// Debian's redis-sentinel package is not needed: redis-server --sentinel is the
// same program.
func RedisSentinel(t testing.TB, db int) string {
	t.Helper()
	primary := Redis(t)
	opt, err := redis.ParseURL(primary)
	if err != nil {
		t.Fatalf("primary url: %v", err)
	}
	host, port, _ := strings.Cut(opt.Addr, ":")
	sport := startServer(t, func(sport int, dir string) []string {
		conf := filepath.Join(dir, "sentinel.conf")
		// The sentinel rewrites its config file, so it must be its own and writable.
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n",
			sport, dir, filepath.Join(dir, "sentinel.log"), SentinelMaster, host, port, SentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatalf("sentinel config: %v", err)
		}
		return []string{conf, "--sentinel"}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", sport)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := testinfra.Poll(ctx, func() error {
		got, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		if err != nil {
			return err
		}
		if len(got) != 2 || got[1] != port {
			return fmt.Errorf("sentinel names %v, want port %s", got, port)
		}
		return nil
	}); err != nil {
		t.Fatalf("sentinel on %s never named the primary: %v", addr, err)
	}
	return fmt.Sprintf("redis-sentinel://%s/%s/%d", addr, SentinelMaster, db)
}
