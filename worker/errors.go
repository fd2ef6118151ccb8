package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// The handlers' control flow is said with errors, and read in one place
// (ServerConfig), the way River's JobSnooze/JobCancel are: a handler that must wait
// returns Snooze, one that failed returns its error, one whose run is over
// returns nil having recorded why.

// ErrSessionBusy means another delivery is stepping the session right now; the task
// is retried shortly and the retry is not counted as a failure.
var ErrSessionBusy = errors.New("session busy")

// ErrLeaseWaiting means a step waits for a GPU service slot: its task is retried
// without counting a failure.
var ErrLeaseWaiting = errors.New("waiting for a GPU lease")

// ErrRateLimitWaiting means a step's model call is held back by a rate limit
// (the fleet's governor or the provider's 429/503/529): its task is retried
// after the wait without counting a failure, up to Config.MaxWait.
var ErrRateLimitWaiting = errors.New("waiting for a model rate limit")

// busyRetry is how soon a busy session (or a shutdown's hand-back) runs again.
const busyRetry = 200 * time.Millisecond

// Snooze asks for the task to run again after `after` without counting a failure:
// the handler waits (a GPU lease, a busy session); it did not fail. cause says
// what it waits for and is matched by errors.Is.
func Snooze(after time.Duration, cause error) error {
	return &snoozeError{after: after, cause: cause}
}

type snoozeError struct {
	after time.Duration
	cause error
}

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %s: %v", e.after, e.cause) }
func (e *snoozeError) Unwrap() error { return e.cause }

// ServerConfig completes an asynq server configuration for the worker's tasks:
// which errors count against the retry budget, when a task runs again, and the
// handler of tasks that exhausted their retries (the run fails, never hangs).
func (w *Worker) ServerConfig(cfg asynq.Config) asynq.Config {
	cfg.IsFailure = isFailure
	cfg.RetryDelayFunc = retryDelay
	cfg.ErrorHandler = w.errorHandler()
	return cfg
}

// isFailure: a snooze or a shutdown is not the task's fault.
func isFailure(err error) bool {
	var s *snoozeError
	return !errors.As(err, &s) && !errors.Is(err, context.Canceled)
}

// retryDelay runs snoozed tasks when they asked, tasks a shutdown handed back
// soon, and everything else with exponential backoff.
func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var s *snoozeError
	switch {
	case errors.As(err, &s):
		return s.after
	case errors.Is(err, context.Canceled):
		return busyRetry
	}
	return time.Second << min(n, 6)
}

// outcome labels a handler error for metrics.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrSessionBusy):
		return "busy"
	case errors.Is(err, ErrLeaseWaiting):
		return "lease_wait"
	case errors.Is(err, ErrRateLimitWaiting):
		return "rate_limit_wait"
	default:
		return "error"
	}
}
