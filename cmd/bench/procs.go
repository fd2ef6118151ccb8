package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/templates"
)

// startWorkers starts n `aetherium worker` processes with the given concurrency and
// script-model latency, on the bench's database and Redis.
func startWorkers(e *env, n, concurrency int, latency time.Duration, tag string) ([]*harness.Proc, error) {
	return startWorkersCfg(e, n, harness.FleetConfig{Concurrency: concurrency, ScriptLatency: latency}, tag)
}

// startWorkersWith starts n default workers at the given task check interval.
func startWorkersWith(e *env, n int, interval time.Duration, tag string) ([]*harness.Proc, error) {
	return startWorkersCfg(e, n, harness.FleetConfig{TaskCheckInterval: interval}, tag)
}

func startWorkersCfg(e *env, n int, c harness.FleetConfig, tag string) ([]*harness.Proc, error) {
	cfgPath := filepath.Join(e.tmp, fmt.Sprintf("aetherium-%s.yaml", tag))
	c.RedisURL = cmp.Or(c.RedisURL, e.redisURL)
	c.DatabaseURL, c.Workspaces = e.dbURL, filepath.Join(e.tmp, "workspaces")
	c.Templates, c.Permissions, c.ShutdownTimeout = filepath.Join(e.root, "templates"), filepath.Join(e.root, "config", "permissions.yaml"), 5*time.Second
	err := c.Write(cfgPath)
	if err != nil {
		return nil, err
	}
	procs, err := startParallel(n, func(i int) (*harness.Proc, error) {
		return harness.StartWorker(e.bin, cfgPath, filepath.Join(e.tmp, fmt.Sprintf("worker-%s-%d.log", tag, i)))
	})
	if err != nil {
		stopWorkers(procs)
		return nil, err
	}
	return procs, nil
}

// startParallel starts n processes at once; it returns the ones started (nil
// where start failed) and the failures joined.
func startParallel(n int, start func(i int) (*harness.Proc, error)) ([]*harness.Proc, error) {
	procs := make([]*harness.Proc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], errs[i] = start(i)
		}()
	}
	wg.Wait()
	return procs, errors.Join(errs...)
}

// sampler calls sample every interval until the returned stop, which returns
// the samples taken (a sample reporting !ok is left out).
func sampler(every time.Duration, sample func() (int, bool)) (stop func() []int) {
	quit := make(chan struct{})
	out := make(chan []int, 1)
	go func() {
		var got []int
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				out <- got
				return
			case <-tick.C:
			}
			if v, ok := sample(); ok {
				got = append(got, v)
			}
		}
	}()
	return func() []int { close(quit); return <-out }
}

func stopWorkers(procs []*harness.Proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(15 * time.Second) }()
	}
	wg.Wait()
}

// submitTeamRuns posts n runs of team and returns their ids.
func submitTeamRuns(ctx context.Context, e *env, team templates.Template, n int) ([]string, error) {
	return harness.SubmitMany(ctx, n, 16, 0, func(ctx context.Context, i int) (string, error) {
		return e.client.SubmitTeam(ctx, team, fmt.Sprintf("bench run %d", i))
	})
}

// span is the wall time from the first run's creation to the last one's finish, as
// PostgreSQL recorded them.
func span(ctx context.Context, e *env, ids []string) (time.Duration, error) {
	var s float64
	err := e.db.QueryRow(ctx, `SELECT extract(epoch FROM max(finished_at) - min(created_at)) FROM runs WHERE id = ANY($1::uuid[])`, ids).Scan(&s)
	return time.Duration(s * float64(time.Second)), err
}

// latencies returns each run's end-to-end time (creation to finish), sorted.
func latencies(ctx context.Context, e *env, ids []string) ([]time.Duration, error) {
	rows, err := e.db.Query(ctx, `SELECT extract(epoch FROM finished_at - created_at) FROM runs WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	out, err := pgx.AppendRows([]time.Duration(nil), rows, func(r pgx.CollectableRow) (time.Duration, error) {
		var s float64
		err := r.Scan(&s)
		return time.Duration(s * float64(time.Second)), err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// percentile is the nearest-rank percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func (e *env) countEvents(ctx context.Context, ids []string, typ string) (int, error) {
	var n int
	err := e.db.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = ANY($1::uuid[]) AND type = $2`, ids, typ).Scan(&n)
	return n, err
}
