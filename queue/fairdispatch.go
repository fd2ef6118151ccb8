package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/queue/fair"
)

// routeKey is the payload field of a run's task that carries its route: the
// worker's FairRunner reads it to count the task against its key. Handlers'
// payload structs have no such field, so they ignore it.
const routeKey = `"route":`

// routed returns t with r at the head of its JSON object payload.
func routed(t *asynq.Task, r Route) *asynq.Task {
	p := t.Payload()
	if len(p) < 2 || p[0] != '{' {
		return t
	}
	raw, _ := json.Marshal(routeField{Key: r.Key, Priority: r.Priority}) // a string and an int
	out := make([]byte, 0, len(p)+len(routeKey)+len(raw)+1)
	out = append(out, '{')
	out = append(out, routeKey...)
	out = append(out, raw...)
	if rest := bytes.TrimSpace(p[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	out = append(out, p[1:]...)
	return asynq.NewTask(t.Type(), out)
}

type routeField struct {
	Key      string `json:"k"`
	Priority int    `json:"p"`
}

// RouteOf is the route a task of a run carries (false for other tasks, and
// for tasks enqueued before routes existed).
func RouteOf(t *asynq.Task) (Route, bool) {
	if !bytes.Contains(t.Payload(), []byte(routeKey)) {
		return Route{}, false
	}
	var s struct {
		Route *routeField `json:"route"`
	}
	if json.Unmarshal(t.Payload(), &s) != nil || s.Route == nil || s.Route.Key == "" {
		return Route{}, false
	}
	return Route{Key: s.Route.Key, Priority: s.Route.Priority}, true
}

// spec is what the dispatcher keeps of a task until it is dispatched: all
// that enqueue needs.
type spec struct {
	Type      string        `json:"type"`
	Payload   []byte        `json:"payload"`
	Queue     string        `json:"queue"`
	ID        string        `json:"id"`
	MaxRetry  int           `json:"max_retry"`
	Retention time.Duration `json:"retention"`
	Timeout   time.Duration `json:"timeout"`
}

// runTask enqueues a task of a run: through the fair dispatcher when there is
// one, else into asynq at once.
func (e *Enqueuer) runTask(ctx context.Context, r Route, t *asynq.Task, o options) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("enqueue %s %s: %w", t.Type(), o.id, err)
	}
	t = routed(t, r)
	if e.cfg.Fair == nil {
		_, err := e.enqueue(ctx, t, o)
		return err
	}
	weight, _, turns := e.cfg.Fairness.Policy(r.Key)
	raw, err := json.Marshal(spec{Type: t.Type(), Payload: t.Payload(), Queue: o.queue, ID: o.id,
		MaxRetry: o.maxRetry, Retention: o.retention, Timeout: o.timeout})
	if err != nil {
		return fmt.Errorf("enqueue %s %s: %w", t.Type(), o.id, err)
	}
	ds, err := e.cfg.Fair.Submit(ctx, fair.Task{ID: o.id, Key: r.Key, Weight: weight, Limit: turns, Priority: r.Priority, Spec: raw})
	if err != nil {
		return fmt.Errorf("enqueue %s %s: fair dispatch: %w", t.Type(), o.id, err)
	}
	return e.dispatch(ctx, ds)
}

