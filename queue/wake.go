package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WakeChannel is the Redis channel an Enqueuer announces due-now tasks on, so
// idle workers need not poll often to start them at once; with a database
// number other than 0 it is suffixed ":<db>" (WakeChannelOf), since channels are
// shared by every database of a server while queues are not.
const WakeChannel = "aetherium:queue:wake"

// WakeChannelOf is the wake channel of the fleet whose Redis client rdb is.
func WakeChannelOf(rdb redis.UniversalClient) string {
	if c, ok := rdb.(*redis.Client); ok && c.Options().DB != 0 {
		return fmt.Sprintf("%s:%d", WakeChannel, c.Options().DB)
	}
	return WakeChannel
}

// Waker lets an idle asynq server sleep until work arrives instead of polling
// its queues every few milliseconds. asynq polls (its processor sleeps
// TaskCheckInterval after a dequeue round that found every queue empty, and the
// sleep cannot be interrupted); a short interval makes hops fast but costs an
// idle worker several per cent of a core. The Waker is a go-redis hook on the
// server's own client: after a dequeue round that found nothing it blocks until
// an Enqueuer announces a task on WakeChannel, or Idle passes — so the server
// runs with a tiny TaskCheckInterval, starts a task about a millisecond after
// it was enqueued, and an idle server polls once per Idle. Tasks nobody
// announces (retries and scheduled tasks that asynq's forwarder moves, tasks
// enqueued by other clients) wait at most Idle, and so does everything while
// the subscription is down: the wake-up only ever shortens a wait.
type Waker struct {
	rdb    redis.UniversalClient
	queues int
	idle   time.Duration

	mu   sync.Mutex
	gen  uint64
	wake chan struct{} // closed at the next announcement
	done chan struct{} // closed when Run ends: nothing waits any more
	// ready is closed once Redis confirmed the subscription: announcements
	// before it are not heard.
	ready chan struct{}

	// The dequeue round in progress (asynq dequeues from one goroutine): the
	// queues found empty so far, by pending key. A set, not a count: a
	// NOSCRIPT answer (a node that has not loaded asynq's script yet, as every
	// Cluster master at first) is retried with EVAL for the same queue, and a
	// count that took both for two queues fell out of step with asynq's rounds
	// and slept in the middle of one, before it looked at the queue holding the
	// announced task (seen on a Cluster: the task then waited the idle poll).
	empty map[string]bool
	start uint64
}

// NewWaker returns a Waker for a server polling queues queues that waits at
// most idle between polls. rdb is any client of the same Redis (it subscribes).
func NewWaker(rdb redis.UniversalClient, queues int, idle time.Duration) *Waker {
	return &Waker{rdb: rdb, queues: max(queues, 1), idle: idle, wake: make(chan struct{}), done: make(chan struct{}), ready: make(chan struct{}), empty: map[string]bool{}}
}

// Run follows WakeChannel until ctx ends (go-redis resubscribes after a
// connection loss). Once it returned, the hook no longer waits: end it before
// shutting the server down, whose processor stops only between dequeue rounds
// (otherwise a shutdown waits up to idle).
func (w *Waker) Run(ctx context.Context) error {
	defer close(w.done)
	sub := w.rdb.Subscribe(ctx, WakeChannelOf(w.rdb))
	defer sub.Close()
	// The first reply is the subscription's confirmation. Until it comes (Redis
	// may be away at start) the hook still waits at most idle, so keep asking
	// rather than give up: a Waker that returned leaves the server polling
	// without pause.
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		if _, err := sub.Receive(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	close(w.ready)
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ch:
			if !ok {
				return errors.New("queue: wake subscription closed")
			}
			w.announce()
		}
	}
}

// Ready is closed once the Waker hears announcements.
func (w *Waker) Ready() <-chan struct{} { return w.ready }

func (w *Waker) announce() {
	w.mu.Lock()
	w.gen++
	close(w.wake)
	w.wake = make(chan struct{})
	w.mu.Unlock()
}

func (w *Waker) generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

// sleep waits for an announcement after start, or idle.
func (w *Waker) sleep(start uint64) {
	w.mu.Lock()
	if w.gen != start {
		w.mu.Unlock()
		return // announced during the round: poll again at once
	}
	wake := w.wake
	w.mu.Unlock()
	t := time.NewTimer(w.idle)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-w.done:
	}
}

// Hook is the go-redis hook to add to the asynq server's client (and only its).
func (w *Waker) Hook() redis.Hook { return wakeHook{w} }

type wakeHook struct{ w *Waker }

func (h wakeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h wakeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h wakeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isDequeue(cmd.Args()) {
			return next(ctx, cmd)
		}
		w := h.w
		if len(w.empty) == 0 {
			// The generation before the round's first look: an announcement
			// after it may be of a task the round missed.
			w.start = w.generation()
		}
		err := next(ctx, cmd)
		switch {
		case errors.Is(err, redis.Nil):
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			return err // the same queue again, by EVAL
		default:
			clear(w.empty) // a task, or an error: asynq's round ends
			return err
		}
		w.empty[cmd.Args()[3].(string)] = true
		if len(w.empty) >= w.queues {
			clear(w.empty)
			w.sleep(w.start)
		}
		return err
	}
}

// isDequeue recognizes asynq's dequeue script (EVALSHA or EVAL, its keys the
// queue's pending, paused, active and lease sets).
func isDequeue(args []any) bool {
	if len(args) < 5 {
		return false
	}
	name, _ := args[0].(string)
	if name != "evalsha" && name != "eval" {
		return false
	}
	pending, _ := args[3].(string)
	paused, _ := args[4].(string)
	return strings.HasPrefix(pending, "asynq:{") && strings.HasSuffix(pending, "}:pending") && strings.HasSuffix(paused, "}:paused")
}
