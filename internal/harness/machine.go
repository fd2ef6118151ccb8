package harness

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Machine describes where the numbers were measured.
type Machine struct {
	Cores    int    `json:"cores"`
	CPU      string `json:"cpu"`
	MemoryMB int64  `json:"memory_mb"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	Redis    string `json:"redis"`
	Date     string `json:"date"`
	// LoadAvg is the 1/5/15-minute load average when the bench started: other
	// work on the machine shows up in the numbers.
	LoadAvg string `json:"load_avg"`
}

// DescribeMachine reads the machine's cores, CPU model, memory and the server
// versions.
func DescribeMachine(ctx context.Context, db *pgxpool.Pool, rdb redis.UniversalClient) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now().UTC().Format(time.RFC3339)}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	if db != nil {
		_ = db.QueryRow(ctx, "SHOW server_version").Scan(&m.Postgres)
	}
	if rdb != nil {
		if info, err := rdb.Info(ctx, "server").Result(); err == nil {
			for _, l := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
					m.Redis = v
				}
			}
		}
	}
	return m
}
