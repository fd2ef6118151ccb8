// Package tick is the one ticker loop of the module's periodic work (lease
// renewal and reaping, mailbox maintenance, GPU idle stops, device lock renewal,
// the fencing proxy's WebSocket revalidation): call a function every interval
// until the context ends or the function says stop.
//
// It imports nothing of the module, so any package above the egress and confine
// floors may use it (those two import no package of the module and keep their
// own loops).
package tick

import (
	"context"
	"time"
)

// Every calls fn every interval until ctx ends or fn returns an error. The first
// call comes one interval after Every starts, and a call is never overlapped by
// the next: ticks that fall while fn runs are dropped, as time.Ticker drops them.
// Every returns fn's error, or ctx.Err() once ctx has ended. interval must be
// positive, as for time.NewTicker.
func Every(ctx context.Context, interval time.Duration, fn func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := fn(); err != nil {
			return err
		}
	}
}
