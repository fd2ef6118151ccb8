package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// AsynqResult is section 1: the queue the fleet runs on, with handlers that do
// nothing — the floor every fleet number is compared with.
type AsynqResult struct {
	Tasks       int     `json:"tasks"`
	Concurrency int     `json:"concurrency"`
	EnqueuePerS float64 `json:"enqueue_per_s"`
	ProcessPerS float64 `json:"process_per_s"`
	// CPU is measured while the server drains the queue.
	CPU harness.CPUUse `json:"cpu"`
}

const enqueuers = 8

// benchAsynq enqueues n no-op tasks from enqueuers goroutines, then starts a server
// with the fleet's concurrency and poll interval and times it draining the queue.
func benchAsynq(ctx context.Context, e *env, res *Result) error {
	n := e.o.asynqTasks
	opt := e.queueOpt
	client := asynq.NewClient(opt)
	defer client.Close()
	payload := []byte(`{"run_id":"00000000-0000-0000-0000-000000000000"}`)

	start := time.Now()
	err := concurrently(n, enqueuers, func() error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("bench:noop", payload), asynq.Queue("bench"))
		return err
	})
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	enq := time.Since(start)
	progress("asynq: enqueued %d no-op tasks in %.2fs (%.0f/s, %d goroutines)", n, enq.Seconds(), float64(n)/enq.Seconds(), enqueuers)

	var done atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: e.o.concurrency, Queues: map[string]int{"bench": 1},
		TaskCheckInterval: e.fleet.Cfg.Worker.TaskCheckInterval, LogLevel: asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench:noop", func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	})
	meter := e.cpu()
	start = time.Now()
	if err := srv.Start(mux); err != nil {
		return err
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		srv.Shutdown()
		return fmt.Errorf("processed %d of %d tasks in 5 minutes", done.Load(), n)
	case <-ctx.Done():
		srv.Shutdown()
		return ctx.Err()
	}
	proc := time.Since(start)
	srv.Shutdown()
	cpu := meter.Stop()
	res.Asynq = AsynqResult{Tasks: n, Concurrency: e.o.concurrency, EnqueuePerS: float64(n) / enq.Seconds(), ProcessPerS: float64(n) / proc.Seconds(), CPU: cpu}
	progress("asynq: processed %d no-op tasks in %.2fs (%.0f/s, concurrency %d); CPU: %s", n, proc.Seconds(), res.Asynq.ProcessPerS, e.o.concurrency, cpu)
	return e.rdb.FlushDB(ctx).Err()
}

// concurrently calls enqueue n times in all from workers goroutines, one call
// at a time each, as a fleet's producers do, and returns the first error.
func concurrently(n, workers int, enqueue func() error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := enqueue(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
