package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Versioned contracts (docs/how-to/upgrade.md): every process reports itself in
// fleet_processes with the payload contract versions it reads, and writes the
// newest version every live process reads. A process of a build before
// fleet_processes reports nothing; if it is a worker it still shows in asynq's
// server heartbeats, and counts as reading version 1 only.
const (
	// contractBeat is how often a process reports itself and reads the fleet's.
	contractBeat = 5 * time.Second
	// contractTTL is how long a report counts: a process that stops reporting
	// (crashed) is not waited for after it.
	contractTTL = 4 * contractBeat
	// contractForget deletes a crashed process's row.
	contractForget = 24 * time.Hour
)

// contracts keeps this process's row and the version the fleet agrees on.
type contracts struct {
	store  *store.Store
	insp   *asynq.Inspector
	log    *slog.Logger
	self   store.Process
	agreed atomic.Int64
	stop   func()
}

func newContracts(st *store.Store, insp *asynq.Inspector, log *slog.Logger) *contracts {
	host, _ := os.Hostname()
	pid := os.Getpid()
	now := time.Now()
	c := &contracts{store: st, insp: insp, log: log, self: store.Process{
		ID: host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatInt(now.UnixNano(), 36), Host: host, PID: pid,
		Build: build(), Contract: queue.ContractVersion, MinContract: queue.MinContractVersion,
	}}
	// Until the first agreement: the version every build reads.
	c.agreed.Store(queue.MinContractVersion)
	return c
}

// Version is the payload contract the fleet agrees on (queue.Config.Contract).
func (c *contracts) Version() int { return int(c.agreed.Load()) }

// start reports the process as role at once, then every contractBeat until
// close.
func (c *contracts) start(ctx context.Context, role string) {
	c.self.Role = role
	c.beat(ctx)
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(contractBeat)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				c.beat(bg)
			}
		}
	}()
	c.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		ctx, done := context.WithTimeout(context.Background(), 2*time.Second)
		defer done()
		if err := c.store.LeaveProcess(ctx, c.self.ID); err != nil {
			c.log.Warn("fleet contracts: leave", "err", err)
		}
	})
}

// close removes the process's row.
func (c *contracts) close() {
	if c != nil && c.stop != nil {
		c.stop()
	}
}

// beat reports this process and agrees on the fleet's version. A failure keeps
// the last agreement (a database or Redis outage does not move it).
func (c *contracts) beat(ctx context.Context) {
	if err := c.store.ReportProcess(ctx, c.self); err != nil {
		c.log.Warn("fleet contracts: report (are the migrations applied?)", "err", err)
		return
	}
	v, err := c.agree(ctx)
	if err != nil {
		c.log.Warn("fleet contracts", "err", err)
		return
	}
	if old := c.agreed.Swap(int64(v)); old != int64(v) {
		c.log.Info("fleet contract version", "writes", v, "was", old, "reads", fmt.Sprintf("%d-%d", queue.MinContractVersion, queue.ContractVersion))
	}
}

// agree is the newest contract every live process reads: the oldest Contract
// of the live rows, and 1 if an asynq worker server has no row (a build before
// versions).
func (c *contracts) agree(ctx context.Context) (int, error) {
	procs, err := c.store.LiveProcesses(ctx, contractTTL, contractForget)
	if err != nil {
		return 0, err
	}
	v := queue.ContractVersion
	known := map[string]bool{}
	for _, p := range procs {
		v = min(v, p.Contract)
		known[p.Host+":"+strconv.Itoa(p.PID)] = true
	}
	servers, err := c.insp.Servers()
	if err != nil {
		return 0, fmt.Errorf("asynq servers: %w", err)
	}
	for _, s := range servers {
		if !known[s.Host+":"+strconv.Itoa(s.PID)] {
			v = min(v, 1)
		}
	}
	return v, nil
}

// build is the binary's revision (or module version) for fleet_processes.build.
func build() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return bi.Main.Version
}