// Withdraw takes tasks still waiting in their lines out of the fair
// dispatcher (a cancelled run's first step), so they never take a slot; a task
// already dispatched or unknown is left alone. A no-op without a dispatcher.
func (e *Enqueuer) Withdraw(ctx context.Context, taskIDs ...string) error {
	if e.cfg.Fair == nil {
		return nil
	}
	var errs []error
	for _, id := range taskIDs {
		if _, err := e.cfg.Fair.Cancel(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// maxDispatchRounds bounds dispatch's loop over tasks asynq already had.
const maxDispatchRounds = 8

// dispatch enqueues into asynq the tasks the dispatcher released. A task id
// asynq already holds (a re-dispatch after the dispatch lease passed, a task
// that already ran) frees its slot at once. An enqueue that fails leaves the
// task dispatched: its dispatch lease runs out and the next pump dispatches it
// again.
func (e *Enqueuer) dispatch(ctx context.Context, ds []fair.Dispatched) error {
	var errs []error
	for round := 0; len(ds) > 0 && round < maxDispatchRounds; round++ {
		var again []fair.Dispatched
		for _, d := range ds {
			var sp spec
			if err := json.Unmarshal(d.Spec, &sp); err != nil {
				// Never written by this package: drop it rather than hold a slot.
				errs = append(errs, fmt.Errorf("dispatch %s: bad spec: %w", d.ID, err))
				more, derr := e.cfg.Fair.Done(ctx, d.ID)
				again = append(again, more...)
				errs = append(errs, derr)
				continue
			}
			t := asynq.NewTask(sp.Type, sp.Payload)
			// The wait a handler measures starts at the submission, not here.
			t = stamp(t, time.Now().Add(-d.Waited))
			enqueued, err := e.enqueue(ctx, t, options{queue: sp.Queue, id: sp.ID, maxRetry: sp.MaxRetry,
				retention: sp.Retention, timeout: sp.Timeout, stamped: true})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !enqueued {
				more, derr := e.cfg.Fair.Done(ctx, d.ID)
				again = append(again, more...)
				errs = append(errs, derr)
			}
		}
		ds = again
	}
	return errors.Join(errs...)
}

// FairRunner is a worker process's side of the fair dispatcher: it marks each
// task of a run running while its handler runs and done when it returns (the
// slot goes to the next task, fleet-wide), and heartbeats the process's
// capacity (its asynq concurrency: the window the dispatcher fills) and the
// leases of the tasks it runs. A process that dies stops heartbeating: its
// capacity leaves the window after fair.Config.WorkerTTL and its tasks' slots
// come back after RunLease, while asynq hands the tasks themselves to another
// worker.
type FairRunner struct {
	e        *Enqueuer
	worker   string
	capacity int
	log      *slog.Logger

	mu      sync.Mutex
	running map[string]int

	// Observe, when set, is given the dispatcher's Stats after every
	// heartbeat (the fleet's gauges).
	Observe func(fair.Stats)
}

// FairRunner returns the runner of worker process worker (a name unique in the
// fleet) running capacity tasks at once; nil when e has no fair dispatcher.
func (e *Enqueuer) FairRunner(worker string, capacity int, log *slog.Logger) *FairRunner {
	if e.cfg.Fair == nil {
		return nil
	}
	return &FairRunner{e: e, worker: worker, capacity: capacity, log: log, running: map[string]int{}}
}

// Middleware counts each task of a run against its key while its handler
// runs. Tasks without a route (maintenance, expiries, deliveries) pass through.
// Dispatcher errors are logged, never fail a task: a slot it could not free
// is freed when its lease runs out.
func (r *FairRunner) Middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		route, ok := RouteOf(t)
		id, hasID := asynq.GetTaskID(ctx)
		if !ok || !hasID {
			return next.ProcessTask(ctx, t)
		}
		if err := r.e.cfg.Fair.Started(ctx, r.worker, id, route.Key); err != nil {
			r.log.Warn("fair dispatch: started", "task_id", id, "err", err)
		}
		r.mu.Lock()
		r.running[id]++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			if r.running[id]--; r.running[id] <= 0 {
				delete(r.running, id)
			}
			r.mu.Unlock()
			// The handler's context may be cancelled (shutdown): the slot must
			// still be freed.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			ds, err := r.e.cfg.Fair.Done(dctx, id)
			if err == nil {
				err = r.e.dispatch(dctx, ds)
			}
			if err != nil {
				r.log.Warn("fair dispatch: done", "task_id", id, "err", err)
			}
		}()
		return next.ProcessTask(ctx, t)
	})
}

// Run heartbeats every every until ctx ends, then takes the process's capacity
// out of the window (Leave).
func (r *FairRunner) Run(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		r.beat(ctx)
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return r.e.cfg.Fair.Leave(lctx, r.worker)
		case <-tick.C:
		}
	}
}

func (r *FairRunner) beat(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Strings(ids)
	ds, err := r.e.cfg.Fair.Heartbeat(ctx, r.worker, r.capacity, ids)
	// One script dispatches at most Scan tasks, so a batch that came back
	// full may have left slots free (a worker joining with more capacity than
	// Scan): pump until a batch comes back short, instead of leaving them idle
	// until a task ends or the next beat, seconds later. The fleet's first
	// second at 100 slots had 64 busy. Bounded: the window has capacity slots.
	for pumps := 0; err == nil; pumps++ {
		if err = r.e.dispatch(ctx, ds); err != nil || len(ds) < r.e.cfg.Fair.Config().Scan || pumps > r.capacity {
			break
		}
		ds, err = r.e.cfg.Fair.Pump(ctx)
	}
	if err != nil && ctx.Err() == nil {
		r.log.Warn("fair dispatch: heartbeat", "worker", r.worker, "err", err)
	}
	if r.Observe != nil {
		if st, err := r.e.cfg.Fair.Stats(ctx); err == nil {
			r.Observe(st)
		}
	}
}

// WorkerName is a fleet-unique name of this worker process for the dispatcher.
func WorkerName(host string, pid int, started time.Time) string {
	return host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatInt(started.UnixNano(), 36)
}
