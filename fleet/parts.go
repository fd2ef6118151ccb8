package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
)

// cleanupPayload is the payload of queue.TypeRunCleanup, enqueued once per run when
// its terminal event is stored (an alias, so cleanupRun reads as before).
type cleanupPayload = queue.CleanupPayload

// openParts builds the Redis-stream parts, the sandbox and the device driver.
func (f *Fleet) openParts(ctx context.Context, cfg config.Config, opts Options) error {
	reg := f.Metrics.Registry
	mbm, err := mailbox.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("mailbox metrics: %w", err)
	}
	f.Mailbox = mailbox.New(f.Redis, cfg.Streams.Mailbox, mailbox.Options{Metrics: mbm, Log: f.Log,
		OnDeadLetter: func(ctx context.Context, d mailbox.DeadLetter) {
			if err := f.Events.Emit(ctx, d.RunID, "dead-letter:"+d.ID, "mailbox.dead_letter", d.To, map[string]any{
				"message_id": d.ID, "from": d.From, "to": d.To, "reason": d.Reason,
			}); err != nil {
				f.Log.Error("dead-letter event", "run_id", d.RunID, "err", err)
			}
		}})
	lm, err := lease.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("lease metrics: %w", err)
	}
	if f.Leases, err = lease.New(f.Redis, cfg.Streams.Leases, lease.Options{Metrics: lm}); err != nil {
		return fmt.Errorf("streams.leases: %w", err)
	}
	gm, err := gpu.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("gpu metrics: %w", err)
	}
	needsDocker := false
	for _, s := range cfg.Streams.Leases.Services {
		needsDocker = needsDocker || s.Image != ""
	}
	if needsDocker {
		dc, err := gpu.NewDockerClient()
		if err != nil {
			return fmt.Errorf("streams.leases: services with an image need a Docker engine: %w", err)
		}
		if f.GPU, err = gpu.New(f.Leases, dc, gpu.Config{}, gpu.Options{Metrics: gm, Log: f.Log}); err != nil {
			return fmt.Errorf("gpu controller: %w", err)
		}
	}

	dm := device.NewMetrics(reg)
	if opts.Device != nil {
		if f.Device, err = device.New(*opts.Device, device.Deps{Redis: f.Redis, Metrics: dm, Log: f.Log}); err != nil {
			return fmt.Errorf("device: %w", err)
		}
	} else if sf := cfg.Devices.SteamFrame; sf.Enabled {
		f.Device, err = device.New(device.Config{
			Host: sf.Host, User: sf.User, SSHPort: sf.SSHPort, ADBPort: sf.ADBPort, KeyPath: sf.KeyPath,
			ScriptsDir: sf.ScriptsDir, SimScenario: sf.SimScenario, SimBin: sf.SimBin,
			CaptureInterval: sf.CaptureInterval.D(), MaxRunDuration: sf.MaxRunDuration.D(),
		}, device.Deps{Redis: f.Redis, Metrics: dm, Log: f.Log})
		if err != nil {
			return fmt.Errorf("devices.steam_frame: %w", err)
		}
	}

	f.Executor = opts.Executor
	if f.Executor == nil && !opts.NoSandbox {
		// A sandbox that cannot start leaves run_shell failing with a clear error at
		// call time; the rest of the fleet still runs. Never a silent host fallback.
		scfg := cfg.Sandbox
		if scfg.Docker.Scope == "" {
			// The default scope is this fleet's id, not a constant: two fleets on one
			// Docker engine must never sweep each other's containers.
			id, err := f.Store.FleetID(ctx)
			if err != nil {
				return err
			}
			scfg.Docker.Scope = id
		}
		ex, err := sandbox.New(ctx, scfg, f.Log)
		if err != nil {
			f.Log.Error("sandbox unavailable: run_shell and read_logs will fail", "err", err)
		} else {
			f.Executor = ex
			f.ownExecutor = true
		}
	}
	f.openEgressProxy(ctx, cfg, opts)
	return nil
}

// onEvent fans a stored event out: webhooks, and the cleanup of a finished run.
func (f *Fleet) onEvent(ctx context.Context, e events.Stored) error {
	if f.Webhooks != nil {
		if err := f.Webhooks.OnEvent(ctx, e); err != nil {
			return err
		}
	}
	if events.Terminal(e.Type) {
		if err := f.Queue.CleanupRun(ctx, e.RunID); err != nil {
			return fmt.Errorf("enqueue run cleanup: %w", err)
		}
	}
	return nil
}

// cleanupRun is idempotent: every release tolerates "already released".
func (f *Fleet) cleanupRun(ctx context.Context, t *asynq.Task) error {
	var p cleanupPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	var errs []error
	if err := f.Mailbox.DeleteRun(ctx, p.RunID); err != nil {
		errs = append(errs, fmt.Errorf("mailboxes: %w", err))
	}
	if err := f.Leases.ReleaseAll(ctx, p.RunID); err != nil {
		errs = append(errs, fmt.Errorf("leases: %w", err))
	}
	if f.Executor != nil {
		if err := f.Executor.Release(ctx, p.RunID); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: %w", err))
		}
	}
	return errors.Join(errs...)
}

// runActive reports whether a run may still need its resources; a lookup error
// counts as active, so a database hiccup never removes a live container.
func (f *Fleet) runActive(ctx context.Context, runID string) bool {
	r, err := f.Store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	return err != nil || !store.Terminal(r.Status)
}

// cleanupOrphans removes sandbox containers of runs that ended (or vanished).
func (f *Fleet) cleanupOrphans(ctx context.Context) error {
	d, ok := f.Executor.(*sandbox.Docker)
	if !ok {
		return nil
	}
	_, err := d.CleanupOrphans(ctx, func(runID string) bool { return f.runActive(ctx, runID) })
	return err
}

// sweepWorkspaces unmounts the workspaces of runs that ended more than
// workspace_unmount_after ago (or vanished); Open mounts one again when needed.
// Each run is looked up under its workspace's lock, so a lookup error keeps the
// workspace mounted.
func (f *Fleet) sweepWorkspaces(ctx context.Context) error {
	after := f.Workspaces.Config().UnmountAfter
	swept, err := f.Workspaces.Sweep(ctx, func(ctx context.Context, runID string) bool {
		r, err := f.Store.GetRun(ctx, runID)
		if errors.Is(err, store.ErrNotFound) {
			return true
		}
		return err == nil && store.Terminal(r.Status) && r.FinishedAt != nil && time.Since(*r.FinishedAt) > after
	})
	if len(swept) > 0 {
		f.Log.Info("workspaces unmounted", "count", len(swept), "unmount_after", after.String())
	}
	return err
}
