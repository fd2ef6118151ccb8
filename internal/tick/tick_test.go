package tick

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	errStop := errors.New("stop")
	const interval = 5 * time.Millisecond
	for _, c := range []struct {
		name string
		// stopAt is the call whose fn returns errStop (0: never).
		stopAt int
		// timeout ends ctx after it (0: never; cancel instead when cancel).
		timeout time.Duration
		cancel  bool
		// wantCalls is the exact number of calls (-1: at least minCalls).
		wantCalls, minCalls int
		want                error
	}{
		{name: "fn's error stops the loop at once", stopAt: 1, wantCalls: 1, want: errStop},
		{name: "fn is called until it returns an error", stopAt: 3, wantCalls: 3, want: errStop},
		{name: "a context cancelled before the first tick: no call", cancel: true, wantCalls: 0, want: context.Canceled},
		{name: "a deadline ends the loop with ctx.Err()", timeout: 20 * interval, wantCalls: -1, minCalls: 1, want: context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			if c.cancel {
				cancel()
			}
			calls := 0
			err := Every(ctx, interval, func() error {
				calls++
				if calls == c.stopAt {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, c.want) {
				t.Errorf("Every returned %v, want %v", err, c.want)
			}
			if c.wantCalls >= 0 && calls != c.wantCalls {
				t.Errorf("fn called %d times, want %d", calls, c.wantCalls)
			}
			if c.wantCalls < 0 && calls < c.minCalls {
				t.Errorf("fn called %d times, want at least %d", calls, c.minCalls)
			}
		})
	}
}

// TestEveryWaitsAnIntervalFirst: the first call comes one interval after the
// start, not at once.
func TestEveryWaitsAnIntervalFirst(t *testing.T) {
	const interval = 50 * time.Millisecond
	start := time.Now()
	var first time.Duration
	err := Every(context.Background(), interval, func() error {
		first = time.Since(start)
		return errors.New("done")
	})
	if err == nil || err.Error() != "done" {
		t.Fatalf("Every returned %v, want fn's error", err)
	}
	if first < interval {
		t.Errorf("first call after %s, want at least one interval (%s)", first, interval)
	}
}
