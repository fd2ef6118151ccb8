package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// RiverResult is section 3: River, the PostgreSQL-backed queue a user might pick
// instead, with no-op jobs on the same PostgreSQL.
type RiverResult struct {
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	InsertPerS  float64 `json:"insert_per_s"`
	BulkPerS    float64 `json:"bulk_insert_per_s"`
	// ProcessPerS is with River's default FetchCooldown (100ms), which caps a queue
	// at about MaxWorkers × 10 jobs/s; TunedPerS with FetchCooldown 1ms.
	ProcessPerS      float64        `json:"process_per_s_default_cooldown"`
	DefaultProcessed int            `json:"default_processed"`
	TunedPerS        float64        `json:"process_per_s_cooldown_1ms"`
	CPU              harness.CPUUse `json:"cpu"`
}

const riverSchema = "river_bench"

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func benchRiver(ctx context.Context, e *env, res *Result) error {
	n := e.o.riverJobs
	pool, err := pgxpool.New(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+riverSchema); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: riverSchema, Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	meter := e.cpu()
	r := &res.River
	r.Jobs, r.Concurrency = n, e.o.concurrency

	client, err := riverClient(drv, e.o.concurrency, 0, quiet)
	if err != nil {
		return err
	}
	// Insert one at a time from several goroutines, as the asynq enqueue does.
	start := time.Now()
	err = concurrently(n, enqueuers, func() error {
		_, err := client.Insert(ctx, noopArgs{}, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("river insert: %w", err)
	}
	r.InsertPerS = float64(n) / time.Since(start).Seconds()
	progress("river: inserted %d jobs in %.2fs (%.0f/s, %d goroutines)", n, time.Since(start).Seconds(), r.InsertPerS, enqueuers)

	done, elapsed, err := drainRiver(ctx, client, pool, n, 15*time.Second)
	if err != nil {
		return err
	}
	r.DefaultProcessed, r.ProcessPerS = done, float64(done)/elapsed.Seconds()
	progress("river (default FetchCooldown 100ms): %d jobs in %.2fs = %.0f/s (concurrency %d)", done, elapsed.Seconds(), r.ProcessPerS, e.o.concurrency)
	if _, err := pool.Exec(ctx, "TRUNCATE "+riverSchema+".river_job"); err != nil {
		return err
	}

	tuned, err := riverClient(drv, e.o.concurrency, time.Millisecond, quiet)
	if err != nil {
		return err
	}
	batch := make([]river.InsertManyParams, 0, 1000)
	start = time.Now()
	for i := 0; i < n; i += cap(batch) {
		batch = batch[:0]
		for j := i; j < min(n, i+cap(batch)); j++ {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := tuned.InsertManyFast(ctx, batch); err != nil {
			return fmt.Errorf("river bulk insert: %w", err)
		}
	}
	r.BulkPerS = float64(n) / time.Since(start).Seconds()
	progress("river: bulk-inserted %d jobs in %.2fs (%.0f/s)", n, time.Since(start).Seconds(), r.BulkPerS)
	done, elapsed, err = drainRiver(ctx, tuned, pool, n, 60*time.Second)
	if err != nil {
		return err
	}
	r.TunedPerS = float64(done) / elapsed.Seconds()
	r.CPU = meter.Stop()
	progress("river (FetchCooldown 1ms): %d jobs in %.2fs = %.0f/s (concurrency %d)", done, elapsed.Seconds(), r.TunedPerS, e.o.concurrency)
	_, err = pool.Exec(ctx, "DROP SCHEMA "+riverSchema+" CASCADE")
	return err
}

// riverClient builds a client working the default queue with concurrency workers;
// cooldown 0 keeps River's default fetch cooldown.
func riverClient(drv *riverpgxv5.Driver, concurrency int, cooldown time.Duration, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	cfg := &river.Config{
		Schema: riverSchema, Workers: workers, Logger: log, FetchCooldown: cooldown,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: concurrency}},
	}
	if cooldown > 0 {
		cfg.FetchPollInterval = 10 * cooldown
	}
	return river.NewClient(drv, cfg)
}

// drainRiver starts client and polls the completed count until n jobs are done or
// window has passed; it stops the client and returns the count and the time taken.
func drainRiver(ctx context.Context, client *river.Client[pgx.Tx], pool *pgxpool.Pool, n int, window time.Duration) (int, time.Duration, error) {
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	for {
		var done int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+riverSchema+".river_job WHERE state = 'completed'").Scan(&done); err != nil {
			return 0, 0, err
		}
		if done >= n || time.Since(start) > window {
			return done, time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
