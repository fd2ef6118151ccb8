package fair_test

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/queue/fair"
)

// A worker process with the dispatcher in front of asynq (needs Redis, so it
// only compiles here). Producers Submit instead of enqueueing; whoever gets
// tasks back from the dispatcher enqueues them, with the task id as asynq's
// TaskID so a second enqueue of the same task is harmless.
func Example_worker() {
	ctx := context.Background()
	const worker, concurrency = "worker-1", 8
	d, err := fair.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), fair.Config{})
	if err != nil {
		panic(err)
	}
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:6379"})
	defer client.Close()
	enqueue := func(ds []fair.Dispatched, err error) {
		for _, t := range ds {
			_, e := client.Enqueue(asynq.NewTask("agent:step", t.Spec), asynq.TaskID(t.ID))
			if e != nil && !errors.Is(e, asynq.ErrTaskIDConflict) {
				panic(e) // in a fleet: log it; the dispatch lease puts the task back in line
			}
		}
		if err != nil {
			panic(err)
		}
	}

	// A producer: tenant-a's run, at normal priority, at most 4 in flight.
	enqueue(d.Submit(ctx, fair.Task{ID: "run-1:step-1", Key: "tenant-a", Weight: 1, Limit: 4, Priority: 3, Spec: []byte(`{"run":"run-1"}`)}))

	// The worker: its heartbeat keeps its capacity in the window and its
	// running tasks' leases alive.
	running := func() []string { return nil } // the ids this process runs now
	go func() {
		for range time.Tick(3 * time.Second) {
			enqueue(d.Heartbeat(ctx, worker, concurrency, running()))
		}
	}()
	mux := asynq.NewServeMux()
	mux.HandleFunc("agent:step", func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		key := "tenant-a" // from the payload
		if err := d.Started(ctx, worker, id, key); err != nil {
			return err
		}
		err := error(nil) // … run the step …
		if err == nil {
			enqueue(d.Done(ctx, id)) // on a final failure too; a retried task stays in flight
		}
		return err
	})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}, asynq.Config{Concurrency: concurrency})
	defer func() { _ = d.Leave(ctx, worker) }()
	if err := srv.Run(mux); err != nil {
		panic(err)
	}
}
