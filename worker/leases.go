package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
)

// holdLeases acquires (or renews — re-acquiring an owned lease renews it) a lease per
// GPU service the team declares, with the run as holder, and keeps them renewed
// while the step runs. Leases outlive the step: the run's cleanup releases them.
// The returned context carries the grants (lease.GrantFrom) and ends if one is lost.
func (w *Worker) holdLeases(ctx context.Context, runID string, services []string) (context.Context, func(), error) {
	if w.leases == nil {
		return ctx, func() {}, fmt.Errorf("%w: this deployment has no lease manager", lease.ErrUnknownService)
	}
	svcs := append([]string(nil), services...)
	sort.Strings(svcs) // one global order: two runs never hold-and-wait in opposite orders
	var grants []lease.Grant
	for _, s := range svcs {
		var g lease.Grant
		var err error
		if w.gpu != nil {
			g, err = w.gpu.Acquire(ctx, s, runID)
		} else {
			g, err = w.leases.Acquire(ctx, s, runID)
		}
		if err != nil {
			return ctx, func() {}, err
		}
		grants = append(grants, g)
	}
	kctx, cancel := context.WithCancelCause(ctx)
	for _, g := range grants {
		go func() {
			if err := w.leases.Keep(kctx, g, 0); errors.Is(err, lease.ErrLost) {
				cancel(fmt.Errorf("GPU lease on %s lost: %w", g.Service, err))
			}
		}()
	}
	return lease.WithGrants(kctx, grants...), func() { cancel(nil) }, nil
}

// leaseFailure classifies a holdLeases error: retry later, or fail the run.
func leaseFailure(err error) (retry bool, reason string) {
	switch {
	case errors.Is(err, lease.ErrWaiting):
		return true, ""
	case errors.Is(err, gpu.ErrStartFailed):
		return false, "gpu_start_failed"
	case errors.Is(err, lease.ErrUnknownService):
		return false, "unknown_gpu_service"
	}
	return true, ""
}
